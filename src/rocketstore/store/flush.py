"""Flush services: SYNC_FLUSH group commit and ASYNC_FLUSH periodic flush.

Theory of operation.
* **SYNC_FLUSH.** A putter appends, then calls ``wait_flushed(end_offset)``. The flush thread
  collects every waiting request, flushes once (one msync covers all of them: group commit),
  then wakes each putter whose end offset is now durable. A putter that waits longer than
  ``sync_flush_timeout`` gets ``False`` (→ ``FLUSH_DISK_TIMEOUT``); its bytes are still written.
* **ASYNC_FLUSH.** Every ``flush_interval_commitlog`` ms the thread flushes when at least
  ``flush_commitlog_least_pages`` pages are dirty, and everything every
  ``flush_commitlog_thorough_interval`` ms. A process crash loses nothing (the page cache
  survives); a power loss can lose the last interval.
* After each CommitLog flush the checkpoint's physic timestamp moves to the store time of the
  last flushed message; ConsumeQueues and index are flushed every ``flush_interval_consume_queue``
  ms, then the checkpoint file is written (payload first, checkpoint second).
Flush errors propagate to ``last_error`` and fail the waiting putters; they are never swallowed.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..config import StoreConfig
from .commitlog import CommitLog

log = logging.getLogger(__name__)


class FlushService:
    def __init__(self, cfg: StoreConfig, commitlog: CommitLog,
                 on_flushed: Callable[[int], None],
                 flush_logics: Callable[[], None]) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self.on_flushed = on_flushed  # physic timestamp of the flushed data
        self.flush_logics = flush_logics
        self.last_error: BaseException | None = None
        self.flush_count = 0
        self._cond = threading.Condition()
        self._pending = 0  # highest offset a putter waits for
        self._stop = False
        self._thread: threading.Thread | None = None
        self._last_thorough = time.monotonic()
        self._last_logics = time.monotonic()

    def start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="FlushService", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # -- SYNC_FLUSH -----------------------------------------------------------------------------
    def wait_flushed(self, offset: int, timeout_ms: int | None = None) -> bool:
        """Block until ``offset`` is durable; False on timeout or flush error."""
        timeout = (self.cfg.sync_flush_timeout if timeout_ms is None else timeout_ms) / 1000.0
        deadline = time.monotonic() + timeout
        with self._cond:
            if offset > self._pending:
                self._pending = offset
            self._cond.notify_all()
            while self.commitlog.flushed_offset() < offset:
                if self.last_error is not None or self._stop:
                    return self.commitlog.flushed_offset() >= offset
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        sync = self.cfg.sync_flush
        interval = 0.01 if sync else self.cfg.flush_interval_commitlog / 1000.0
        while True:
            with self._cond:
                if self._stop:
                    break
                if sync and self._pending <= self.commitlog.flushed_offset():
                    self._cond.wait(interval)
                elif not sync:
                    self._cond.wait(interval)
                if self._stop:
                    break
            try:
                self.flush_once(thorough=False)
            except BaseException as exc:  # noqa: BLE001 - surfaced via last_error to waiters
                self.last_error = exc
                log.exception("flush failed")
                with self._cond:
                    self._cond.notify_all()
                return
        try:
            self.flush_once(thorough=True)
        except BaseException as exc:  # noqa: BLE001
            self.last_error = exc
            raise

    def flush_once(self, thorough: bool) -> None:
        now = time.monotonic()
        least = 0
        if not self.cfg.sync_flush and not thorough:
            if (now - self._last_thorough) * 1000 >= self.cfg.flush_commitlog_thorough_interval:
                self._last_thorough = now
            else:
                least = self.cfg.flush_commitlog_least_pages
        before = self.commitlog.flushed_offset()
        ts = self.commitlog.last_store_timestamp()  # taken first: never ahead of the flushed data
        after = self.commitlog.flush(least)
        if after > before:
            self.flush_count += 1
            if ts:
                self.on_flushed(ts)
            with self._cond:
                self._cond.notify_all()
        if thorough or (now - self._last_logics) * 1000 >= self.cfg.flush_interval_consume_queue:
            self._last_logics = now
            self.flush_logics()
