"""Recovery decisions after load: where valid CommitLog data ends and where reput restarts.

Theory of operation.

* **Before load** (``repair_short_files``): the *last* CommitLog segment and the last file of
  each ConsumeQueue may have been cut short (a copy interrupted, a torn extend). Their missing
  tail is padded with zeros (``ftruncate``: a hole), which recovery then treats like any
  unwritten tail. Any other file of the wrong size still fails the load, naming the file.
* **Where to start** is one pure function, ``plan_recovery(files, checkpoint, config)``:
  normal (no abort file): the last three segments; abnormal (abort file present): the newest
  segment whose first record is at or before the checkpoint's min timestamp
  (``min(physic, logics) - 3 s``), and everything from it is re-dispatched (ConsumeQueue writes
  are idempotent, the index skips what it already holds).
* The scan (``recovery_scan``) finds the first record that fails ``format.record``'s validity
  rule — RocketMQ's own; other oddities (queue offsets restarting after a topic was re-created,
  NUL bytes in properties) are reported in ``RecoveryReport.notes`` and kept.
* Both truncate the CommitLog at the first invalid record (the tail is zeroed and synced, so a
  stale record can never reappear behind the new end) after handing every non-zero byte they
  cut to ``quarantine.set_aside`` (kept under ``<store>/quarantine/``, never deleted), drop ConsumeQueue units that point at or
  beyond it, and destroy index files holding entries at or beyond it.
* **ConsumeQueue tails are checked against the CommitLog**: the last ``CQ_TAIL_CHECK`` units
  of each queue must point at a record of that size, queue id, queue offset and physical
  offset. The queue is cut at the first unit that does not, and dispatch rebuilds it. The
  last ``INDEX_TAIL_CHECK`` entries of the newest index file must point at a record one of
  whose keys has the entry's hash; if one does not, that file is dropped and re-indexed.
* **Reput restart** (pure: ``reput_start``) is the lowest of: the highest ConsumeQueue end (RocketMQ 4.9's rule), the
  start of any ConsumeQueue tail that was cut, the index's own restart point (RocketMQ loses
  index entries here; we do not) and, after a crash, the chosen segment's start. The facade runs
  it synchronously to the end before accepting puts, so the queue-offset table is rebuilt from
  complete ConsumeQueues.

Everything dropped is listed in the ``RecoveryReport`` (``store.recovery_report``).
"""
from __future__ import annotations

from ..format.cq_ext import MAX_ADDR as MAX_EXT_ADDR

import logging
import os
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..config import StoreConfig
from ..format import batch as fbatch
from ..errors import CorruptRecordError
from ..format.hashing import index_key_hash
from ..format.index_layout import build_key
from ..format.layouts import CQ_UNIT_SIZE, name_to_offset
from ..format.message import BLANK, SCHEDULE_TOPIC, decode_message
from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .consume_queue import FILLER_SIZE, UNIT_DTYPE, ConsumeQueue, queue_dirs
from .consume_queue_ext import ext_file_size, ext_root
from .dispatch import ConsumeQueueTable
from . import quarantine
from .damage import root_cause
from .recovery_scan import scan_commitlog

NORMAL_RECOVERY_SEGMENTS = 3  # RocketMQ's recoverNormally: "began to recover from the last third file"


@dataclass(frozen=True)
class SegmentInfo:
    """What the plan needs of one CommitLog segment."""

    offset: int  # file_from_offset
    first_store_timestamp: int  # store time of its first record; 0 if it starts with none


@dataclass(frozen=True)
class RecoveryPlan:
    normal: bool
    start_index: int  # first segment scanned
    start_offset: int  # its first byte
    redispatch_from: int | None  # abnormal: dispatch restarts here at the latest
    check_crc: bool


