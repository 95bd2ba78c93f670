"""The recovery scan: where valid CommitLog data ends, checked harder than the format alone.

Theory of operation. ``scan_commitlog`` walks segments forward from the recovery start with the
batch decoder (layout and body CRC checked, as ``checkMessageAndReturnSize`` does). RocketMQ's
v1 record has no CRC over its header or properties, so a torn write or a flipped byte there can
look like a whole record; two more checks catch what a crash or a bad sector typically does:

* **Queue offsets are consecutive.** Within the scan every ``(topic, queue)`` must go
  ``q, q+1, q+2 …`` (prepared/rollback records carry 0 and are skipped), and the first record
  of a queue that lies after the end of its ConsumeQueue's last unit must carry exactly the
  queue's next offset. A record that breaks this is treated as damaged.
* **No zeroed bytes in names.** In the last ``TORN_CHECK_RECORDS`` records, a topic or a
  properties string containing NUL, or not valid UTF-8, marks a torn write or a damaged sector
  (a record whose header and body reached the disk but not its tail).
* **The record is where it says it is**: PHYSICALOFFSET equals the record's offset.

The scan stops at the first damaged record: that is the truncation point. In the same pass it
notes, per queue, the first record whose queue offset the ConsumeQueue lacks (``behind``), so
recovery can restart dispatch early enough to rebuild a ConsumeQueue that lost its tail.
"""
from __future__ import annotations

import numpy as np

from ..format import batch as fbatch
from ..format.message import TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from .commitlog import CommitLog

SCAN_CHUNK = 64 << 20
TORN_CHECK_RECORDS = 4096


class _QueueState:
    """Per-queue expectations carried across chunks."""

    def __init__(self, cq_next: dict, cq_end: dict) -> None:
        self.cq_next = cq_next  # (topic, qid) -> units in the ConsumeQueue
        self.cq_end = cq_end  # (topic, qid) -> CommitLog end of the last unit's record
        self.expect: dict[tuple[str, int], int] = {}
        self.behind: dict[tuple[str, int], int] = {}

    def first_bad(self, recs) -> tuple[int | None, str]:
        """Index of the first record that breaks queue-offset continuity (None: all fine)."""
        tran = recs.sys_flag & TRANSACTION_MASK
        ok = (tran != TRANSACTION_PREPARED_TYPE) & (tran != TRANSACTION_ROLLBACK_TYPE)
        topics = np.asarray(recs.topic, dtype=object)
        qids, qoffs, phys = recs.queue_id, recs.queue_offset, recs.commitlog_offset
        worst: int | None = None
        why = ""
        updates = {}
        for topic in set(recs.topic):
            tmask = (topics == topic) & ok
            for qid in np.unique(qids[tmask]).tolist():
                key = (topic, int(qid))
                idx = np.flatnonzero(tmask & (qids == qid))
                q = qoffs[idx]
                bad = None
                first_q = int(q[0])
                if key in self.expect:
                    if first_q != self.expect[key]:
                        bad = 0
                elif self.cq_end.get(key, 0) > 0 and int(phys[idx[0]]) >= self.cq_end[key] \
                        and first_q != self.cq_next.get(key, 0):
                    bad = 0
                if bad is None and len(q) > 1:
                    gaps = np.flatnonzero(np.diff(q) != 1)
                    if len(gaps):
                        bad = int(gaps[0]) + 1
                if bad is not None:
                    i = int(idx[bad])
                    if worst is None or i < worst:
                        worst = i
                        want = self.expect.get(key, self.cq_next.get(key, 0)) if bad == 0 else int(q[bad - 1]) + 1
                        why = f"{topic}/{qid}: queue offset {int(q[bad])}, expected {want}"
                    idx, q = idx[:bad], q[:bad]
                if len(q):
                    updates[key] = (idx, q)
        for key, (idx, q) in updates.items():
            if worst is not None:
                keep = idx < worst
                idx, q = idx[keep], q[keep]
                if not len(q):
                    continue
            self.expect[key] = int(q[-1]) + 1
            if key not in self.behind:
                lacking = np.flatnonzero(q >= self.cq_next.get(key, 0))
                if len(lacking):
                    self.behind[key] = int(phys[idx[int(lacking[0])]])
        return worst, why


def _first_torn(buf, recs, start: int) -> int | None:
    """First record from ``start`` whose topic or properties contain NUL or are not UTF-8."""
    mv = memoryview(buf)
    ends = (recs.pos + recs.size.astype(np.int64)).tolist()
    tl_pos = (recs.body_pos + recs.body_len.astype(np.int64)).tolist()
    v2 = (recs.magic == fbatch.MESSAGE_MAGIC_CODE_V2).tolist()
    for i in range(start, len(recs)):
        p = tl_pos[i]
        if v2[i]:
            tlen, p = int.from_bytes(mv[p:p + 2], "big"), p + 2
        else:
            tlen, p = mv[p], p + 1
        topic, props = mv[p:p + tlen], mv[p + tlen + 2:ends[i]]
        if 0 in topic or 0 in props:
            return i
        try:
            str(topic, "utf-8")
            str(props, "utf-8")
        except UnicodeDecodeError:
            return i
    return None


def _first_misplaced(recs) -> int | None:
    """First record whose PHYSICALOFFSET field is not its own offset."""
    bad = np.flatnonzero(recs.commitlog_offset != recs.base_offset + recs.pos)
    return int(bad[0]) if len(bad) else None


def scan_commitlog(commitlog: CommitLog, start_index: int, check_crc: bool,
                   cq_next: dict, cq_end: dict) -> tuple[int, str, str, dict]:
    """(valid end, stop kind, reason, {queue: first CommitLog offset its ConsumeQueue lacks})."""
    files = commitlog.queue.files
    state = _QueueState(cq_next, cq_end)
    if not files:
        return 0, fbatch.STOP_END, "", state.behind
    off = files[start_index].file_from_offset
    size = commitlog.file_size
    last_file = files[-1]
    for mf in files[start_index:]:
        pos = 0
        while True:
            end = min(size, pos + SCAN_CHUNK)
            recs = fbatch.decode_records(mf.mm, pos, end, base_offset=mf.file_from_offset,
                                         check_crc=check_crc, properties=False)
            bad, why = state.first_bad(recs) if len(recs) else (None, "")
            misplaced = _first_misplaced(recs) if len(recs) else None
            if misplaced is not None and (bad is None or misplaced <= bad):
                bad, why = misplaced, "PHYSICALOFFSET is not the record's offset"
            final = (recs.stop != fbatch.STOP_INCOMPLETE or end >= size or not len(recs)) \
                and (mf is last_file or recs.stop != fbatch.STOP_BLANK)
            if final and len(recs):
                torn = _first_torn(mf.mm, recs, max(0, len(recs) - TORN_CHECK_RECORDS))
                if torn is not None and (bad is None or torn < bad):
                    bad, why = torn, "NUL bytes in the topic or properties (torn write)"
            if bad is not None:
                return mf.file_from_offset + int(recs.pos[bad]), fbatch.STOP_CORRUPT, why, state.behind
            pos = recs.end
            if recs.stop == fbatch.STOP_INCOMPLETE and end < size and len(recs):
                continue  # a record straddles the chunk boundary, not the data end
            break
        if recs.stop == fbatch.STOP_BLANK:
            off = mf.file_from_offset + size
            continue
        return mf.file_from_offset + pos, recs.stop, recs.stop_reason, state.behind
    return off, fbatch.STOP_END, "", state.behind
