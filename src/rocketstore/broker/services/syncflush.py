"""``SyncFlushWaiter``: SYNC_FLUSH acknowledgements on the event loop, one hand-off per fsync.

Theory of operation: under SYNC_FLUSH a send is answered only once its bytes are durable. The
broker appends on its event loop (``put(..., nowait=True, defer_sync=True)``, through the
``PutWriter`` like ASYNC_FLUSH puts), which returns at once with ``sync_offset``, the CommitLog
end the put needs on disk. ``wait(result)`` parks the put's future in a heap ordered by that
offset. The store's flush thread syncs whenever unflushed bytes exist and, after each sync, calls
``_on_flush`` once; that does a single ``call_soon_threadsafe`` which releases every parked put
whose offset is now covered. So a sync serving N puts costs one thread hand-off, not N, and no put
ever occupies a thread while it waits. A put still parked after ``sync_flush_timeout`` ms, or
when a sync fails, is answered FLUSH_DISK_TIMEOUT, as RocketMQ's ``GroupCommitService`` does
(its bytes are written, maybe not yet durable).
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Callable

from ...store.results import PutMessageResult, PutStatus

SWEEP_S = 0.25  # how often parked puts are checked against their deadline


class SyncFlushWaiter:
    def __init__(self, loop: asyncio.AbstractEventLoop, flushed_offset: Callable[[], int],
                 timeout_ms: int) -> None:
        self._loop = loop
        self._flushed = flushed_offset
        self._timeout_s = timeout_ms / 1000.0
        self._heap: list[tuple[int, int, float, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._sweep: asyncio.TimerHandle | None = None
        self._failed: BaseException | None = None

    # -- flush thread ---------------------------------------------------------------------------
    def on_flush(self, offset: int, error: BaseException | None) -> None:
        """The store's flush listener (runs on the thread that synced)."""
        try:
            self._loop.call_soon_threadsafe(self._release, offset, error)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    # -- event loop -----------------------------------------------------------------------------
    async def wait(self, result: PutMessageResult) -> PutMessageResult:
        """``result`` once its ``sync_offset`` is durable; FLUSH_DISK_TIMEOUT status otherwise."""
        fut = self.park(result)
        if fut is not None and not await fut:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
        return result

    def park(self, result: PutMessageResult) -> asyncio.Future[bool] | None:
        """``wait`` without a coroutine (a caller chaining callbacks): None when ``result``
        needs no wait (durable already, or FLUSH_DISK_TIMEOUT set because syncs fail), else a
        future that becomes True once durable, False at the timeout."""
        offset = result.sync_offset
        if not offset or self._flushed() >= offset:
            return None
        if self._failed is not None:
            result.status = PutStatus.FLUSH_DISK_TIMEOUT
            return None
        fut = self._loop.create_future()
        heapq.heappush(self._heap, (offset, next(self._seq), time.monotonic() + self._timeout_s, fut))
        if self._sweep is None:
            self._sweep = self._loop.call_later(SWEEP_S, self._expire)
        return fut

    def _release(self, offset: int, error: BaseException | None) -> None:
        heap = self._heap
        if error is not None:
            self._failed = error
            while heap:
                _set(heapq.heappop(heap)[3], False)
            return
        flushed = max(offset, self._flushed())
        while heap and heap[0][0] <= flushed:
            _set(heapq.heappop(heap)[3], True)

    def _expire(self) -> None:
        self._sweep = None
        now = time.monotonic()
        keep = []
        for entry in self._heap:
            if entry[2] <= now:
                _set(entry[3], False)
            elif not entry[3].done():
                keep.append(entry)
        heapq.heapify(keep)
        self._heap = keep
        if keep:
            self._sweep = self._loop.call_later(SWEEP_S, self._expire)

    def close(self) -> None:
        """Answer every parked put (the broker is stopping: the store's last flush decides)."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        self._release(0, None)
        while self._heap:
            _set(heapq.heappop(self._heap)[3], False)


def _set(fut: asyncio.Future[bool], ok: bool) -> None:
    if not fut.done():
        fut.set_result(ok)
