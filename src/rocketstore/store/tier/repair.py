"""Damaged records in the tier: rewritten from the local CommitLog while it holds them,
otherwise kept aside and reported.

Theory of operation. A record read from the tier passes ``record_ok`` (TOTALSIZE = its unit's
size, a message magic code, PHYSICALOFFSET = its flat offset, the body CRC, its queue's topic)
or it is damaged; an S3 object may also fail its whole-object checksum (``s3``). Either way the
service calls ``TierRepair.repair_segment`` for the flat COMMIT_LOG segment holding it:

1. the segment's bytes as they are (``Backend.salvage``), at the size the tier wrote;
2. each unit pointing into the segment whose record fails ``record_ok`` takes the local
   CommitLog's record of that queue offset instead (PHYSICALOFFSET set to the flat offset), when
   the local store still holds it with the same size and tags code;
3. what no local record can mend stays as it is: before anything is rewritten, the segment's
   bytes are copied to ``quarantine/<segment key>.<ms>`` in the tier with a manifest beside it
   (``.json``: topic, queue id, the queue offsets and flat offsets damaged, why, when). Nothing
   under ``quarantine/`` is ever deleted, and the original stays where it is;
4. the mended segment replaces the old one at once (``Backend.replace``).

A pull then skips a record nothing could mend, as RocketMQ skips a record it cannot read
(``MESSAGE_WAS_REMOVING`` when nothing else is found): never garbage, and every skip is in
``tier status`` / ``tier verify`` (the manifests) and ``/metrics``.
"""
from __future__ import annotations

import json
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

from ...format.message import decode_message
from .backend import Backend
from .flat import FlatQueue, Seg, rewrite_physical_offset
from .s3 import TierChecksumError

log = logging.getLogger(__name__)

QUARANTINE = "quarantine"
_MAGICS = (-626843481, -626843477)  # 0xDAA320A7 (v1), 0xDAA320AB (v2)

# (topic, queue id, queue offset) -> (record bytes, tags code) from the local store, or None
LocalRecord = Callable[[str, int, int], "tuple[bytes, int] | None"]


def checked_record(raw, phy: int, size: int, topic: str):
    """The message, when ``raw`` is the whole, undamaged record a unit ``(phy, size)`` of
    ``topic`` points at: TOTALSIZE = ``size``, a message magic code, PHYSICALOFFSET = ``phy``,
    the body CRC holds, the topic is the queue's. None otherwise."""
    if raw is None or len(raw) != size or size < 36:
        return None
    total, magic = struct.unpack_from(">ii", raw, 0)
    if total != size or magic not in _MAGICS:
        return None
    if int.from_bytes(raw[28:36], "big", signed=True) != phy:
        return None
    try:
        msg = decode_message(raw, 0, check_crc=True)
    except Exception:  # noqa: BLE001 - any damage reads as "not this record"
        return None
    return msg if getattr(msg, "topic", None) == topic else None


def record_ok(raw, phy: int, size: int, topic: str) -> bool:
    return checked_record(raw, phy, size, topic) is not None


@dataclass
class Damage:
    """Records of one segment no local record could mend (a quarantine manifest)."""
    topic: str
    queue_id: int
    key: str  # the segment's key, relative to the tier's base
    quarantine_key: str
    queue_offsets: list[int]
    flat_offsets: list[int]
    reason: str
    time_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_json(self) -> dict:
        return {"topic": self.topic, "queueId": self.queue_id, "segment": self.key,
                "quarantine": self.quarantine_key, "queueOffsets": self.queue_offsets,
                "flatOffsets": self.flat_offsets, "reason": self.reason, "time": self.time_ms}

    @classmethod
    def from_json(cls, doc: dict) -> "Damage":
        return cls(doc["topic"], int(doc["queueId"]), doc["segment"], doc["quarantine"],
                   [int(x) for x in doc["queueOffsets"]], [int(x) for x in doc["flatOffsets"]],
                   doc.get("reason", ""), int(doc.get("time", 0)))


def load_damage(backend: Backend) -> list[Damage]:
    """Every quarantine manifest in the tier, oldest first."""
    out = []
    for key, _size in backend.list(QUARANTINE):
        if not key.endswith(".json"):
            continue
        try:
            out.append(Damage.from_json(json.loads(backend.salvage(key))))
        except (ValueError, KeyError, TypeError):
            log.error("tier: unreadable quarantine manifest %s", key)
    return sorted(out, key=lambda d: (d.time_ms, d.key))


