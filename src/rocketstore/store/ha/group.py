"""Group transfer: SYNC_MASTER puts waiting for a slave's acknowledgement, served together.

Theory of operation (RocketMQ's ``GroupTransferService``). Every acknowledgement moves
``acked`` (the highest offset any slave reported; it never goes down) and wakes one thread,
which completes every waiting put whose end offset is at or below it (``PUT_OK``) and every
put whose ``slaveTimeout`` passed (``FLUSH_SLAVE_TIMEOUT``). One acknowledgement therefore
answers all the puts below it: a SYNC_MASTER costs round trips to the slave, not work per
message. Waiters are callbacks (the broker's event loop resolves a future from them) or a
blocking ``wait`` for the store API.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

Callback = Callable[[bool], None]  # True: acknowledged; False: timed out


class GroupTransfer:
    def __init__(self, timeout_ms: int) -> None:
        self.timeout_s = timeout_ms / 1000.0
        self.acked = 0
        self._pending: list[tuple[int, float, Callback]] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="HAGroupTransfer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            pending, self._pending = self._pending, []
            self._cond.notify_all()
        for _, _, cb in pending:
            _call(cb, False)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def ack(self, offset: int) -> None:
        with self._cond:
            if offset > self.acked:
                self.acked = offset
                if self._pending:
                    self._cond.notify()

    def submit(self, offset: int, callback: Callback) -> None:
        """Call ``callback(True)`` once a slave acknowledged ``offset``, else ``callback(False)``
        after ``slaveTimeout`` (from the callback thread; keep it short)."""
        with self._cond:
            if self.acked >= offset:
                done = True
            elif self._stop:
                done = False
            else:
                self._pending.append((offset, time.monotonic() + self.timeout_s, callback))
                self._cond.notify()
                return
        _call(callback, done)

    def wait(self, offset: int) -> bool:
        """Block until ``offset`` is acknowledged (True) or ``slaveTimeout`` passed (False)."""
        ev = threading.Event()
        box = [False]

        def done(ok: bool) -> None:
            box[0] = ok
            ev.set()
        self.submit(offset, done)
        ev.wait(self.timeout_s + 2.0)
        return box[0]

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                if not self._pending:
                    self._cond.wait(0.5)
                else:
                    nearest = min(d for _, d, _ in self._pending)
                    self._cond.wait(max(0.001, min(0.01, nearest - time.monotonic())))
                if not self._pending:
                    continue
                now = time.monotonic()
                acked = self.acked
                finished = [(cb, off <= acked) for off, d, cb in self._pending
                            if off <= acked or d <= now]
                if finished:
                    self._pending = [p for p in self._pending if not (p[0] <= acked or p[1] <= now)]
            for cb, ok in finished:
                _call(cb, ok)


def _call(cb: Callback, ok: bool) -> None:
    try:
        cb(ok)
    except Exception:  # noqa: BLE001 - one waiter's failure must not stop the others
        import logging
        logging.getLogger(__name__).exception("replica wait callback failed")
