"""Recovery decisions after load: where valid CommitLog data ends and where reput restarts.

* **Normal** (no abort file): scan the last three segments (CRC checked) for the first invalid
  record.
* **Abnormal** (abort file present): walk segments backwards to the first whose first record is
  at or before the checkpoint's min timestamp (``min(physic, logics) - 3 s``), scan forward from
  there, and re-dispatch everything from that segment on (ConsumeQueue writes are idempotent,
  the index skips what it already holds).
* Both truncate the CommitLog at the first invalid record and drop ConsumeQueue units that point
  at or beyond it. Reput then restarts at the lowest of: the highest ConsumeQueue end (RocketMQ
  4.9's rule), the index's own restart point (RocketMQ loses index entries here; we do not) and,
  after a crash, the chosen segment's start — and runs synchronously to the end before the
  store accepts puts, so the queue-offset table is rebuilt from complete ConsumeQueues.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .dispatch import ConsumeQueueTable

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    normal: bool
    start_segment: int = 0
    valid_end: int = 0
    truncated_at: int | None = None
    reason: str = ""
    dropped_bytes: int = 0
    reput_from: int = 0
    notes: list[str] = field(default_factory=list)


def recover(commitlog: CommitLog, cqs: ConsumeQueueTable, checkpoint: StoreCheckpoint,
            last_exit_ok: bool, check_crc: bool, index_from: int | None) -> RecoveryReport:
    report = RecoveryReport(normal=last_exit_ok)
    for cq in cqs:
        cq.recover()
    max_phy_cq = cqs.max_physic_offset()
    files = commitlog.queue.files
    if not files:
        for cq in cqs:
            cq.destroy()
        return report
    if last_exit_ok:
        idx = max(0, len(files) - 3)
    else:
        idx = 0
        limit = checkpoint.min_timestamp()
        for i in range(len(files) - 1, -1, -1):
            ts = commitlog.first_record_timestamp(files[i])
            if ts != 0 and ts <= limit:
                idx = i
                break
    report.start_segment = idx
    old_end = files[-1].file_from_offset + files[-1].file_size
    valid_end, stop, reason = commitlog.scan_valid_end(idx, check_crc)
    report.valid_end = valid_end
    if stop in ("corrupt", "incomplete"):
        report.truncated_at = valid_end
        report.reason = f"{stop}: {reason}" if reason else stop
        log.warning("CommitLog truncated at offset %d (%s)", valid_end, report.reason)
    commitlog.truncate(valid_end)
    report.dropped_bytes = max(0, old_end - valid_end) if report.truncated_at is not None else 0
    if max_phy_cq >= valid_end:
        for cq in cqs:
            cq.truncate_dirty_logic(valid_end)
    reput = max(max_phy_cq, 0)
    if index_from is not None:
        reput = min(reput, index_from)
    if not last_exit_ok:
        reput = min(reput, files[idx].file_from_offset if files else 0)
    reput = max(reput, commitlog.min_offset())
    report.reput_from = min(reput, valid_end)
    return report


def rebuild_queue_table(commitlog: CommitLog, cqs: ConsumeQueueTable) -> None:
    """``recoverTopicQueueTable``: next queue offsets from the ConsumeQueues; correct minimums."""
    table = {}
    min_phy = commitlog.min_offset()
    for cq in cqs:
        table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue()
        cq.correct_min_offset(min_phy)
    commitlog.topic_queue_table = table