class TierRepair:
    def __init__(self, backend: Backend, local_record: LocalRecord) -> None:
        self.backend = backend
        self.local_record = local_record
        self.repaired_records = 0
        self.repaired_segments = 0
        self.damage: list[Damage] = []

    def load(self) -> None:
        self.damage = load_damage(self.backend)

    def lost(self, topic: str, queue_id: int) -> set[int]:
        """The queue offsets of ``topic``/``queue_id`` known to be beyond repair."""
        return {qo for d in self.damage if d.topic == topic and d.queue_id == queue_id
                for qo in d.queue_offsets}

    def repair_segment(self, fq: FlatQueue, seg: Seg, reason: str,
                       rewrite: bool = False) -> tuple[list[int], list[int]]:
        """Mend COMMIT_LOG segment ``seg`` of ``fq`` (see the module doc); ``rewrite``: write
        it anew even when no record needs mending (its whole-object checksum failed). Returns
        the queue offsets (rewritten from local bytes, left damaged)."""
        key = fq.commitlog.key(seg.base)
        old = self.backend.salvage(key)
        new = bytearray(old[:seg.size].ljust(seg.size, b"\0"))
        mended, lost, lost_phy = [], [], []
        for qo, (phy, size, tag) in self._units_in(fq, seg):
            at = phy - seg.base
            if record_ok(bytes(new[at:at + size]), phy, size, fq.topic):
                continue
            local = self.local_record(fq.topic, fq.queue_id, qo)
            fix = rewrite_physical_offset(local[0], phy) if local is not None else None
            if fix is not None and local[1] == tag and 0 <= at and at + size <= len(new) \
                    and record_ok(fix, phy, size, fq.topic):
                new[at:at + size] = fix
                mended.append(qo)
            else:
                lost.append(qo)
                lost_phy.append(phy)
        if lost and not set(lost) <= self.lost(fq.topic, fq.queue_id):
            self._quarantine(fq, key, old, lost, lost_phy, reason)
        if mended or rewrite or len(old) != seg.size:
            # (the damaged bytes are in quarantine: rewriting them keeps the object's
            # checksum whole, so appends to it go on)
            self.backend.replace(key, bytes(new))
            self.repaired_records += len(mended)
            self.repaired_segments += 1
            log.warning("tier %s: rewrote COMMIT_LOG segment %d (%s): queue offsets %s mended "
                        "from the local CommitLog, %s beyond repair", fq.path, seg.base, reason,
                        _ranges(mended), _ranges(lost))
        return mended, lost

    @staticmethod
    def _units_in(fq: FlatQueue, seg: Seg):
        """(queue offset, unit) of each unit whose record starts in ``seg``."""
        first = max(fq._first_unit_at_or_after(seg.base), fq.min_offset)
        end = fq._first_unit_at_or_after(seg.end)
        return enumerate(fq.units(first, end - first), start=first) if end > first else []

    def _quarantine(self, fq: FlatQueue, key: str, old: bytes, lost: list[int],
                    lost_phy: list[int], reason: str) -> None:
        now = int(time.time() * 1000)
        qkey = f"{QUARANTINE}/{key}.{now}"
        d = Damage(fq.topic, fq.queue_id, key, qkey, lost, lost_phy, reason, now)
        self.backend.replace(qkey, old)  # the bytes first, then the manifest that names them
        self.backend.replace(qkey + ".json", json.dumps(d.to_json(), indent=2).encode())
        self.damage.append(d)
        log.error("tier %s: queue offsets %s are damaged in the tier (%s) and no longer in the "
                  "local CommitLog; segment copied to %s, pulls skip them", fq.path,
                  _ranges(lost), reason, qkey)

    def repair_queue(self, fq: FlatQueue, reason: str) -> tuple[list[int], list[int]]:
        """Check every record of ``fq`` and mend the segments holding damaged ones."""
        mended: list[int] = []
        lost: list[int] = []
        for seg in list(fq.commitlog.segs):
            if seg.end <= fq.commitlog.min_offset or seg.size == 0:
                continue
            try:
                damaged = self.segment_damaged(fq, seg)
                rewrite = False
            except TierChecksumError:
                damaged = rewrite = True
            if damaged:
                m, l_ = self.repair_segment(fq, seg, reason, rewrite)
                mended += m
                lost += l_
        return mended, lost

    def segment_damaged(self, fq: FlatQueue, seg: Seg) -> bool:
        """Does a record of ``seg`` not yet known lost fail its checks, or (S3) the object its
        whole-object checksum?"""
        data = self.backend.read(fq.commitlog.key(seg.base), 0, seg.size)  # S3: CRC checked
        if len(data) != seg.size:
            return True
        lost = self.lost(fq.topic, fq.queue_id)
        for qo, (phy, size, _tag) in self._units_in(fq, seg):
            if qo in lost:
                continue
            if not record_ok(data[phy - seg.base:phy - seg.base + size], phy, size, fq.topic):
                return True
        return False


def _ranges(offsets: list[int]) -> str:
    if not offsets:
        return "none"
    out, start, prev = [], offsets[0], offsets[0]
    for x in offsets[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(out)
