"""``TierService``: copies each queue's new messages into the tier, off the put path.

Theory of operation. ``TierDispatcher`` sits in the reput chain after the ConsumeQueue and
index: it only notes which queues grew (a dict update) and wakes the service, so a put never
waits for the tier. The service thread uploads a queue when its pending messages reach
``group_commit_count`` or ``group_commit_size`` bytes, or ``group_commit_timeout`` ms after its
last upload (RocketMQ's group commit): it reads the local ConsumeQueue from the tier's max
queue offset, takes the records from the local CommitLog and appends them to the queue's flat
files (``flat.FlatQueue.append``). The tier's own files say how far it got (``recover`` on
open), so nothing is uploaded twice or skipped after a crash; the metadata JSON is rewritten
after each round for operators and RocketMQ.

``get_message`` serves reads the local store can no longer answer (its CommitLog segments were
removed): ``MessageStore.get_message`` falls through to it. A record that fails its checks there
(or a segment its whole-object checksum, on upload too) is mended from the local CommitLog while
it holds the record, else kept aside and skipped (``repair``).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from ...format.message import decode_message
from ..checkpoint import atomic_write
from ..read_path import Subscription
from ..results import GetMessageResult, GetStatus
from . import layout
from .backend import Backend, open_backend
from .flat import FlatQueue
from .index import TierIndex
from .repair import TierRepair, checked_record
from .s3 import TierChecksumError

log = logging.getLogger(__name__)

SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX", "%RETRY%", "%DLQ%")
READ_BATCH = 1024  # local units read (and appended to the tier) at a time
# S3 cannot append: each append rewrites the segment object, so fewer, bigger appends there
S3_READ_BATCH = 8192
READ_AHEAD_WINDOWS = 64  # queues with a read-ahead window at once (each up to the size threshold)
CLEAN_INTERVAL = 60.0  # s between retention passes (RocketMQ's is a minute too)


def tiered_topic(topic: str) -> bool:
    """RocketMQ's ``MessageStoreTopicFilter``: system topics stay local."""
    return not topic.startswith(SYSTEM_PREFIXES) and topic not in ("TBW102", "OFFSET_MOVED_EVENT")


# S3 rewrites a segment object on every append: past this size that costs more than it saves
S3_SEGMENT_CAP = 64 << 20


def segment_sizes(tcfg) -> tuple[int, int]:
    """(COMMIT_LOG, CONSUME_QUEUE) segment sizes: the configured ones, at most 64 MiB on S3
    (RocketMQ reads segments of any size: their names and the metadata say where each starts)."""
    cl, cq = tcfg.commitlog_max_size, tcfg.consume_queue_max_size
    if tcfg.backend == "s3":
        cl, cq = min(cl, S3_SEGMENT_CAP), min(cq, S3_SEGMENT_CAP)
    return cl, cq


