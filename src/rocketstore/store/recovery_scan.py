"""The recovery scan: where valid CommitLog data ends, and what else looks odd on the way.

Theory of operation. ``scan_commitlog`` walks segments forward from the recovery start with the
batch decoder, which applies ``format.record``'s validity rule (RocketMQ 4.9.7's
``checkMessageAndReturnSize``: magic, lengths, TOTALSIZE, body CRC). The first record that fails
the rule is the end of valid data, and the only truncation point: a record the put path wrote
and RocketMQ would accept is never cut, whatever it contains.

Checks beyond RocketMQ's rule only **report** (``ScanResult.notes``), never truncate:

* **Queue offsets.** Per ``(topic, queue)`` offsets normally go ``q, q+1 …`` (prepared and
  rollback records carry 0 and are skipped). A restart at a lower offset is what RocketMQ does
  after a topic is deleted and re-created, so it is legal; any jump is noted.
* **NUL bytes or invalid UTF-8** in a topic or properties string (legal for RocketMQ; also what a
  torn write can leave in a record without a body CRC).
* **PHYSICALOFFSET** not equal to the record's own offset (a segment copied or renamed).

In the same pass the scan notes, per queue, the first record whose queue offset the
ConsumeQueue lacks and that lies after its last unit (``behind``), so recovery can restart dispatch early enough to rebuild a
ConsumeQueue that lost its tail.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..format import batch as fbatch
from ..format.record import (MESSAGE_MAGIC_CODE_V2, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE,
                             TRANSACTION_ROLLBACK_TYPE)
from .commitlog import CommitLog

SCAN_CHUNK = 64 << 20
ODD_CHECK_RECORDS = 4096  # records per chunk whose strings are checked for NUL / bad UTF-8
MAX_NOTES = 20


@dataclass
class ScanResult:
    valid_end: int
    stop: str
    reason: str = ""
    behind: dict[tuple[str, int], int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        elif len(self.notes) == MAX_NOTES:
            self.notes.append("further findings not listed")


class _QueueState:
    """Per-queue offsets carried across chunks: what the ConsumeQueue lacks, and jumps."""

    def __init__(self, cq_next: dict, cq_end: dict, out: ScanResult) -> None:
        self.cq_next = cq_next  # (topic, qid) -> units in the ConsumeQueue
        self.cq_end = cq_end  # (topic, qid) -> CommitLog end of the last unit's record
        self.expect: dict[tuple[str, int], int] = {}
        self.out = out

    def feed(self, recs) -> None:
        tran = recs.sys_flag & TRANSACTION_MASK
        ok = (tran != TRANSACTION_PREPARED_TYPE) & (tran != TRANSACTION_ROLLBACK_TYPE)
        topics = np.asarray(recs.topic, dtype=object)
        qids, qoffs, phys = recs.queue_id, recs.queue_offset, recs.offsets
        behind = self.out.behind
        for topic in set(recs.topic):
            tmask = (topics == topic) & ok
            for qid in np.unique(qids[tmask]).tolist():
                key = (topic, int(qid))
                idx = np.flatnonzero(tmask & (qids == qid))
                q = qoffs[idx]
                prev = self.expect.get(key)
                if prev is not None and int(q[0]) != prev:
                    self._jump(key, prev, int(q[0]), int(phys[idx[0]]))
                for g in np.flatnonzero(np.diff(q) != 1).tolist():
                    self._jump(key, int(q[g]) + 1, int(q[g + 1]), int(phys[idx[g + 1]]))
                self.expect[key] = int(q[-1]) + 1
                if key not in behind:
                    lacking = np.flatnonzero((q >= self.cq_next.get(key, 0))
                                             & (phys[idx] >= self.cq_end.get(key, -1)))
                    if len(lacking):
                        behind[key] = int(phys[idx[int(lacking[0])]])

    def _jump(self, key, want: int, got: int, phy: int) -> None:
        kind = "restarts" if got < want else "jumps"
        self.out.note(f"{key[0]}/{key[1]}: queue offset {kind} at CommitLog offset {phy}: "
                      f"{got}, previous record +1 is {want} (kept)")


def _odd_strings(buf, recs, start: int) -> list[int]:
    """Records from ``start`` whose topic or properties hold NUL or are not UTF-8."""
    mv = memoryview(buf)
    ends = (recs.pos + recs.size.astype(np.int64)).tolist()
    tl_pos = (recs.body_pos + recs.body_len.astype(np.int64)).tolist()
    v2 = (recs.magic == MESSAGE_MAGIC_CODE_V2).tolist()
    out = []
    for i in range(start, len(recs)):
        p = tl_pos[i]
        if v2[i]:
            tlen, p = int.from_bytes(mv[p:p + 2], "big"), p + 2
        else:
            tlen, p = mv[p], p + 1
        topic, props = mv[p:p + tlen], mv[p + tlen + 2:ends[i]]
        if 0 in topic or 0 in props:
            out.append(i)
            continue
        try:
            str(topic, "utf-8")
            str(props, "utf-8")
        except UnicodeDecodeError:
            out.append(i)
    return out


@dataclass
class SegmentEnd:
    """Where valid data ends in one CommitLog segment (``segment_end``)."""

    end: int  # absolute: the end of the last whole valid record (the file's end when rolled)
    stop: str  # the batch decoder's stop kind at ``end``
    reason: str
    rolled: bool  # ends with a blank record: valid data runs to the end of the file
    last_records: list[int]  # absolute starts of the valid records of the last chunk walked


def segment_end(buf, base: int, size: int, start: int = 0, *, check_crc: bool,
                on_records: Callable[[object, object], None] | None = None) -> SegmentEnd:
    """The one "valid end of the CommitLog" rule, for one segment mapped as ``buf`` (based at
    absolute offset ``base``, ``size`` bytes): walk the records from ``start`` (relative, a
    record boundary) in chunks of ``SCAN_CHUNK`` with the batch decoder; the first record that
    fails ``format.record``'s validity rule (with ``check_crc``, its body CRC too) ends valid
    data; a blank record means the segment was rolled and its data runs to the file's end.
    ``on_records(buf, recs)`` sees every decoded chunk (recovery feeds its queue checks).
    Used by recovery (``scan_commitlog``) and by the Spark reader (``spark.segments``)."""
    pos = start
    last: list[int] = []
    while True:
        end = min(size, pos + SCAN_CHUNK)
        recs = fbatch.decode_records(buf, pos, end, base_offset=base,
                                     check_crc=check_crc, properties=False)
        if len(recs):
            last = (base + recs.pos.astype(np.int64)).tolist()
            if on_records is not None:
                on_records(buf, recs)
        pos = recs.end
        if recs.stop == fbatch.STOP_INCOMPLETE and end < size and len(recs):
            continue  # a record straddles the chunk boundary, not the data end
        break
    rolled = recs.stop == fbatch.STOP_BLANK
    return SegmentEnd(base + size if rolled else base + pos, recs.stop, recs.stop_reason, rolled, last)


def scan_commitlog(commitlog: CommitLog, start_index: int, check_crc: bool,
                   cq_next: dict, cq_end: dict) -> ScanResult:
    """Where valid data ends from segment ``start_index`` on (see the module doc)."""
    files = commitlog.queue.files
    if not files:
        return ScanResult(0, fbatch.STOP_END)
    out = ScanResult(files[start_index].file_from_offset, fbatch.STOP_END)
    state = _QueueState(cq_next, cq_end, out)
    size = commitlog.file_size

    def check(buf, recs) -> None:
        base = int(recs.base_offset)
        state.feed(recs)
        for i in _odd_strings(buf, recs, max(0, len(recs) - ODD_CHECK_RECORDS)):
            out.note(f"record at {base + int(recs.pos[i])}: NUL bytes or "
                     "invalid UTF-8 in its topic or properties (kept: RocketMQ accepts it)")
        misplaced = np.flatnonzero(recs.commitlog_offset != recs.base_offset + recs.pos)
        if len(misplaced):
            i = int(misplaced[0])
            out.note(f"record at {base + int(recs.pos[i])}: PHYSICALOFFSET "
                     f"{int(recs.commitlog_offset[i])} is not its offset (kept)")

    for mf in files[start_index:]:
        seg = segment_end(mf.mm, mf.file_from_offset, size, check_crc=check_crc, on_records=check)
        out.valid_end = seg.end
        if seg.rolled:
            continue
        out.stop, out.reason = seg.stop, seg.reason
        return out
    return out