def plan_recovery(files: Sequence[SegmentInfo], checkpoint, config: StoreConfig, *,
                  last_exit_ok: bool) -> RecoveryPlan:
    """Where recovery scans from (pure: no disk).

    ``checkpoint`` is anything with ``min_timestamp()`` (``StoreCheckpoint``). Normal: the last
    ``NORMAL_RECOVERY_SEGMENTS`` segments. Abnormal: walking back from the newest segment, the
    first whose first record was stored at or before the checkpoint's min timestamp (segment 0
    when none is), as RocketMQ's ``isMappedFileMatchedRecover``.
    """
    if not files:
        return RecoveryPlan(last_exit_ok, 0, 0, None if last_exit_ok else 0, config.check_crc_on_recover)
    if last_exit_ok:
        idx = max(0, len(files) - NORMAL_RECOVERY_SEGMENTS)
        return RecoveryPlan(True, idx, files[idx].offset, None, config.check_crc_on_recover)
    limit = checkpoint.min_timestamp()
    idx = 0
    for i in range(len(files) - 1, -1, -1):
        ts = files[i].first_store_timestamp
        if ts != 0 and ts <= limit:
            idx = i
            break
    return RecoveryPlan(False, idx, files[idx].offset, files[idx].offset, config.check_crc_on_recover)


def reput_start(plan: RecoveryPlan, valid_end: int, min_offset: int, cq_max_physic: int,
                cq_cut_restarts: Iterable[int], behind: Mapping[tuple[str, int], int],
                index_restart: int | None) -> int:
    """Where dispatch restarts (pure): the lowest point any derived file may lack, clamped to
    ``[min_offset, valid_end]``."""
    reput = max(cq_max_physic, 0)
    for cut in cq_cut_restarts:
        reput = min(reput, cut)
    for phy in behind.values():
        if phy < valid_end:
            reput = min(reput, phy)
    if index_restart is not None:
        reput = min(reput, index_restart)
    if plan.redispatch_from is not None:
        reput = min(reput, plan.redispatch_from)
    return min(max(reput, min_offset), valid_end)


def segment_infos(commitlog: CommitLog) -> list[SegmentInfo]:
    return [SegmentInfo(mf.file_from_offset, commitlog.first_record_timestamp(mf))
            for mf in commitlog.queue.files]

log = logging.getLogger(__name__)

CQ_TAIL_CHECK = 256  # units per queue checked against the CommitLog at every open
INDEX_TAIL_CHECK = 256  # entries of the newest index file checked likewise
INDEX_CHAIN_WINDOW = 4096  # entries read to judge their hash-chain links


@dataclass
class RecoveryReport:
    normal: bool
    start_segment: int = 0
    valid_end: int = 0
    truncated_at: int | None = None
    reason: str = ""
    dropped_bytes: int = 0  # CommitLog bytes after the truncation point that were not zero
    reput_from: int = 0
    padded_files: list[str] = field(default_factory=list)
    cq_units_dropped: dict[str, int] = field(default_factory=dict)  # "topic/qid" -> units
    index_files_dropped: int = 0
    notes: list[str] = field(default_factory=list)
    # "topic/qid" -> first CommitLog offset whose unit that ConsumeQueue lacked on disk
    # (dispatch behind: rebuilt by this open; beside a live writer, its dispatch lag)
    cq_behind: dict[str, int] = field(default_factory=dict)
    quarantined: str | None = None  # the quarantine folder holding what the cut dropped
    quarantined_bytes: int = 0
    first_damage: dict | None = None  # damage.root_cause of the record the cut starts at

    @property
    def dropped_anything(self) -> bool:
        return bool(self.truncated_at is not None and self.dropped_bytes or self.padded_files
                    or self.cq_units_dropped or self.index_files_dropped)

    def summary(self) -> str:
        parts = ["normal" if self.normal else "abnormal (abort file present)"]
        if self.truncated_at is not None:
            parts.append(f"CommitLog truncated at {self.truncated_at} ({self.reason}), "
                         f"{self.dropped_bytes} bytes dropped")
        if self.quarantined:
            parts.append(f"{self.quarantined_bytes} bytes kept in {self.quarantined} "
                         "(rocketstore salvage re-appends the intact records)")
        if self.padded_files:
            parts.append(f"padded short files: {', '.join(self.padded_files)}")
        if self.cq_units_dropped:
            parts.append("ConsumeQueue units dropped: " +
                         ", ".join(f"{k}={v}" for k, v in sorted(self.cq_units_dropped.items())))
        if self.index_files_dropped:
            parts.append(f"{self.index_files_dropped} index file(s) dropped")
        parts.append(f"reput from {self.reput_from}")
        return "; ".join(parts)