class TierDispatcher:
    """The reput chain's link to the tier: notes the queues that grew."""

    def __init__(self, service: "TierService") -> None:
        self.service = service

    def dispatch(self, recs) -> None:
        """Count each queue's new messages; wake the service only when one of them reaches the
        group-commit count (or its size, at ~256 bytes a message): the service's own tick
        (``group_commit_timeout``, at most 1 s) takes the rest. Waking it per dispatch cost
        the writer a lock round trip per reput batch (the profile's largest tier item)."""
        if len(recs) == 0:
            return
        grown = self.service.grown
        t = self.service.tcfg
        limit = max(1, min(t.group_commit_count, t.group_commit_size // 256))
        due = False
        for topic, qid in zip(recs.topic, recs.queue_id.tolist()):
            if tiered_topic(topic):
                n = grown.get((topic, qid), 0) + 1
                grown[(topic, qid)] = n
                due |= n >= limit
        if due:
            self.service.wake.set()


def discover_queues(backend: Backend, cluster: str, broker: str) -> list[tuple[str, int]]:
    """The (topic, queue id) pairs with files in the tier under ``cluster``/``broker``."""
    out = set()
    prefix = f"{layout.cluster_dir(cluster)}/{broker}"
    for key, _ in backend.list(prefix):
        parts = key.split("/")
        if len(parts) == 6 and parts[4] in (layout.COMMIT_LOG, layout.CONSUME_QUEUE):
            try:
                out.add((parts[2], int(parts[3])))
            except ValueError:
                continue
    return sorted(out)


class TierService:
    def __init__(self, tcfg, store_root: str, cq_table, commitlog,
                 backend: Backend | None = None) -> None:
        self.tcfg = tcfg
        self.backend = backend or open_backend(tcfg)
        self.cluster = tcfg.broker_cluster_name
        self.broker = tcfg.broker_name
        self.metadata_path = os.path.join(store_root, "config", layout.METADATA_FILE)
        self.cq_table = cq_table
        self.commitlog = commitlog
        self.queues: dict[tuple[str, int], FlatQueue] = {}
        self.topic_ids: dict[str, int] = {}
        self.grown: dict[tuple[str, int], int] = {}
        self.last_upload: dict[tuple[str, int], float] = {}
        self.wake = threading.Event()
        self.lock = threading.RLock()  # one upload round (or repair) at a time
        self.last_error: str | None = None
        self.cut_on_recover: dict[str, tuple[int, int]] = {}
        self.missing: dict[tuple[str, int], tuple[int, int]] = {}  # queues whose files vanished
        self.missing_error: str | None = None
        self.index = TierIndex(self.backend, self.cluster, self.broker, store_root, tcfg)
        self.repair = TierRepair(self.backend, self._local_record)
        self.expired = {"COMMIT_LOG": 0, "CONSUME_QUEUE": 0, "INDEX": 0}  # deleted by retention
        self._last_clean = time.monotonic()
        self.read_errors = 0
        self.reads = 0  # pulls the tier answered
        self.read_ahead_hits = 0  # pulls answered from the read-ahead window
        self._ahead: dict[str, tuple] = {}  # queue path -> (first offset, units, records, expiry)
        self.uploaded_messages = 0
        self.uploaded_bytes = 0
        self.upload_errors = 0
        self.read_batch = S3_READ_BATCH if tcfg.backend == "s3" else READ_BATCH
        self._stop = False
        self._location_written = False
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self) -> None:
        """Open every queue the tier holds, cutting torn tails (see ``flat``)."""
        known: dict[tuple[str, int], tuple[int, int]] = {}
        try:
            with open(self.metadata_path, encoding="utf-8") as fh:
                doc = json.load(fh)
            for topic, t in doc.get("topicMetadataTable", {}).items():
                self.topic_ids[topic] = int(t.get("topicId", 0))
            for topic, qs in doc.get("queueMetadataTable", {}).items():
                for qid, q in qs.items():
                    known[(topic, int(qid))] = (int(q.get("minOffset", 0)), int(q.get("maxOffset", 0)))
        except (OSError, ValueError, AttributeError):
            pass
        found = discover_queues(self.backend, self.cluster, self.broker)
        self.repair.load()
        for key, (lo, hi) in sorted(known.items()):
            if hi > lo and key not in found:
                # the metadata says the tier held these messages and the backend has no file
                # of the queue: a bucket emptied by hand, or the wrong bucket. Never start it
                # over as if empty; an operator who means it removes the metadata file.
                self.missing[key] = (lo, hi)
        if self.missing:
            self.last_error = (f"tier: {len(self.missing)} queue(s) the metadata lists have no "
                               f"files in the tier ({self._where()}), e.g. "
                               f"{'/'.join(map(str, next(iter(self.missing))))}; not uploading "
                               f"them (remove {self.metadata_path} to start those queues afresh)")
            self.missing_error = self.last_error
            log.error("%s", self.last_error)
        for topic, qid in found:
            fq = self._flat(topic, qid)
            cut = fq.recover()
            if any(cut):
                log.warning("tier %s: cut a torn tail of %d COMMIT_LOG and %d CONSUME_QUEUE bytes",
                            fq.path, *cut)
                self.cut_on_recover[fq.path] = cut
        self.index.load()
        for (topic, _qid), fq in sorted(self.queues.items()):
            self.index.catch_up(fq, self.topic_ids[topic])
        for cq in self.cq_table:  # whatever the local queues hold beyond the tier is pending
            if tiered_topic(cq.topic):
                self.grown[(cq.topic, cq.queue_id)] = 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="TierService", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._thread = None

    def _flat(self, topic: str, qid: int) -> FlatQueue:
        fq = self.queues.get((topic, qid))
        if fq is None:
            fq = FlatQueue(self.backend, self.cluster, self.broker, topic, qid,
                           *segment_sizes(self.tcfg))
            self.queues[(topic, qid)] = fq
            if topic not in self.topic_ids:
                self.topic_ids[topic] = max(self.topic_ids.values(), default=0) + 1
        return fq

    def _run(self) -> None:
        tick = min(1.0, max(0.01, self.tcfg.group_commit_timeout / 1000.0))
        backoff = 0.05
        while not self._stop:
            self.wake.wait(tick)
            self.wake.clear()
            try:
                self.upload_round(force=False)
                self.last_error = self.missing_error  # None unless queues' files vanished
                backoff = 0.05
            except Exception as e:  # noqa: BLE001 - the tier never stops the broker; retry
                self.upload_errors += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("tier upload failed; retrying")
                time.sleep(backoff)
                backoff = min(2.0, backoff * 2)

    # -- upload -------------------------------------------------------------------------------
    def _due(self, key, count: int, now: float) -> bool:
        t = self.tcfg
        if count >= t.group_commit_count:
            return True
        if now - self.last_upload.setdefault(key, now) >= t.group_commit_timeout / 1000.0:
            return True
        cq = self.cq_table.find(*key)
        fq = self.queues.get(key)
        if cq is None:
            return False
        behind = cq.max_offset_in_queue() - (fq.max_offset if fq is not None and fq.max_offset >= 0
                                             else cq.min_offset_in_queue())
        return behind * 256 >= t.group_commit_size  # (a cheap size estimate; exact on upload)

    def upload_round(self, force: bool = True) -> int:
        """Upload the queues that are due (all pending ones with ``force``); returns how many
        messages went up."""
        with self.lock:
            now = time.monotonic()
            total = 0
            for key, count in list(self.grown.items()):
                if not force and not self._due(key, count, now):
                    continue
                self.grown.pop(key, None)
                try:
                    total += self.upload_queue(*key)
                except Exception:
                    self.grown[key] = self.grown.get(key, 0) + count
                    raise
                self.last_upload[key] = now
            changed = bool(total)
            if self.index.due():
                changed |= self.index.seal() is not None
            if self._retention_due(now):
                changed |= self.clean_expired() > 0
            if changed:
                self.write_metadata()
            return total

    def _retention_due(self, now: float) -> bool:
        if now - self._last_clean < CLEAN_INTERVAL:
            return False
        self._last_clean = now
        return True

    def clean_expired(self, now_ms: int | None = None) -> int:
        """``tieredStoreFileReservedTime``: delete the segments (and so their metadata) whose
        newest message is older than that many hours (``FlatQueue.expire``,
        ``TierIndex.expire``). Returns the segments deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        hours = self.tcfg.file_reserved_time
        per_topic = self.tcfg.topic_reserved_hours()
        n = 0
        for fq in list(self.queues.values()):
            cl, cq = fq.expire(now_ms - per_topic.get(fq.topic, hours) * 3_600_000)
            if cl or cq:
                log.info("tier %s: retention deleted %d COMMIT_LOG and %d CONSUME_QUEUE "
                         "segment(s); the queue now starts at %d", fq.path, cl, cq, fq.min_offset)
            self.expired["COMMIT_LOG"] += cl
            self.expired["CONSUME_QUEUE"] += cq
            n += cl + cq
        # INDEX segments hold every topic's keys: they go with the longest retention
        ix = self.index.expire(now_ms - max([hours, *per_topic.values()]) * 3_600_000)
        self.expired["INDEX"] += ix
        return n + ix

    def clean_now(self, now_ms: int | None = None) -> int:
        """One retention pass now, the metadata rewritten after it."""
        with self.lock:
            n = self.clean_expired(now_ms)
            if n:
                self.write_metadata()
            return n

    def seal_index(self) -> bool:
        """Upload the pending INDEX items now (RocketMQ rolls on size or idle time)."""
        with self.lock:
            sealed = self.index.seal() is not None
            if sealed:
                self.write_metadata()
            return sealed

    def _where(self) -> str:
        t = self.tcfg
        return f"s3://{t.object_store_bucket}/{t.file_path}" if t.backend == "s3" else t.file_path

    def upload_queue(self, topic: str, qid: int) -> int:
        cq = self.cq_table.find(topic, qid)
        if cq is None or (topic, qid) in self.missing:
            return 0
        fq = self._flat(topic, qid)
        fq.resync()
        if fq.commitlog.end > self.index.pending_marks.get(fq.path, 0):
            self.index.catch_up(fq, self.topic_ids[topic])  # what a lost answer left unindexed
        lmin, lmax = cq.min_offset_in_queue(), cq.max_offset_in_queue()
        if fq.max_offset < 0:
            fq.init(lmin)
        at = fq.max_offset
        if at < lmin:
            log.error("tier %s holds up to queue offset %d but the local queue starts at %d: "
                      "messages left the broker before reaching the tier", fq.path, at, lmin)
            return 0
        sent = 0
        while at < lmax:
            units = cq.read_units(at, min(self.read_batch, lmax - at))
            if units is None or len(units) == 0:
                break
            views = self.commitlog.read_record_views(units["offset"].tolist(),
                                                     units["size"].tolist())
            whole = next((i for i, v in enumerate(views) if v is None), len(views))
            records = views[:whole]  # up to the first record the CommitLog no longer holds whole
            if not records:
                log.error("tier %s: the record of queue offset %d is not in the local CommitLog",
                          fq.path, at)
                break
            tags = units["tags_code"][:whole]
            try:
                written = fq.append(at, records, tags)
            except TierChecksumError as e:  # the segment appended to fails its checksum
                self.mend(fq, key=e.key, reason="whole-object checksum failed on upload",
                          rewrite=True)
                written = fq.append(at, records, tags)
            self.uploaded_messages += len(written)
            self.uploaded_bytes += len(written.blob)
            self.index.add_written(fq, self.topic_ids[topic], written)
            at += len(records)
            sent += len(records)
            if len(records) < len(units):
                break
        return sent

    def write_metadata(self) -> None:
        segs = []
        queues = []
        for (topic, qid), (lo, hi) in self.missing.items():  # kept until an operator decides
            queues.append((topic, qid, lo, hi))
        for fq in self.queues.values():
            if fq.max_offset >= 0:
                queues.append((fq.topic, fq.queue_id, fq.min_offset, fq.max_offset))
            for ff in (fq.commitlog, fq.cq):
                for i, s in enumerate(ff.segs):
                    segs.append(layout.SegmentInfo(fq.path, ff.file_type, s.base, s.size,
                                                   sealed=i < len(ff.segs) - 1))
        segs += self.index.segment_infos()
        doc = layout.metadata_json(self.broker, self.topic_ids, queues, segs,
                                   int(time.time() * 1000), self.tcfg.topic_reserved_hours())
        os.makedirs(os.path.dirname(self.metadata_path), exist_ok=True)
        atomic_write(self.metadata_path, doc.encode("utf-8"), point=None)
        if not self._location_written:  # where the tier is, for `rocketstore tier` (no secrets)
            atomic_write(os.path.join(os.path.dirname(self.metadata_path), layout.LOCATION_FILE),
                         json.dumps(layout.location_doc(self.tcfg), indent=2).encode(), point=None)
            self._location_written = True

    def caught_up(self) -> bool:
        for cq in self.cq_table:
            if not tiered_topic(cq.topic) or cq.max_offset_in_queue() == 0:
                continue
            fq = self.queues.get((cq.topic, cq.queue_id))
            if fq is None or fq.max_offset < cq.max_offset_in_queue():
                return False
        return True

    def uploaded_below(self, limit: int) -> int:
        """The local CommitLog offset (at most ``limit``) below which every record of a tiered
        topic is in the tier: the lowest physical offset of a record some queue has not
        uploaded yet. The store's cleanup deletes no segment past it (store.clean)."""
        bound = limit
        for cq in self.cq_table:
            if not tiered_topic(cq.topic):
                continue
            lmax = cq.max_offset_in_queue()
            fq = self.queues.get((cq.topic, cq.queue_id))
            at = max(fq.max_offset if fq is not None and fq.max_offset >= 0 else 0,
                     cq.min_offset_in_queue())
            if at >= lmax:
                continue
            units = cq.read_units(at, 1)
            if units is None or len(units) == 0:
                return 0  # cannot tell where the queue's next record is: keep everything
            bound = min(bound, int(units["offset"][0]))
        return bound

    def wait_caught_up(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.upload_round(force=True)
            if self.caught_up():
                return True
            time.sleep(0.02)
        return self.caught_up()

    # -- read ---------------------------------------------------------------------------------
    def bounds(self, topic: str, qid: int) -> tuple[int, int] | None:
        fq = self.queues.get((topic, qid))
        if fq is None or fq.max_offset < 0:
            return None
        return fq.min_offset, fq.max_offset

    def get_message(self, topic: str, qid: int, offset: int, max_msgs: int,
                    subscription: str | None, decode: bool, local_max: int) -> GetMessageResult | None:
        """The messages from queue ``offset`` out of the tier; None when it holds none there.
        Every record is checked (``repair.record_ok``); a damaged one is mended from the local
        CommitLog (``mend``) and served, or, beyond repair, skipped as RocketMQ skips a record
        it cannot read (``MESSAGE_WAS_REMOVING`` when nothing else is found)."""
        fq = self.queues.get((topic, qid))
        if fq is None or not (fq.min_offset <= offset < fq.max_offset):
            return None
        sub = Subscription.parse(subscription)
        codes = sub.codes if sub.tags is not None else None
        count = max(max_msgs, 32) if codes is not None else max_msgs
        lost: set[int] | None = self.repair.lost(topic, qid)
        last = count + 2  # each round mends a segment or learns one offset is lost
        for attempt in range(last + 1):
            if attempt == last:
                lost = None  # (never reached in practice) skip whatever is still bad
            try:
                units, raws = self._window(fq, offset, count)
            except TierChecksumError as e:
                if attempt == last or not self.mend(fq, key=e.key, rewrite=True,
                                                    reason="whole-object checksum failed on read")[2]:
                    raise
                continue
            result, bad = self._answer(fq, offset, units, raws, sub, max_msgs, decode,
                                       max(fq.max_offset, local_max), lost)
            if bad is None:
                self.reads += 1
                return result
            qo, unit = bad
            _, gone, found = self.mend(fq, phy=unit[0], reason=f"record of queue offset {qo} "
                                       "failed its checks on read")
            assert lost is not None
            lost |= set(gone)
            if not found:
                lost.add(qo)  # no segment holds it (the unit is bad, or its segment went)
        raise AssertionError("unreachable")

    def _answer(self, fq, offset, units, raws, sub, max_msgs, decode, hi, lost):
        """(result, None), or (None, (queue offset, unit)) of the first damaged record not in
        ``lost`` (None: skip every damaged one)."""
        codes = sub.codes if sub.tags is not None else None
        result = GetMessageResult(GetStatus.NO_MATCHED_MESSAGE, offset + len(units),
                                  fq.min_offset, hi)
        for i, (u, raw) in enumerate(zip(units, raws)):
            if codes is not None and u[2] not in codes:
                continue
            if len(result.buffers) >= max_msgs:
                result.next_begin_offset = offset + i
                break
            msg = self._checked(fq, u, raw)
            if msg is None:
                if lost is not None and offset + i not in lost:
                    return None, (offset + i, u)
                self.read_errors += 1
                if not result.buffers:
                    result.status = GetStatus.MESSAGE_WAS_REMOVING
                continue
            if sub.tags is not None and msg.tags not in sub.tags:
                continue
            result.buffers.append(raw)
            if decode:
                result.messages.append(msg)
            result.status = GetStatus.FOUND
        return result, None

    def mend(self, fq: FlatQueue, *, reason: str, phy: int | None = None, key: str | None = None,
             rewrite: bool = False) -> tuple[list[int], list[int], bool]:
        """Repair the flat COMMIT_LOG segment holding flat offset ``phy`` (or named ``key``)
        from the local CommitLog (``repair.TierRepair.repair_segment``). Returns (queue offsets
        mended, queue offsets beyond repair, whether such a segment was found)."""
        with self.lock:
            fq.resync()
            seg = next((s for s in fq.commitlog.segs
                        if (phy is not None and s.base <= phy < s.end)
                        or (key is not None and fq.commitlog.key(s.base) == key)), None)
            if seg is None:
                return [], [], False
            mended, lost = self.repair.repair_segment(fq, seg, reason, rewrite)
            self._ahead.pop(fq.path, None)
            return mended, lost, True

    def verify_and_repair(self) -> dict:
        """Check every record in the tier (and, on S3, every segment's checksum); mend what the
        local CommitLog still holds. Returns {queue path: (mended, beyond repair)}."""
        out = {}
        with self.lock:
            for fq in list(self.queues.values()):
                fq.resync()
                mended, lost = self.repair.repair_queue(fq, "found by tier verify")
                if mended or lost:
                    out[fq.path] = (mended, lost)
                self._ahead.pop(fq.path, None)
        return out

    def _local_record(self, topic: str, qid: int, qo: int) -> tuple[bytes, int] | None:
        """The local store's record of queue offset ``qo`` and its tags code, if it has it."""
        cq = self.cq_table.find(topic, qid)
        if cq is None or not cq.min_offset_in_queue() <= qo < cq.max_offset_in_queue():
            return None
        units = cq.read_units(qo, 1)
        if units is None or len(units) == 0:
            return None
        off, size = int(units["offset"][0]), int(units["size"][0])
        raw = self.commitlog.read_record(off)
        if raw is None or len(raw) != size:
            return None
        return bytes(raw), int(units["tags_code"][0])

    def _window(self, fq, offset: int, count: int) -> tuple[list, list]:
        """``count`` units from ``offset`` and their records. With read-ahead
        (``readAheadCacheEnable``) a miss reads up to ``readAheadMessageCountThreshold`` units /
        ``readAheadMessageSizeThreshold`` bytes at once and keeps them
        ``readAheadCacheExpireDuration`` ms for the pulls that follow (one window per queue)."""
        t = self.tcfg
        now = time.monotonic()
        if t.read_ahead_enable:
            w = self._ahead.get(fq.path)
            if w is not None and w[0] <= offset and now < w[3]:
                i = offset - w[0]
                if i + count <= len(w[1]) or w[0] + len(w[1]) >= fq.max_offset:
                    self.read_ahead_hits += 1
                    return w[1][i:i + count], w[2][i:i + count]
            units = fq.units(offset, max(count, t.read_ahead_count))
            size, n = 0, 0
            for u in units:  # at least ``count``, then up to the byte budget
                if n >= count and size + u[1] > t.read_ahead_size:
                    break
                size += u[1]
                n += 1
            units = units[:n]
            raws = fq.records_aligned(units)
            for k in [k for k, v in self._ahead.items() if v[3] <= now]:
                self._ahead.pop(k, None)
            while len(self._ahead) >= READ_AHEAD_WINDOWS:  # the oldest window goes
                self._ahead.pop(next(iter(self._ahead)), None)
            self._ahead[fq.path] = (offset, units, raws, now + t.read_ahead_expire / 1000.0)
            return units[:count], raws[:count]
        units = fq.units(offset, count)
        return units, fq.records_aligned(units)

    @staticmethod
    def _checked(fq, unit, raw):
        return checked_record(raw, unit[0], unit[1], fq.topic)

    # -- storage level (RocketMQ's TieredMessageStore.fetchFromCurrentStore) -------------------
    @property
    def level(self) -> str:
        return self.tcfg.storage_level

    def holds(self, topic: str, qid: int, offset: int) -> bool:
        fq = self.queues.get((topic, qid))
        return fq is not None and fq.min_offset <= offset < fq.max_offset

    # -- query by key -------------------------------------------------------------------------
    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list:
        """Messages of ``topic`` whose UNIQ_KEY or one of KEYS is ``key``, from the INDEX flat
        file; each read from the flat COMMIT_LOG and checked, one per queue offset."""
        tid = self.topic_ids.get(topic)
        out: list = []
        if tid is None or max_num <= 0:
            return out
        seen: set[tuple[int, int]] = set()
        # an item keeps its time to the second below: widen the window, check the record's own
        for it in self.index.candidates(topic, key, begin - 999, end):
            if it.topic_id != tid or (it.queue_id, it.offset) in seen:
                continue
            seen.add((it.queue_id, it.offset))
            fq = self.queues.get((topic, it.queue_id))
            if fq is None:
                continue
            rec = fq.commitlog.read(it.offset, it.size)
            if len(rec) != it.size:
                continue  # its segment is gone (retention)
            try:
                msg = decode_message(rec, 0, check_crc=True)
            except Exception:  # noqa: BLE001 - a damaged record never answers a query
                continue
            if getattr(msg, "topic", None) != topic or not begin <= msg.store_timestamp <= end:
                continue
            if msg.uniq_key == key or key in msg.keys:
                out.append(msg)
                if len(out) >= max_num:
                    break
        return out

    def metrics(self) -> dict:
        """What ``/metrics`` shows: upload lag (messages not in the tier yet; CommitLog bytes
        and seconds since the oldest of them), counters since start, the INDEX's state."""
        lag, oldest = 0, None
        for cq in list(self.cq_table):
            if not tiered_topic(cq.topic):
                continue
            lmin, lmax = cq.min_offset_in_queue(), cq.max_offset_in_queue()
            fq = self.queues.get((cq.topic, cq.queue_id))
            held = fq.max_offset if fq is not None and fq.max_offset >= 0 else lmin
            if lmax > held:
                lag += lmax - held
                u = cq.unit(max(held, lmin))
                if u is not None and (oldest is None or u[0] < oldest[0]):
                    oldest = u
        lag_bytes = lag_s = 0.0
        if oldest is not None:
            lag_bytes = max(0, self.commitlog.max_offset() - oldest[0])
            ts = self.commitlog.store_timestamp_at(oldest[0], oldest[1])
            lag_s = max(0.0, time.time() - ts / 1000.0) if ts and ts > 0 else 0.0
        return {"lag_messages": lag, "lag_bytes": lag_bytes, "lag_seconds": lag_s,
                "uploaded_messages": self.uploaded_messages, "uploaded_bytes": self.uploaded_bytes,
                "upload_errors": self.upload_errors, "reads": self.reads,
                "read_errors": self.read_errors, "expired_segments": dict(self.expired),
                "repaired_records": self.repair.repaired_records,
                "repaired_segments": self.repair.repaired_segments,
                "quarantined_segments": len(self.repair.damage),
                "index_pending_keys": len(self.index.pending), "index_segments": len(self.index.segs),
                "retries": getattr(self.backend, "retries", 0)}

    def status(self) -> dict:
        return {"backend": self.tcfg.backend, "cluster": self.cluster, "broker": self.broker,
                "missing": [{"topic": t, "queueId": q, "minOffset": lo, "maxOffset": hi}
                            for (t, q), (lo, hi) in sorted(self.missing.items())],
                "error": self.last_error, "readErrors": self.read_errors,
                "repairedRecords": self.repair.repaired_records,
                "damaged": [d.to_json() for d in self.repair.damage], "storageLevel": self.level, "expired": dict(self.expired),
                "indexSegments": len(self.index.segs), "indexPending": len(self.index.pending),
                "queues": [{"topic": t, "queueId": q, "minOffset": fq.min_offset,
                            "maxOffset": fq.max_offset, "commitLogBytes": max(0, fq.commitlog.end)}
                           for (t, q), fq in sorted(self.queues.items())]}
