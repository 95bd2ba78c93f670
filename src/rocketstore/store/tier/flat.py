"""One queue's flat files in the tier: a COMMIT_LOG and a CONSUME_QUEUE, each a run of
segments (RocketMQ's ``FlatMessageFile``).

The flat COMMIT_LOG starts at offset 0 and holds the queue's CommitLog records back to back,
each with PHYSICALOFFSET (bytes 28..36) set to where it lies in the flat file (what 5.3.3's
``CommitLogInputStream`` writes); no record spans two segments. The flat CONSUME_QUEUE holds
20-byte units ``(flat offset, size, tagsCode)``; its first segment is named for
``first queue offset * 20``. A segment is full past ``max size`` (a new one begins at the next
offset).

**Crash safety.** ``append`` writes the records, then their units, each durable before the
next. ``recover`` (every open) trusts the files only: it keeps whole units whose records are
whole in the COMMIT_LOG and cuts both files to that, so a process killed mid-upload leaves no
gap and no duplicate — the next upload starts at the recovered queue offset and overwrites
the torn tail.
"""
from __future__ import annotations

import logging
import struct
import threading
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from . import layout
from .backend import Backend

log = logging.getLogger(__name__)
_UNIT = struct.Struct(">qiq")
_UNIT_DTYPE = np.dtype([("phy", ">i8"), ("size", ">i4"), ("tag", ">i8")])
PHYS_POS = 28  # PHYSICALOFFSET in a CommitLog record


def rewrite_physical_offset(record: bytes, offset: int) -> bytes:
    return record[:PHYS_POS] + offset.to_bytes(8, "big", signed=True) + record[PHYS_POS + 8:]


class Written(NamedTuple):
    """Records just appended to a flat COMMIT_LOG: ``blob`` holds them back to back from flat
    offset ``base`` (PHYSICALOFFSET rewritten); ``offsets`` is where each starts."""
    base: int
    blob: bytes
    offsets: np.ndarray

    def __len__(self) -> int:  # the records written
        return len(self.offsets)

    def records(self) -> list[tuple[int, bytes]]:
        """(flat offset, record) pairs."""
        rel = (self.offsets - self.base).tolist()
        ends = rel[1:] + [len(self.blob)]
        return [(self.base + a, self.blob[a:b]) for a, b in zip(rel, ends)]


@dataclass
class Seg:
    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


class FlatFile:
    """The segments of one type of one queue."""

    def __init__(self, backend: Backend, cluster: str, queue: str, file_type: str,
                 max_size: int) -> None:
        self.backend = backend
        self.cluster = cluster
        self.queue = queue
        self.file_type = file_type
        self.max_size = max_size
        self.segs: list[Seg] = []

    def key(self, base: int) -> str:
        return layout.segment_key(self.cluster, self.queue, self.file_type, base)

    def load(self) -> None:
        prefix = f"{layout.cluster_dir(self.cluster)}/{self.queue}/{self.file_type}"
        segs = []
        for key, size in self.backend.list(prefix):
            name = key.rsplit("/", 1)[-1]
            base = layout.parse_file_name(name)
            if base is not None and key.count("/") == prefix.count("/") + 1:
                segs.append(Seg(base, size))
        self.segs = sorted(segs, key=lambda s: s.base)

    @property
    def min_offset(self) -> int:
        return self.segs[0].base if self.segs else -1

    @property
    def end(self) -> int:
        return self.segs[-1].end if self.segs else -1

    def cut(self, end: int) -> None:
        """Drop every byte at or after ``end`` (segments wholly after it go)."""
        while self.segs and self.segs[-1].base >= end and len(self.segs) > 1:
            self.backend.delete(self.key(self.segs.pop().base))
        if self.segs and self.segs[-1].end > end:
            last = self.segs[-1]
            new = max(0, end - last.base)
            self.backend.truncate(self.key(last.base), new)
            last.size = new

    def init(self, base: int) -> None:
        if not self.segs:
            self.segs.append(Seg(base, 0))

    def append(self, data: bytes, unit: int = 1) -> int:
        """Write ``data`` at the end, rolling first when the current segment is full (never
        splitting a piece of ``unit`` bytes... callers pass whole records or whole units).
        Returns the offset ``data`` starts at."""
        last = self.segs[-1]
        if last.size and last.size + len(data) > self.max_size:
            last = Seg(last.end, 0)
            self.segs.append(last)
        at = last.end
        self.backend.append(self.key(last.base), last.size, data)
        last.size += len(data)
        return at

    def read(self, offset: int, length: int) -> bytes:
        out = []
        for seg in self.segs:
            if seg.end <= offset or length <= 0:
                continue
            if seg.base > offset:
                break
            take = min(length, seg.end - offset)
            chunk = self.backend.read(self.key(seg.base), offset - seg.base, take)
            out.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
            if len(chunk) < take:
                break
        return b"".join(out)