# -- before load -------------------------------------------------------------------------------
def repair_short_files(cfg: StoreConfig) -> list[str]:
    """Pad the last CommitLog segment and each queue's (and ext stream's) last file back to
    full size."""
    padded: list[str] = []
    _pad_last(cfg.commitlog_dir, cfg.mapped_file_size_commitlog, padded)
    root = cfg.consume_queue_dir
    if os.path.isdir(root):
        for topic in os.listdir(root):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in os.listdir(tdir):
                qdir = os.path.join(tdir, qid)
                if qid.isdigit() and os.path.isdir(qdir):
                    _pad_last(qdir, cfg.cq_file_size, padded)
    ext_dir = ext_root(cfg.store_path_root_dir)
    if os.path.isdir(ext_dir):  # ConsumeQueue-ext: derived too, its last file is padded alike
        size = ext_file_size(cfg)
        for _topic, _qid, qdir in queue_dirs(ext_dir):
            _pad_last(qdir, size, padded)
    for p in padded:
        log.warning("padded short file %s with zeros", p)
    return padded


def _pad_last(directory: str, size: int, out: list[str]) -> None:
    if not os.path.isdir(directory):
        return
    names = sorted((off, n) for n in os.listdir(directory) if (off := name_to_offset(n)) is not None)
    if not names:
        return
    path = os.path.join(directory, names[-1][1])
    actual = os.path.getsize(path)
    if actual >= size:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, size)  # zeros (a hole): the writer allocates blocks as it fills
        os.fsync(fd)
    finally:
        os.close(fd)
    out.append(path)


