"""PullHoldService: arrivals from another thread wake exactly the waiters they concern."""
from __future__ import annotations

import asyncio
import threading
import time

from rocketstore.broker.services.longpoll import PullHoldService


def test_arrival_from_another_thread_wakes_only_matching_waiters():
    async def scenario():
        hold = PullHoldService(asyncio.get_running_loop(), recheck_s=5.0)
        w_low = asyncio.ensure_future(hold.wait("T", 0, 3, 5.0))   # wants offset 3
        w_high = asyncio.ensure_future(hold.wait("T", 0, 10, 0.6))  # wants offset 10
        w_other = asyncio.ensure_future(hold.wait("T", 1, 0, 0.6))  # another queue
        await asyncio.sleep(0.05)
        assert hold.waiting == 3
        t0 = time.monotonic()
        threading.Thread(target=hold.arrival, args=("T", 0, 4)).start()  # max offset now 4
        assert await w_low is True and time.monotonic() - t0 < 0.5
        assert await w_high is False and await w_other is False  # timed out
        assert hold.waiting == 0
        hold.arrival("T", 0, 99)  # nobody waits: no callback is scheduled
        w = asyncio.ensure_future(hold.wait("T", 2, 0, 5.0))
        await asyncio.sleep(0.05)
        hold.wake_all()
        assert await w is False and hold.closed
        assert await hold.wait("T", 2, 0, 5.0) is False  # closed: returns at once
    asyncio.run(scenario())


def test_the_reput_thread_reads_for_woken_waiters():
    async def scenario():
        hold = PullHoldService(asyncio.get_running_loop(), recheck_s=5.0, inline_reads=1)
        readers_ran_on = []

        def reader(tag):
            def read():
                readers_ran_on.append(threading.current_thread().name)
                return type("Result", (), {"status": tag})()
            return read
        a = asyncio.ensure_future(hold.wait("T", 0, 0, 5.0, reader("A")))
        b = asyncio.ensure_future(hold.wait("T", 0, 0, 5.0, reader("B")))
        await asyncio.sleep(0.05)
        th = threading.Thread(target=hold.arrival, args=("T", 0, 1), name="reput")
        th.start()
        ra, rb = await a, await b
        th.join()
        return ra, rb, readers_ran_on
    ra, rb, ran_on = asyncio.run(scenario())
    assert ra.status == "A"  # read on the reput thread and handed over
    assert rb is True  # over the inline-read budget: just woken
    assert ran_on == ["reput"]
