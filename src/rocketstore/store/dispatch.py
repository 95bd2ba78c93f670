"""Dispatch: the reput service that builds ConsumeQueues and indexes from the CommitLog.

Theory of operation. ``ReputService.run_once()`` reads committed bytes from ``reput_from``
(up to the confirmed offset: the flushed offset under SYNC_FLUSH, the written offset under
ASYNC_FLUSH), decodes them in one batch with ``format.batch.decode_records`` and hands the
columns to each dispatcher in order — ConsumeQueue first, then the index. Dispatchers are
idempotent (keyed by physical offset), so progress is only moved *after* they apply and a
re-dispatch after a crash is harmless. A blank record moves to the next segment; an incomplete
record waits for more bytes. Arrival listeners learn which queues grew (the broker's long
polling).

**Errors never stop the service.** Like RocketMQ's reput, a failed step (no descriptor left to
create a ConsumeQueue file, a full disk, a directory in the way, a damaged record) is logged,
kept in ``last_error`` and retried with a growing back-off (``RETRY_MIN_S`` … ``RETRY_MAX_S``);
nothing is lost because progress only moves after the dispatchers applied a batch. While it
fails, ``health()`` says so (``ok`` False, the error, since when, how many tries) and the put path
refuses new messages with ``SERVICE_NOT_AVAILABLE`` (RocketMQ's ``makeLogicsQueueError``), so
no producer is told PUT_OK for a message consumers could not see; the first step that
succeeds clears it and dispatch resumes where it stopped.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import numpy as np

from ..config import StoreConfig
from ..format import batch as fbatch
from ..format.batch import DecodedRecords
from ..format.record import MESSAGE_MAGICS
from ..format.message import TRANSACTION_MASK, TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE
from .commitlog import CommitLog, FeedItem
from .consume_queue import ConsumeQueue, queue_dir, queue_dirs

log = logging.getLogger(__name__)

COALESCE_RECORDS = 16
COALESCE_WAIT_S = 0.001

ArrivalListener = Callable[[str, int, int], None]
RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0
RECHECK_QUIET_S = 1.0  # after a put's early retry failed, refuse without waiting this long


class Dispatcher(Protocol):
    def dispatch(self, recs: DecodedRecords) -> None: ...


class ConsumeQueueTable:
    """Every ConsumeQueue of the store, created on first use."""

    def __init__(self, cfg: StoreConfig) -> None:
        self.cfg = cfg
        self.root = cfg.consume_queue_dir
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        for topic, qid, path in queue_dirs(self.root):
            cq = ConsumeQueue(topic, qid, path, self.cfg.cq_file_size, private=self.cfg.read_only)
            cq.load()
            self.queues[(topic, qid)] = cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, queue_dir(self.root, topic, queue_id),
                                      self.cfg.cq_file_size, private=self.cfg.read_only)
                    self.queues[(topic, queue_id)] = cq
        return cq

    def __iter__(self):
        return iter(list(self.queues.values()))

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues.values()), default=-1)


@functools.lru_cache(maxsize=65536)
def _queue_dir_safe(topic: str, queue_id: int) -> bool:
    """Whether ``consumequeue/<topic>/<queue_id>`` is a safe directory: the put path never
    stores other names; a damaged record may carry any."""
    if not topic or topic in (".", "..") or queue_id < 0:
        return False
    if any(c in topic for c in "/\\\x00") or len(topic.encode("utf-8", "surrogatepass")) > 255:
        return False
    return True


TINY_BATCH = 24  # records; at most this many are dispatched in plain Python, not numpy


class ConsumeQueueDispatcher:
    """Writes the units of NOT / COMMIT records; prepared and rollback records are skipped."""

    def __init__(self, table: ConsumeQueueTable, on_logics_timestamp: Callable[[int], None],
                 tiny_batch: int = TINY_BATCH) -> None:
        self.table = table
        self.on_logics_timestamp = on_logics_timestamp
        self.touched: dict[tuple[str, int], int] = {}
        self.tiny_batch = tiny_batch

    def dispatch(self, recs: DecodedRecords) -> None:
        n = len(recs)
        if n == 0:
            return
        if n <= self.tiny_batch:
            return self._dispatch_tiny(recs)
        tran = recs.sys_flag & TRANSACTION_MASK
        ok = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
        groups: dict[tuple[str, int], list[int]] = {}
        topics = recs.topic
        qids = recs.queue_id.tolist()
        for i in np.flatnonzero(ok).tolist():
            groups.setdefault((topics[i], qids[i]), []).append(i)
        for key in [k for k in groups if not _queue_dir_safe(*k)]:
            idx = groups.pop(key)
            log.error("no ConsumeQueue for %d record(s) from CommitLog offset %d: topic %r queue %d "
                      "cannot name a directory (a damaged record)", len(idx),
                      int(recs.offsets[idx[0]]), key[0], key[1])
        for key, idx_list in groups.items():
            idx = np.asarray(idx_list, dtype=np.int64)
            cq = self.table.find_or_create(*key)
            cq.put_units(recs.queue_offset[idx], recs.offsets[idx],
                         recs.size[idx].astype(np.int64), recs.tags_code[idx])
            self.touched[key] = cq.max_offset_in_queue()
        if ok.any():
            self.on_logics_timestamp(int(recs.store_timestamp[np.flatnonzero(ok)[-1]]))

    def _dispatch_tiny(self, recs: DecodedRecords) -> None:
        """``dispatch`` unit by unit: a single message costs ~40 numpy calls the other way."""
        topics, last_ts = recs.topic, None
        for i, (sys_flag, qid, qo, off, size, tags, ts) in enumerate(zip(
                recs.sys_flag.tolist(), recs.queue_id.tolist(), recs.queue_offset.tolist(),
                recs.offsets.tolist(), recs.size.tolist(), recs.tags_code.tolist(),
                recs.store_timestamp.tolist())):
            tran = sys_flag & TRANSACTION_MASK
            if tran != TRANSACTION_NOT_TYPE and tran != TRANSACTION_COMMIT_TYPE:
                continue
            key = (topics[i], qid)
            if not _queue_dir_safe(*key):
                log.error("no ConsumeQueue for the record at CommitLog offset %d: topic %r queue %d "
                          "cannot name a directory (a damaged record)", off, key[0], key[1])
                continue
            cq = self.table.find_or_create(*key)
            cq.put_unit(qo, off, size, tags)
            self.touched[key] = cq.max_offset_in_queue()
            last_ts = ts
        if last_ts is not None:
            self.on_logics_timestamp(last_ts)


@dataclass
class DispatchBatch:
    """What the reput hands the dispatchers (ConsumeQueue, index): the columns of consecutive
    records ``[start, end)`` of the CommitLog, decoded from the bytes or taken from the writer's
    feed (``records``: ``format.batch.DecodedRecords``)."""

    start: int
    end: int
    records: DecodedRecords

    def __len__(self) -> int:
        return len(self.records)


@dataclass(frozen=True)
class DispatchHealth:
    """``MessageStore.dispatch_health()``: whether consumers see what was stored."""

    ok: bool
    reput_from: int
    behind_bytes: int
    error: str | None = None
    failing_since_ms: int | None = None
    failures: int = 0
    skipped_bytes: int = 0  # damaged CommitLog bytes stepped over (logged with their range)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reput_from": self.reput_from, "behind_bytes": self.behind_bytes,
                "error": self.error, "failing_since_ms": self.failing_since_ms,
                "failures": self.failures, "skipped_bytes": self.skipped_bytes}


class ReputService:
    def __init__(self, cfg: StoreConfig, commitlog: CommitLog, dispatchers: list,
                 confirmed_offset: Callable[[], int]) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self.dispatchers = dispatchers
        self.confirmed_offset = confirmed_offset
        self.reput_from = 0
        self.listeners: list[ArrivalListener] = []
        self.last_error: Exception | None = None
        self.failures = 0  # consecutive failed steps
        self.skipped_bytes = 0  # damaged CommitLog bytes dispatch stepped over
        self.failing_since_ms: int | None = None
        self._wake = threading.Event()
        self._retry = threading.Event()
        self._recheck_failed_at = -1e9
        self._idle = False
        self._last_batch = 0
        self._progress = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._delays = fbatch.parse_delay_levels(cfg.message_delay_level)
        self._cq_dispatcher = next((d for d in dispatchers if isinstance(d, ConsumeQueueDispatcher)), None)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ReputService", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._retry.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def wakeup(self) -> None:
        if self._idle:
            self._wake.set()

    def behind_bytes(self) -> int:
        return max(0, self.confirmed_offset() - self.reput_from)

    @property
    def stalled(self) -> bool:
        """Dispatch is failing now (cleared by the next step that succeeds)."""
        return self.last_error is not None

    def health(self) -> DispatchHealth:
        err = self.last_error
        return DispatchHealth(err is None, self.reput_from, self.behind_bytes(),
                              None if err is None else f"{type(err).__name__}: {err}",
                              self.failing_since_ms, self.failures, self.skipped_bytes)

    def wait_dispatched(self, timeout: float | None = None) -> bool:
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._progress:
            while self.behind_bytes() > 0:
                if self._thread is None and self.last_error is not None:
                    return False  # not running: nobody will retry
                self._wake.set()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._progress.wait(0.05 if left is None else min(0.05, left))
        return True

    def _run(self) -> None:
        delay = RETRY_MIN_S
        while not self._stop.is_set():
            try:
                progressed = self.run_once()
            except Exception as exc:  # noqa: BLE001 - logged, reported through health(), retried
                self._failed(exc)
                self._retry.wait(delay)  # a put that was refused asks for an early retry
                self._retry.clear()
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            if self.last_error is not None:
                self._recovered()
                delay = RETRY_MIN_S
            if not progressed:
                self._idle = True
                if self.behind_bytes() == 0:  # re-check: a put may have skipped the wake-up
                    self._wake.wait(0.01)
                self._wake.clear()
                self._idle = False
            elif self._last_batch < COALESCE_RECORDS:
                # a trickle of single puts: let a few accumulate so the dispatchers work on
                # batches (RocketMQ's reput also rests 1 ms between rounds)
                self._stop.wait(COALESCE_WAIT_S)

    def _recovered(self) -> None:
        with self._progress:
            if self.last_error is None:
                return
            log.warning("dispatch resumed at offset %d after %d failed attempt(s)",
                        self.reput_from, self.failures)
            self.last_error, self.failures, self.failing_since_ms = None, 0, None
            self._progress.notify_all()

    def recheck(self, timeout: float) -> bool:
        """While dispatch fails: retry now and wait up to ``timeout`` s for it to succeed.
        True when dispatch is healthy."""
        if self.last_error is None:
            return True
        now = time.monotonic()
        if self._thread is None or now - self._recheck_failed_at < RECHECK_QUIET_S:
            return False  # (one put per window waits; the others are refused at once)
        self._retry.set()
        deadline = now + timeout
        with self._progress:
            while self.last_error is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._recheck_failed_at = time.monotonic()
                    return False
                self._progress.wait(left)
        return True

    def _failed(self, exc: Exception) -> None:
        first = self.last_error is None
        same = not first and type(exc) is type(self.last_error) and str(exc) == str(self.last_error)
        self.last_error = exc
        self.failures += 1
        if first:
            self.failing_since_ms = int(time.time() * 1000)
            log.error("dispatch failed at offset %d (retrying; puts are refused until it "
                      "recovers): %s", self.reput_from, exc, exc_info=not isinstance(exc, OSError))
        elif not same or self.failures % 100 == 0:
            log.error("dispatch still failing at offset %d (%d attempts): %s",
                      self.reput_from, self.failures, exc)
        with self._progress:
            self._progress.notify_all()

    # -- one step -----------------------------------------------------------------------------
    def run_once(self, limit: int | None = None) -> bool:
        """Dispatch one batch; returns whether ``reput_from`` moved."""
        end = self.confirmed_offset() if limit is None else limit
        start = self.reput_from
        if start >= end:
            return False
        feed = self.commitlog.dispatch_feed
        if feed:
            while feed and feed[0].end <= start:  # dispatched from the bytes already
                feed.popleft()
            if feed and feed[0].start == start and feed[0].end <= end:
                return self._dispatch_feed(feed, end)
            if feed and start < feed[0].start < end:
                end = feed[0].start  # decode up to where the feed resumes
        mf = self.commitlog.segment_at(start)
        if mf is None:
            # below the first segment (files deleted) or a gap: move to the first segment
            first = self.commitlog.queue.first()
            if first is not None and start < first.file_from_offset:
                self._advance(first.file_from_offset)
                return True
            return False
        pos = start - mf.file_from_offset
        stop = min(mf.wrote_position, end - mf.file_from_offset, pos + self.cfg.reput_batch_bytes)
        recs = fbatch.decode_records(mf.mm, pos, stop, base_offset=mf.file_from_offset,
                                     delay_levels_ms=self._delays)
        full = min(mf.wrote_position, end - mf.file_from_offset)
        if not len(recs) and recs.stop == fbatch.STOP_INCOMPLETE and stop < full:
            # one record larger than the batch window: take the whole readable range
            recs = fbatch.decode_records(mf.mm, pos, full, base_offset=mf.file_from_offset,
                                         max_records=1, delay_levels_ms=self._delays)
        if len(recs):
            self._dispatch(DispatchBatch(start, recs.next_offset, recs))
        if recs.stop == fbatch.STOP_BLANK:
            self._advance(mf.file_from_offset + self.commitlog.file_size)
            return True
        damaged = recs.stop == fbatch.STOP_CORRUPT or (
            recs.stop == fbatch.STOP_END and recs.end < full and not len(recs))
        if recs.stop == fbatch.STOP_INCOMPLETE and not len(recs) and recs.end + 8 <= full:
            # a record that can never become whole: it claims to run past its segment, or its
            # segment is complete (a later one exists) and it runs past the written bytes
            claimed = int.from_bytes(mf.mm[recs.end:recs.end + 4], "big", signed=True)
            last = self.commitlog.queue.last()
            damaged = (recs.end + claimed > self.commitlog.file_size
                       or (mf is not last and full >= mf.wrote_position))
        if damaged and not len(recs):
            # committed bytes that are not a record (damage before where recovery scanned):
            # skip to the next whole record rather than stall every queue behind it
            nxt = self._skip_damage(mf, recs.end, full)
            log.error("dispatch skipped damaged CommitLog bytes [%d, %d): %s", recs.next_offset,
                      nxt, recs.stop_reason or "no record")
            self.skipped_bytes += nxt - recs.next_offset
            self._advance(nxt)
            return True
        if len(recs):
            self._advance(recs.next_offset)
            return True
        return False

    def _skip_damage(self, mf, pos: int, limit: int) -> int:
        """The CommitLog offset of the next whole record after damaged bytes at ``pos`` (a
        record that decodes, CRC checked, and whose PHYSICALOFFSET is its own offset), or of
        ``limit`` (the segment's readable end) when there is none."""
        base = mf.file_from_offset
        buf = mf.mm
        patterns = [(m & 0xFFFFFFFF).to_bytes(4, "big") for m in MESSAGE_MAGICS]
        q = pos + 1
        while q + 4 < limit:
            hits = [k for k in (buf.find(pat, q + 4, limit) for pat in patterns) if k >= 0]
            if not hits:
                break
            cand = min(hits) - 4
            recs = fbatch.decode_records(buf, cand, limit, base_offset=base, check_crc=True,
                                         max_records=1, properties=False)
            if len(recs) and int(recs.commitlog_offset[0]) == base + cand:
                return base + cand
            q = cand + 1
        return base + limit

    def _dispatch_feed(self, feed, end: int) -> bool:
        """Dispatch consecutive appends from the writer's feed (no decoding)."""
        cols: list[list] = [[] for _ in range(9)]
        start = off = self.reput_from
        count = 0
        while feed and feed[0].start == off and feed[0].end <= end and count < 65536:
            item: FeedItem = feed.popleft()
            for col, vals in zip(cols, item.columns()):
                col.extend(vals)
            count += len(item.size)
            off = item.end
        # taken from the feed: if dispatching fails, the retry decodes these bytes instead
        self._dispatch(DispatchBatch(start, off, DecodedRecords.from_dispatch_columns(*cols)))
        self._advance(off)
        return True

    def run_until(self, end: int) -> None:
        """Dispatch synchronously up to ``end`` (recovery)."""
        while self.reput_from < end and self.run_once(end):
            pass

    def _dispatch(self, batch: DispatchBatch) -> None:
        recs = batch.records
        self._last_batch = len(recs)
        for d in self.dispatchers:
            d.dispatch(recs)
        cqd = self._cq_dispatcher
        if cqd is not None and cqd.touched and self.listeners:
            touched, cqd.touched = cqd.touched, {}
            for (topic, qid), max_off in touched.items():
                for fn in self.listeners:
                    try:
                        fn(topic, qid, max_off)
                    except Exception:  # noqa: BLE001 - a listener must not stop dispatch
                        log.exception("arrival listener failed")
        elif cqd is not None:
            cqd.touched.clear()

    def _advance(self, offset: int) -> None:
        with self._progress:
            self.reput_from = offset
            self._progress.notify_all()
        if self.last_error is not None:  # progress again: healthy from this moment
            self._recovered()