# -- recovery ---------------------------------------------------------------------------------
def recover(commitlog: CommitLog, cqs: ConsumeQueueTable, checkpoint: StoreCheckpoint,
            last_exit_ok: bool, check_crc: bool, index_service=None,
            padded: list[str] | None = None) -> RecoveryReport:
    """Recover the CommitLog, ConsumeQueues and index; decide the reput restart point."""
    report = RecoveryReport(normal=last_exit_ok, padded_files=list(padded or []))
    checkpoint.track_logics_durability()
    cuts = []
    for cq in cqs:
        lost = cq.recover()
        if lost:  # units dropped inside the queue (damage), not a clean tail: rebuild them
            report.cq_units_dropped[f"{cq.topic}/{cq.queue_id}"] = lost
            cuts.append(cq.max_physic_offset if cq.max_physic_offset >= 0 else commitlog.min_offset())
    before = {(cq.topic, cq.queue_id): cq.max_offset_in_queue() for cq in cqs}
    files = commitlog.queue.files
    if not files:
        for cq in cqs:
            cq.destroy()
        _note_cq_drops(report, before, cqs)
        if index_service is not None:
            report.index_files_dropped += index_service.truncate_dirty_files(0)
        return report
    for cq in cqs:
        cut = check_cq_tail(cq, commitlog)
        if cut is not None:
            cuts.append(cut)
    cfg = commitlog.cfg.replace(check_crc_on_recover=check_crc)
    plan = plan_recovery(segment_infos(commitlog) if not last_exit_ok else
                         [SegmentInfo(mf.file_from_offset, 0) for mf in files],
                         checkpoint, cfg, last_exit_ok=last_exit_ok)
    report.start_segment = plan.start_index
    cq_next = {(cq.topic, cq.queue_id): cq.max_offset_in_queue() for cq in cqs}
    cq_end = {(cq.topic, cq.queue_id): cq.max_physic_offset for cq in cqs}
    scan = scan_commitlog(commitlog, plan.start_index, plan.check_crc, cq_next, cq_end)
    valid_end = scan.valid_end
    report.valid_end = valid_end
    report.notes.extend(scan.notes)
    for note in scan.notes:
        log.warning("recovery (kept): %s", note)
    if scan.stop in (fbatch.STOP_CORRUPT, fbatch.STOP_INCOMPLETE):
        report.truncated_at = valid_end
        report.reason = f"{scan.stop}: {scan.reason}" if scan.reason else scan.stop
        cause = _root_cause(commitlog, valid_end)
        if cause is not None:
            report.reason = (f"{cause['field']} expected {cause['expected']}, found "
                             f"{cause['found']} ({report.reason})")
            report.first_damage = cause
        report.dropped_bytes = _nonzero_bytes_after(commitlog, valid_end)
        log.warning("CommitLog truncated at offset %d (%s)", valid_end, report.reason)
    _set_aside(commitlog, valid_end, report)  # what the cut drops is kept, never destroyed
    commitlog.truncate(valid_end)
    _sync_tail(commitlog)
    if cqs.max_physic_offset() > valid_end:  # a unit ends past it: it starts at/after it
        for cq in cqs:
            cq.truncate_dirty_logic(valid_end)
    for key, phy in scan.behind.items():
        if phy < valid_end:
            report.cq_behind[f"{key[0]}/{key[1]}"] = phy
    _note_cq_drops(report, before, cqs)
    index_restart = None
    if index_service is not None:
        n = index_service.truncate_dirty_files(valid_end)
        n += check_index_tail(index_service, commitlog)
        report.index_files_dropped += n
        index_restart = index_service.dispatch_from_offset()
    report.reput_from = reput_start(plan, valid_end, commitlog.min_offset(), cqs.max_physic_offset(),
                                    cuts, scan.behind, index_restart)
    if report.dropped_anything:
        log.warning("recovery: %s", report.summary())
    return report


def _root_cause(commitlog: CommitLog, offset: int) -> dict | None:
    for mf in commitlog.queue.files:
        if mf.file_from_offset <= offset < mf.file_from_offset + mf.file_size:
            return root_cause(mf.mm, offset - mf.file_from_offset, mf.file_from_offset)
    return None


def _set_aside(commitlog: CommitLog, valid_end: int, report: RecoveryReport) -> None:
    """Hand every non-zero byte past ``valid_end`` to the quarantine before the cut."""
    if commitlog.queue.readonly or commitlog.cfg.read_only:  # a read-only open cuts nothing
        return
    reason = report.reason or "non-zero bytes after the end of valid data"
    ev = quarantine.set_aside(commitlog.cfg.store_path_root_dir, commitlog.queue.files,
                              valid_end, reason)
    if ev is not None:
        report.quarantined = ev.path
        report.quarantined_bytes = ev.bytes


def _nonzero_bytes_after(commitlog: CommitLog, offset: int) -> int:
    """How many bytes from ``offset`` to the end of the last segment are not zero."""
    total = 0
    for mf in commitlog.queue.files:
        end = mf.file_from_offset + mf.file_size
        if end <= offset:
            continue
        for lo, hi in mf.data_ranges(max(0, offset - mf.file_from_offset)):
            arr = np.frombuffer(mf.mm, dtype=np.uint8, count=hi - lo, offset=lo)
            total += int(np.count_nonzero(arr))
            del arr
    return total


def _sync_tail(commitlog: CommitLog) -> None:
    """Make the zeroed tail durable so a stale record never reappears after a power loss."""
    last = commitlog.queue.last()
    if last is not None:
        pos = last.wrote_position
        last.flushed_position = 0
        last.flush(0, upto=pos)


