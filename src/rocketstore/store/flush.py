"""Flush services: SYNC_FLUSH group commit, ASYNC_FLUSH periodic flush, logics flush.

Theory of operation.

* **What "flushed" means.** ``flush_commitlog`` walks the CommitLog segments that hold unflushed
  bytes, oldest first, and ``fdatasync``s each one (``MappedFile.flush``; the call releases the
  GIL, so putters keep appending while the disk works). A segment's flushed position only moves
  to the write position captured *before* the sync, so ``CommitLog.flushed_offset()`` never
  claims a byte that was not on disk when the sync returned.
* **SYNC_FLUSH: leader/follower group commit.** A putter appends under the put lock, then calls
  ``wait_flushed(end_offset)``. If no sync is running it becomes the *leader* and syncs
  *everything written so far* itself (no hand-off to another thread: two context switches
  saved per put); if one is running it waits on a condition, and when woken either finds its
  end covered or leads the next sync. Putters that append while a sync runs are covered by the
  next one, so N concurrent putters share one fsync (``flush_count`` counts the syncs; the tests
  and the benchmark read it). A putter still waiting after ``sync_flush_timeout`` ms gets
  ``False`` → ``FLUSH_DISK_TIMEOUT`` (its bytes are written, maybe not yet durable).
  ``WAIT=false`` puts are synced by the service thread within 10 ms.
* **SYNC_FLUSH for event loops: no hand-off per put.** A broker appends on its event loop
  (``put(..., nowait=True, defer_sync=True)``) and does not wait there; ``request_sync`` wakes
  the service thread only when it is idle (one flag read otherwise). The thread syncs while
  unflushed bytes exist — every put appended before a sync starts is covered by it — and after
  each sync calls the ``add_listener`` callbacks once with the new flushed offset (or with the
  error), so one cross-thread hand-off answers every put that sync covered.
* **ASYNC_FLUSH.** Every ``flush_interval_commitlog`` ms the thread flushes the segments that
  have at least ``flush_commitlog_least_pages`` dirty OS pages (a full segment always
  qualifies, as in RocketMQ's ``isAbleToFlush``), and every ``flush_commitlog_thorough_interval``
  ms it flushes everything. A process crash loses nothing (the page cache survives); a power
  loss can lose the last interval.
* **Checkpoint: payload first, checkpoint second.** After a sync the checkpoint's physic time is
  set to the store time of the last message below the synced position (time and position are
  read together under the put lock), so it never runs ahead of the disk. The logics
  thread (its own schedule: every ``flush_interval_consume_queue`` ms the queues with at least
  ``flush_consume_queue_least_pages`` dirty pages, all of them every
  ``flush_consume_queue_thorough_interval`` ms) reads the live logics time *first*, then
  flushes the ConsumeQueues and the index, then — after a thorough round only, as RocketMQ's
  ``FlushConsumeQueueService`` — marks that time durable, and writes the checkpoint
  (``StoreCheckpoint.mark_logics_durable``).
* **Errors.** A failed CommitLog sync is fatal for durability: ``last_error`` is set, every
  waiter is woken and fails, the put path refuses new puts (SERVICE_NOT_AVAILABLE) and
  ``shutdown`` keeps the abort file. Nothing is swallowed. A logics/checkpoint flush error is
  recorded in ``last_logics_error``, logged and retried next round (the checkpoint on disk
  only gets older, which makes the next recovery walk back further — always safe).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..config import StoreConfig
from .commitlog import CommitLog
from .mapped_file import OS_PAGE_SIZE

log = logging.getLogger(__name__)

SYNC_WAIT_S = 0.01  # GroupCommitService.waitForRunning(10)


def flush_segments(commitlog: CommitLog, least_pages: int = 0) -> tuple[int, int]:
    """Sync the dirty segments, oldest first: (flushed offset, store time of the flushed data).

    With ``least_pages`` a segment that is not full and has fewer dirty pages is left (and so is
    everything after it). The store time is 0 when nothing was flushed.
    """
    ts = 0
    for mf in list(commitlog.queue.files):
        wrote = mf.wrote_position
        if mf.flushed_position >= wrote:
            continue
        if least_pages > 0 and not mf.is_full():
            dirty = wrote // OS_PAGE_SIZE - mf.flushed_position // OS_PAGE_SIZE
            if dirty < least_pages:
                break
        with commitlog.lock:  # a consistent pair: the time of the last record below ``upto``
            seg_ts, upto = mf.store_timestamp, mf.wrote_position
        mf.flush(0, upto=upto)
        if seg_ts:
            ts = seg_ts
    return commitlog.flushed_offset(), ts


class FlushService:
    """CommitLog flushing (sync group commit or async periodic) plus the logics flush."""

    def __init__(self, cfg: StoreConfig, commitlog: CommitLog,
                 on_flushed: Callable[[int], None],
                 flush_logics: Callable[[], None],
                 checkpoint=None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self.on_flushed = on_flushed  # physic timestamp of the flushed data
        self.flush_logics = flush_logics  # flushes ConsumeQueues and index (payload only)
        self.checkpoint = checkpoint  # StoreCheckpoint, written after the payload
        self.clock = clock
        self.last_error: BaseException | None = None
        self.last_logics_error: BaseException | None = None
        self.flush_count = 0  # CommitLog syncs that moved the flushed offset
        self.logics_flush_count = 0
        self._cond = threading.Condition()
        self._syncing = False  # a leader is running a sync (SYNC_FLUSH group commit)
        self._idle = False  # the SYNC_FLUSH thread is about to wait: a request must notify
        self._listeners: list[Callable[[int, BaseException | None], None]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_thorough = clock()
        self._last_logics_thorough = clock()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run_commitlog, name="FlushCommitLog", daemon=True),
                         threading.Thread(target=self._run_logics, name="FlushLogics", daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop both threads, then flush everything once more (payload, then checkpoint)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []
        if self.last_error is None:
            self.flush_once(thorough=True)
        self.flush_logics_once(thorough=True)
        if self.last_logics_error is not None:
            raise self.last_logics_error

    @property
    def healthy(self) -> bool:
        return self.last_error is None

    # -- SYNC_FLUSH -----------------------------------------------------------------------------
    def wait_flushed(self, offset: int, timeout_ms: int | None = None) -> bool:
        """Block until ``offset`` is durable; False on timeout or flush error.

        Leader/follower group commit: if no sync is running the caller runs one itself (no
        thread hand-off), covering every byte appended so far; otherwise it waits for the running
        one and, if that did not cover it, leads the next.
        """
        flushed = self.commitlog.flushed_offset
        if flushed() >= offset:
            return True
        timeout = (self.cfg.sync_flush_timeout if timeout_ms is None else timeout_ms) / 1000.0
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if flushed() >= offset:
                    return True
                if self.last_error is not None:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if not self._syncing:
                    self._syncing = True
                    break
                self._cond.wait(left)
        return self._lead_sync() and flushed() >= offset

    def _lead_sync(self) -> bool:
        """Run one sync as the leader (``_syncing`` already claimed); wake every waiter."""
        try:
            time.sleep(0)  # yield the GIL once: putters already woken append before the sync
            self.flush_once()
            return True
        except BaseException as exc:  # noqa: BLE001 - kept in last_error; waiters fail
            self.last_error = exc
            log.exception("CommitLog flush failed; the store stops accepting puts")
            self._tell(-1, exc)
            return False
        finally:
            with self._cond:
                self._syncing = False
                self._cond.notify_all()

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def request_sync(self) -> None:
        """Bytes were appended that a caller waits to see durable (``defer_sync``). Cheap: the
        thread re-checks for unflushed bytes before it waits, so only an idle thread is woken."""
        if self._idle:
            with self._cond:
                self._cond.notify_all()

    def add_listener(self, fn: Callable[[int, BaseException | None], None]) -> None:
        """Call ``fn(flushed_offset, None)`` after every sync that moved the flushed offset and
        ``fn(-1, error)`` when a sync fails, on the thread that synced. Keep it short."""
        self._listeners.append(fn)

    def _tell(self, offset: int, error: BaseException | None) -> None:
        for fn in self._listeners:
            try:
                fn(offset, error)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the flushing
                log.exception("flush listener failed")

    # -- one round (also the deterministic test hooks) ------------------------------------------
    def flush_once(self, thorough: bool = False) -> int:
        """One CommitLog flush round; returns the flushed offset. I/O errors propagate."""
        least = 0
        if not self.cfg.sync_flush and not thorough:
            now = self.clock()
            if (now - self._last_thorough) * 1000 >= self.cfg.flush_commitlog_thorough_interval:
                self._last_thorough = now
            else:
                least = self.cfg.flush_commitlog_least_pages
        before = self.commitlog.flushed_offset()
        after, ts = flush_segments(self.commitlog, least)
        if after > before:
            self.flush_count += 1
            if ts:
                self.on_flushed(ts)
            if self._listeners:
                self._tell(after, None)
        return after

    def flush_logics_once(self, thorough: bool = False) -> None:
        """ConsumeQueues and index first, then the checkpoint. Errors are kept and re-raised."""
        try:
            live_logics = self.checkpoint.logics_msg_timestamp if self.checkpoint is not None else 0
            least = 0 if thorough else self.cfg.flush_consume_queue_least_pages
            self.flush_logics(least)
            self.logics_flush_count += 1
            if self.checkpoint is not None:
                if least == 0:  # every queue is on disk up to the time read before the flush
                    self.checkpoint.mark_logics_durable(live_logics)
                self.checkpoint.flush()
            self.last_logics_error = None
        except BaseException as exc:
            self.last_logics_error = exc
            raise

    # -- threads --------------------------------------------------------------------------------
    def _run_commitlog(self) -> None:
        sync = self.cfg.sync_flush
        interval = SYNC_WAIT_S if sync else self.cfg.flush_interval_commitlog / 1000.0
        flushed = self.commitlog.flushed_offset
        while not self._stop.is_set():
            if sync:
                # blocking putters lead their own syncs; this thread covers WAIT=false and
                # deferred (event-loop) puts, syncing back to back while bytes keep arriving
                with self._cond:
                    self._idle = True  # before the check: a put appended after it notifies
                    if self._syncing or flushed() >= self.commitlog.max_offset():
                        self._cond.wait(interval)
                    self._idle = False
                    if self._stop.is_set() or self._syncing or flushed() >= self.commitlog.max_offset():
                        continue
                    self._syncing = True
                if not self._lead_sync():
                    return
                continue
            self._stop.wait(interval)
            if self._stop.is_set():
                break
            try:
                self.flush_once()
            except BaseException as exc:  # noqa: BLE001 - kept in last_error, waiters fail
                self.last_error = exc
                log.exception("CommitLog flush failed; the store stops accepting puts")
                return

    def _run_logics(self) -> None:
        interval = self.cfg.flush_interval_consume_queue / 1000.0
        while not self._stop.wait(interval):
            now = self.clock()
            thorough = (now - self._last_logics_thorough) * 1000 >= self.cfg.flush_consume_queue_thorough_interval
            if thorough:
                self._last_logics_thorough = now
            try:
                self.flush_logics_once(thorough)
            except BaseException:  # noqa: BLE001 - kept in last_logics_error, retried next round
                log.exception("ConsumeQueue/index/checkpoint flush failed; will retry")
