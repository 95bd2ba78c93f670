"""Long polling: suspended PULL_MESSAGE requests wait here until their queue grows.

Theory of operation: a pull that finds nothing and carries the SUSPEND flag calls
``wait(topic, queue_id, offset, timeout)``; the handler coroutine simply sleeps on a future.
The store's reput thread calls ``arrival(topic, queue_id, max_offset)`` after dispatching new
messages; it only hops onto the event loop (``call_soon_threadsafe``) when someone waits on that
queue, so a busy producer costs nothing when nobody is polling. ``_wake`` resolves every waiter
whose offset is now below the queue's max offset. ``wait`` never sleeps longer than
``recheck_s`` at a time, so a missed wake-up (there is a window between the handler's last read
and its registration) costs at most that long; callers re-read the store after every wake.
``wake_all`` releases everybody at shutdown.
"""
from __future__ import annotations

import asyncio
from collections import defaultdict


class PullHoldService:
    def __init__(self, loop: asyncio.AbstractEventLoop, recheck_s: float = 1.0) -> None:
        self._loop = loop
        self.recheck_s = recheck_s
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = defaultdict(list)
        self._watched: set[tuple[str, int]] = set()
        self.closed = False

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    def arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called from any thread (the store's reput) after messages are dispatched."""
        if (topic, queue_id) in self._watched:
            try:
                self._loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)
            except RuntimeError:  # loop closed during shutdown
                pass

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        key = (topic, queue_id)
        waiters = self._waiters.get(key)
        if not waiters:
            return
        keep = []
        for offset, fut in waiters:
            if fut.done():
                continue
            if max_offset > offset:
                fut.set_result(True)
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[key] = keep
        else:
            self._waiters.pop(key, None)
            self._watched.discard(key)

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Sleep until the queue may have a message at ``offset`` or the timeout (at most
        ``recheck_s``); True when woken by an arrival."""
        if self.closed or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        fut = self._loop.create_future()
        self._waiters[key].append((offset, fut))
        self._watched.add(key)
        try:
            await asyncio.wait_for(asyncio.shield(fut), min(timeout_s, self.recheck_s))
            return bool(fut.result())
        except asyncio.TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
            lst = self._waiters.get(key)
            if lst is not None:
                lst[:] = [w for w in lst if w[1] is not fut]
                if not lst:
                    self._waiters.pop(key, None)
                    self._watched.discard(key)

    def wake_all(self) -> None:
        self.closed = True
        for lst in self._waiters.values():
            for _, fut in lst:
                if not fut.done():
                    fut.set_result(False)
        self._waiters.clear()
        self._watched.clear()