def _note_cq_drops(report: RecoveryReport, before: dict, cqs: ConsumeQueueTable) -> None:
    for cq in cqs:
        b = before.get((cq.topic, cq.queue_id), 0)
        a = cq.max_offset_in_queue()
        if a < b:
            key = f"{cq.topic}/{cq.queue_id}"
            report.cq_units_dropped[key] = report.cq_units_dropped.get(key, 0) + b - a


def unit_matches(commitlog: CommitLog, cq: ConsumeQueue, queue_offset: int, phy: int, size: int,
                 tags_code: int | None = None) -> str | None:
    """Why the unit does not describe the record it points at (None: it does)."""
    raw = commitlog.read_record(phy)
    if raw is None:
        return f"no record at CommitLog offset {phy}"
    if len(raw) != size:
        return f"unit size {size}, record size {len(raw)}"
    try:
        msg = decode_message(raw, 0, with_body=False)
    except CorruptRecordError as exc:
        return f"no whole record at CommitLog offset {phy}: {exc}"
    if msg is BLANK:
        return f"blank record at CommitLog offset {phy}"
    got = (msg.commitlog_offset, msg.topic, msg.queue_id, msg.queue_offset)
    if got != (phy, cq.topic, cq.queue_id, queue_offset):
        return f"record at {phy} is {got[1]}/{got[2]} #{got[3]} at {got[0]}, unit is #{queue_offset}"
    if tags_code is not None and msg.topic != SCHEDULE_TOPIC and msg.tags_code != tags_code \
            and (tags_code > MAX_EXT_ADDR or not _has_ext(cq)):
        # (an ext address of a queue with a ConsumeQueue-ext is no tags hash; delay units
        # carry a time)
        return f"unit tagsCode {tags_code}, record {msg.tags_code}"
    return None