class FlatQueue:
    """A queue's flat COMMIT_LOG and CONSUME_QUEUE."""

    def __init__(self, backend: Backend, cluster: str, broker: str, topic: str, queue_id: int,
                 commitlog_max: int, cq_max: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.path = layout.queue_path(broker, topic, queue_id)
        self.commitlog = FlatFile(backend, cluster, self.path, layout.COMMIT_LOG, commitlog_max)
        self.cq = FlatFile(backend, cluster, self.path, layout.CONSUME_QUEUE,
                           max(layout.CQ_UNIT, cq_max // layout.CQ_UNIT * layout.CQ_UNIT))
        self.lock = threading.Lock()
        self.first_ts = 0
        self.last_ts = 0
        self._head: int | None = None  # first queue offset whose record is still held
        self._dirty = False
        self._seg_ts: dict[int, int] = {}  # sealed COMMIT_LOG segment base -> newest store time


    # -- offsets ------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """The first queue offset held (whose record is still in the COMMIT_LOG), -1 when the
        queue has nothing yet."""
        if not self.cq.segs:
            return -1
        first = self.cq.min_offset // layout.CQ_UNIT
        return first if self._head is None else max(first, self._head)

    def _unit(self, qo: int) -> tuple[int, int, int] | None:
        raw = self.cq.read(qo * layout.CQ_UNIT, layout.CQ_UNIT)
        return _UNIT.unpack(raw) if len(raw) == layout.CQ_UNIT else None

    def _first_unit_at_or_after(self, phy: int) -> int:
        """The first queue offset whose unit points at ``phy`` or later (units ascend)."""
        lo, hi = self.cq.min_offset // layout.CQ_UNIT, self.cq.end // layout.CQ_UNIT
        while lo < hi:
            mid = (lo + hi) // 2
            u = self._unit(mid)
            if u is not None and u[0] >= phy:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def refresh_head(self) -> None:
        """After segments went (retention, or a crash between deleting the COMMIT_LOG's and the
        CONSUME_QUEUE's): skip the units whose records are gone."""
        self._head = None
        if not self.cq.segs or not self.commitlog.segs:
            return
        first = self._unit(self.cq.min_offset // layout.CQ_UNIT)
        if first is not None and first[0] < self.commitlog.min_offset:
            self._head = self._first_unit_at_or_after(self.commitlog.min_offset)

    def _newest_timestamp(self, seg: Seg) -> int | None:
        """The store time of the last record starting in COMMIT_LOG segment ``seg`` (a sealed
        segment's never changes: remembered, so a retention pass costs no reads)."""
        if seg.base in self._seg_ts:
            return self._seg_ts[seg.base]
        ts = self._read_newest_timestamp(seg)
        if ts is not None:
            self._seg_ts[seg.base] = ts
        return ts

    def _read_newest_timestamp(self, seg: Seg) -> int | None:
        from ...format.message import decode_message
        qo = self._first_unit_at_or_after(seg.end) - 1
        u = self._unit(qo) if qo >= self.cq.min_offset // layout.CQ_UNIT else None
        if u is None or not seg.base <= u[0] < seg.end:
            return None
        rec = self.commitlog.read(u[0], u[1])
        try:
            return decode_message(rec, 0, with_body=False).store_timestamp
        except Exception:  # noqa: BLE001 - an unreadable record is kept, never guessed at
            return None

    def expire(self, before_ms: int) -> tuple[int, int]:
        """RocketMQ's ``destroyExpiredFile``: from the head, delete COMMIT_LOG segments whose
        newest record was stored before ``before_ms`` (never the segment being written), then
        the CONSUME_QUEUE segments whose units all point at deleted records. Returns the
        segments deleted (COMMIT_LOG, CONSUME_QUEUE)."""
        with self.lock:
            n_cl = n_cq = 0
            cl = self.commitlog
            while len(cl.segs) > 1:
                ts = self._newest_timestamp(cl.segs[0])
                if ts is None or ts >= before_ms:
                    break
                cl.backend.delete(cl.key(cl.segs[0].base))
                self._seg_ts.pop(cl.segs.pop(0).base, None)
                n_cl += 1
            while len(self.cq.segs) > 1 and cl.segs:
                last = self._unit((self.cq.segs[0].end - layout.CQ_UNIT) // layout.CQ_UNIT)
                if last is None or last[0] >= cl.min_offset:
                    break
                self.cq.backend.delete(self.cq.key(self.cq.segs[0].base))
                self.cq.segs.pop(0)
                n_cq += 1
            self.refresh_head()
            return n_cl, n_cq

    @property
    def max_offset(self) -> int:
        """One past the last queue offset held (RocketMQ's max offset), -1 when empty."""
        return self.cq.end // layout.CQ_UNIT if self.cq.segs else -1

    def recover(self) -> tuple[int, int]:
        """Load the segments and cut torn tails (see module doc). Returns the bytes cut from
        (COMMIT_LOG, CONSUME_QUEUE)."""
        self._seg_ts.clear()
        self.commitlog.load()
        self.cq.load()
        if not self.cq.segs:
            cut_cl = max(0, self.commitlog.end)
            if self.commitlog.segs:
                self.commitlog.cut(0)
            return cut_cl, 0
        cq_end = self.cq.end - self.cq.end % layout.CQ_UNIT
        cl_end = max(0, self.commitlog.end)
        good = cq_end
        while good > self.cq.min_offset:  # the last unit whose record is whole
            phy, size, _ = _UNIT.unpack(self.cq.read(good - layout.CQ_UNIT, layout.CQ_UNIT))
            if size > 0 and phy + size <= cl_end:
                cl_keep = phy + size
                break
            good -= layout.CQ_UNIT
        else:
            cl_keep = 0
        cut = (max(0, self.commitlog.end) - cl_keep, self.cq.end - good)
        if cut[1]:
            self.cq.cut(good)
        if cut[0] and self.commitlog.segs:
            self.commitlog.cut(cl_keep)
        self.refresh_head()
        return cut

    def resync(self) -> None:
        """After a failed append the in-memory sizes are unsure: reload and cut as on open."""
        with self.lock:
            if self._dirty:
                cut = self.recover()
                if any(cut):
                    log.warning("tier %s: after a failed upload, cut %d COMMIT_LOG and %d "
                                "CONSUME_QUEUE bytes the store holds no unit for", self.path, *cut)
                self._dirty = False

    def init(self, queue_offset: int) -> None:
        self.commitlog.init(0)
        self.cq.init(queue_offset * layout.CQ_UNIT)

    # -- write --------------------------------------------------------------------------------
    def append(self, queue_offset: int, records: Sequence[bytes | memoryview],
               tags: Sequence[int]) -> Written:
        """Append the records of queue offsets ``queue_offset ..`` (must be ``max_offset``).
        Returns them as written (PHYSICALOFFSET rewritten): one contiguous run of the flat
        COMMIT_LOG (a roll starts the next segment where the last one ends)."""
        if not len(records):
            return Written(max(0, self.commitlog.end), b"", np.zeros(0, dtype=np.int64))
        with self.lock:
            if self._dirty:
                raise RuntimeError(f"{self.path}: resync() after a failed append")
            try:
                return self._append(queue_offset, records, tags)
            except BaseException:
                # the backend may hold some of it (a PUT whose answer was lost): the next
                # append first cuts back to the last whole unit, so nothing is there twice
                self._dirty = True
                raise

    def _append(self, queue_offset: int, records: Sequence[bytes | memoryview],
                tags: Sequence[int]) -> Written:
        """Per batch, not per record: one join of the records, their PHYSICALOFFSETs and
        CONSUME_QUEUE units written with numpy, one backend append per segment touched."""
        if self.max_offset != queue_offset:
            raise ValueError(f"{self.path}: tier holds up to {self.max_offset}, "
                             f"not {queue_offset}")
        cl = self.commitlog
        blob = bytearray().join(records)
        sizes = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
        rel = np.zeros(len(sizes), dtype=np.int64)  # each record's start within ``blob``
        np.cumsum(sizes[:-1], out=rel[1:])
        base = cl.end
        # where the current segment fills up: the records from there go to new segments
        cuts = []  # indexes of the records that start a new segment
        used = cl.segs[-1].size
        start_rel = 0
        if used + len(blob) > cl.max_size:
            for i, size in enumerate(sizes.tolist()):
                seg_used = used + int(rel[i]) - start_rel
                if seg_used and seg_used + size > cl.max_size:
                    cuts.append(i)
                    used, start_rel = 0, int(rel[i])
        pos = base + rel
        arr = np.frombuffer(blob, dtype=np.uint8)
        arr[(rel + PHYS_POS)[:, None] + np.arange(8)] = \
            pos.astype(">i8").view(np.uint8).reshape(-1, 8)
        bounds = [0, *(int(rel[i]) for i in cuts), len(blob)]
        mv = memoryview(blob)
        for k in range(len(bounds) - 1):
            if k:
                cl.segs.append(Seg(cl.end, 0))
            if bounds[k + 1] > bounds[k]:
                cl.append(mv[bounds[k]:bounds[k + 1]])
        units = np.empty(len(sizes), dtype=_UNIT_DTYPE)
        units["phy"], units["size"], units["tag"] = pos, sizes, np.asarray(tags, dtype=np.int64)
        data = units.tobytes()
        per = self.cq.max_size
        while data:  # CQ segments hold whole units
            last = self.cq.segs[-1]
            room = per - last.size if last.size < per else 0
            if room == 0:
                self.cq.segs.append(Seg(last.end, 0))
                room = per
            self.cq.append(data[:room])
            data = data[room:]
        return Written(base, bytes(blob), pos)

    # -- read ---------------------------------------------------------------------------------
    def units(self, queue_offset: int, count: int) -> list[tuple[int, int, int]]:
        lo, hi = self.min_offset, self.max_offset
        if queue_offset < lo or queue_offset >= hi:
            return []
        n = min(count, hi - queue_offset)
        raw = self.cq.read(queue_offset * layout.CQ_UNIT, n * layout.CQ_UNIT)
        return [_UNIT.unpack_from(raw, i) for i in range(0, len(raw) - layout.CQ_UNIT + 1,
                                                         layout.CQ_UNIT)]

    def records_aligned(self, units: list[tuple[int, int, int]]) -> list[bytes | None]:
        """The record each unit points at (None where it could not be read whole)."""
        got = {}
        i = 0
        while i < len(units):
            j = i + 1
            while j < len(units) and units[j][0] == units[j - 1][0] + units[j - 1][1]:
                j += 1
            start = units[i][0]
            blob = self.commitlog.read(start, units[j - 1][0] + units[j - 1][1] - start)
            for phy, size, _ in units[i:j]:
                rec = blob[phy - start:phy - start + size]
                got[phy] = rec if len(rec) == size else None
            i = j
        return [got.get(u[0]) for u in units]

    def records(self, units: list[tuple[int, int, int]]) -> list[bytes]:
        """The records the units point at, read in runs of adjacent ones (those that could not
        be read whole left out)."""
        return [rec for rec in self.records_aligned(units) if rec is not None]
