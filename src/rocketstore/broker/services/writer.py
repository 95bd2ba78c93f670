"""``PutWriter``: one thread that runs every put, draining all queued puts per wake-up.

Theory of operation: with ASYNC_FLUSH a put only copies bytes into the mapped CommitLog, so
concurrency buys nothing but contention (the store serialises appends under its lock, and every
thread hop costs a GIL hand-off). Requests from all connections are queued here; the thread takes
everything queued at once, puts it back to back (the store's reput then dispatches the lot in one
pass instead of one pass per message) and hands all results to the event loop with a single
``call_soon_threadsafe``. With SYNC_FLUSH the puts given here only append (``defer_sync``): the
wait for the group commit happens afterwards on the event loop (``syncflush``), so no put holds
this thread while the disk syncs.

Most puts never reach the thread: a put function listed in ``inline`` is first called on the
event loop with ``nowait=True``. An ASYNC_FLUSH append is a copy into the mapped segment, which
costs less than the two GIL hand-offs to the thread and back (each ~100 µs or more on a busy
machine); the store answers None instead of blocking — its lock is held, or a new segment must be
created — and only then does the put go to the thread. Nothing is tried inline while puts are
queued, so one connection's puts keep their order.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Callable, Optional

from ...store.results import PutMessageResult

#: a put the writer runs: ``fn(*args)`` on its thread, ``fn(*args, nowait=True)`` inline
Results = Optional[list[PutMessageResult]]
PutCall = Callable[..., Results]


class PutWriter:
    def __init__(self, loop: asyncio.AbstractEventLoop, inline: tuple[PutCall, ...] = ()) -> None:
        self._loop = loop
        self._inline = set(inline)
        self._queue: deque[tuple[asyncio.Future[Results], PutCall, tuple[object, ...]]] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="broker-put", daemon=True)
        self._thread.start()

    def submit(self, fn: PutCall, *args: object) -> asyncio.Future[Results]:
        fut = self._loop.create_future()
        if fn in self._inline and not self._queue:
            try:
                result = fn(*args, nowait=True)
            except Exception as exc:  # handed to the awaiting handler, as from the thread
                fut.set_exception(exc)
                return fut
            if result is not None:
                fut.set_result(result)
                return fut
        with self._cond:
            if self._stopped:
                raise RuntimeError("the put writer is stopped")
            self._queue.append((fut, fn, args))
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if not self._queue and self._stopped:
                    return
                batch = list(self._queue)
                self._queue.clear()
            done: list[tuple[asyncio.Future[Results], Results, BaseException | None]] = []
            for fut, fn, args in batch:
                try:
                    done.append((fut, fn(*args), None))
                except BaseException as exc:  # handed to the awaiting handler
                    done.append((fut, None, exc))
            try:
                self._loop.call_soon_threadsafe(_deliver, done)
            except RuntimeError:  # loop closed at shutdown
                return

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(10)


def _deliver(done: list[tuple[asyncio.Future[Results], Results, BaseException | None]]) -> None:
    for fut, result, exc in done:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
