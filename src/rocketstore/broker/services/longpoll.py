"""Long polling: suspended PULL_MESSAGE requests wait here until their queue grows.

Theory of operation: a pull that finds nothing and carries the SUSPEND flag calls
``wait(topic, queue_id, offset, timeout, reader)``; the handler coroutine simply sleeps on a
future. The store's reput thread calls ``arrival(topic, queue_id, max_offset)`` after
dispatching new messages; it does nothing unless someone waits on that queue. Otherwise, for up
to ``inline_reads`` of the waiters the arrival concerns, it runs the waiter's ``reader`` (the
pull's own ``store.get_message``) right there on the reput thread — the data was dispatched a
moment ago — and hands the result to the loop with one ``call_soon_threadsafe``: the woken
handler answers at once instead of hopping to an executor thread and back. Any other waiter
whose offset is now below the max offset is just woken and reads for itself. ``wait`` never
sleeps longer than ``recheck_s`` at a time, so a missed wake-up costs at most that long;
``wake_all`` releases everybody at shutdown. ``_waiters`` is changed only on the event loop;
the reput thread reads it under ``_lock``.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)
Reader = Callable[[], Any]


class PullHoldService:
    def __init__(self, loop: asyncio.AbstractEventLoop, recheck_s: float = 1.0,
                 inline_reads: int = 8) -> None:
        self._loop = loop
        self.recheck_s = recheck_s
        self.inline_reads = inline_reads
        self._lock = threading.Lock()
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future, Reader | None]]] = {}
        self.closed = False

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    def arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Called from the store's reput thread after messages are dispatched."""
        key = (topic, queue_id)
        if key not in self._waiters:
            return
        with self._lock:
            waiters = list(self._waiters.get(key, ()))
        reads = []
        for offset, fut, reader in waiters:
            if len(reads) >= self.inline_reads:
                break
            if reader is None or offset >= max_offset or fut.done():
                continue
            try:
                reads.append((fut, reader()))
            except Exception:  # the handler reads again by itself
                log.debug("inline read failed", exc_info=True)
        try:
            self._loop.call_soon_threadsafe(self._wake, key, max_offset, reads)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _wake(self, key: tuple[str, int], max_offset: int, reads: list) -> None:
        for fut, result in reads:
            if not fut.done():
                fut.set_result(result)
        waiters = self._waiters.get(key)
        if not waiters:
            return
        for offset, fut, _ in waiters:
            if not fut.done() and max_offset > offset:
                fut.set_result(True)

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float,
                   reader: Reader | None = None) -> Any:
        """Sleep until the queue may have a message at ``offset`` or the timeout (at most
        ``recheck_s``). Returns False on timeout, True when woken, or the ``reader``'s result
        when the reput thread read for us."""
        if self.closed or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        fut = self._loop.create_future()
        entry = (offset, fut, reader)
        with self._lock:
            self._waiters.setdefault(key, []).append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), min(timeout_s, self.recheck_s))
            return fut.result()
        except asyncio.TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
            with self._lock:
                lst = self._waiters.get(key)
                if lst is not None:
                    lst[:] = [w for w in lst if w[1] is not fut]
                    if not lst:
                        del self._waiters[key]

    def wake_all(self) -> None:
        self.closed = True
        with self._lock:
            everyone = [w for lst in self._waiters.values() for w in lst]
            self._waiters.clear()
        for _, fut, _ in everyone:
            if not fut.done():
                fut.set_result(False)