def _has_ext(cq: ConsumeQueue) -> bool:
    """Whether the queue keeps a ConsumeQueue-ext stream (``<root>/consumequeue_ext/<t>/<q>``)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(cq.queue.directory)))
    return os.path.isdir(os.path.join(root, "consumequeue_ext", cq.topic, str(cq.queue_id)))


def check_cq_tail(cq: ConsumeQueue, commitlog: CommitLog, count: int = CQ_TAIL_CHECK) -> int | None:
    """Cut the queue at its first tail unit that does not match the CommitLog.

    Returns the CommitLog offset dispatch must restart from to rebuild it, or None if intact.
    """
    hi = cq.max_offset_in_queue()
    lo = max(cq.min_offset_in_queue(), hi - count)
    if hi <= lo:
        return None
    bad = None
    i = lo
    min_phy = commitlog.min_offset()
    while i < hi and bad is None:
        units = cq.read_units(i, hi - i)
        if units is None or len(units) == 0:
            break
        offs, sizes, tags = units["offset"].tolist(), units["size"].tolist(), units["tags_code"].tolist()
        for k, (phy, size, tag) in enumerate(zip(offs, sizes, tags)):
            if size == FILLER_SIZE or phy < min_phy:
                continue  # filler, or a message whose segment was cleaned up
            why = unit_matches(commitlog, cq, i + k, phy, size, tag)
            if why is not None:
                bad = i + k
                log.warning("ConsumeQueue %s/%d: unit %d dropped: %s", cq.topic, cq.queue_id, bad, why)
                break
        i += len(offs)
    if bad is None:
        return None
    return _cut_cq(cq, bad, commitlog)


def _cut_cq(cq: ConsumeQueue, index: int, commitlog: CommitLog) -> int:
    with cq.lock:
        cq.queue.truncate_dirty(index * CQ_UNIT_SIZE)
        cq.max_physic_offset = -1
        restart = commitlog.min_offset()
        j = index - 1
        while j * CQ_UNIT_SIZE >= cq.min_logic_offset and j >= 0:
            u = cq.read_units(j, 1)
            if u is None or len(u) == 0:
                break
            if int(u[0]["size"]) != FILLER_SIZE:
                cq.max_physic_offset = int(u[0]["offset"]) + int(u[0]["size"])
                restart = cq.max_physic_offset
                break
            j -= 1
        if cq.queue.max_offset() < cq.min_logic_offset:
            cq.min_logic_offset = cq.queue.max_offset()
    return restart


def entry_matches(commitlog: CommitLog, k: int, key_hash: int, phy: int, time_diff: int,
                  prev: int) -> str | None:
    """Why index entry ``k`` does not describe a key of the record it points at (None: it does)."""
    if prev < 0 or prev >= k or time_diff < 0:
        return f"prevIndex {prev}, timeDiff {time_diff}"
    msg = commitlog.look_message(phy, with_body=False)
    if msg is None or msg.commitlog_offset != phy:
        return f"no record at CommitLog offset {phy}"
    keys = list(msg.keys) + ([msg.uniq_key] if msg.uniq_key else [])
    if key_hash not in {index_key_hash(build_key(msg.topic, key)) for key in keys}:
        return f"no key of the record at {phy} hashes to {key_hash}"
    return None


def check_index_tail(index_service, commitlog: CommitLog, count: int = INDEX_TAIL_CHECK,
                     window: int = INDEX_CHAIN_WINDOW) -> int:
    """Drop the newest index file if one of its last entries does not match the CommitLog or
    breaks its hash chain (dispatch re-indexes from the previous file's end). Returns the
    number of files dropped.

    Chain rule (``putKey``): an entry's prevIndex is the previous entry of the same slot, or 0
    when there is none; a slot's head is its newest entry. Checked for the last ``count``
    entries against the last ``window`` entries (older links cannot be judged and pass).
    """
    files = list(index_service.files)
    if not files:
        return 0
    f = files[-1]
    n = f.index_count
    if n <= 1 and f.begin_phy_offset != f.end_phy_offset:
        # no entries, yet the header covers a CommitLog range (an empty file has begin == end,
        # both carried from the previous file): its entries were lost; indexing on from its
        # end would leave every key of that range unfindable
        log.warning("index file %s: indexCount %d but covers CommitLog %d..%d; the file is "
                    "dropped and rebuilt", f.name, n, f.begin_phy_offset, f.end_phy_offset)
        floor = files[-2].end_phy_offset + 1 if len(files) > 1 else 0
        return index_service.truncate_dirty_files(floor)
    slots = f.hash_slot_num
    lo = max(1, n - window)
    ents = [f.entry(k) for k in range(lo, n)]
    last_of_slot: dict[int, int] = {}
    expect_prev: dict[int, int | None] = {}
    for k, (key_hash, _phy, _td, _prev) in enumerate(ents, start=lo):
        slot = key_hash % slots
        expect_prev[k] = last_of_slot.get(slot, 0 if lo == 1 else None)
        last_of_slot[slot] = k
    min_phy = commitlog.min_offset()
    why = None
    for k in range(max(1, n - count), n):
        key_hash, phy, time_diff, prev = ents[k - lo]
        want = expect_prev[k]
        if want is not None and prev != want and not (want == 0 and prev == 0):
            why = f"entry {k}: prevIndex {prev}, the slot's previous entry is {want}"
        elif phy >= min_phy:
            why = entry_matches(commitlog, k, key_hash, phy, time_diff, prev)
        if why is None and f.slot_value(key_hash % slots) < k:
            why = f"entry {k}: slot {key_hash % slots} points at {f.slot_value(key_hash % slots)}"
        if why is not None:
            break
    if why is None:
        return 0
    log.warning("index file %s: %s; the file is dropped and rebuilt", f.name, why)
    floor = files[-2].end_phy_offset + 1 if len(files) > 1 else 0
    return index_service.truncate_dirty_files(floor)


def rebuild_queue_table(commitlog: CommitLog, cqs: ConsumeQueueTable) -> None:
    """``recoverTopicQueueTable``: next queue offsets from the ConsumeQueues; correct minimums."""
    table = {}
    min_phy = commitlog.min_offset()
    for cq in cqs:
        table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue()
        cq.correct_min_offset(min_phy)
    commitlog.topic_queue_table = table
