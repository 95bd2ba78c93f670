"""CommitLog segments as byte ranges: listing, planning, the valid end, decoding a range.

Theory of operation. A CommitLog is a directory of pre-sized files named by their 20-digit
start offset. Records never span files; a file that has been rolled over ends with an 8-byte
blank record, and the file being written ends in zeros. So a *range* of the log is fully
described by plain data — ``(path, base, start, end)`` in absolute offsets — which pickles to
Spark executors, where ``read_range`` mmaps the file read-only and walks it with the shared
vectorised decoder (``format.batch.decode_records``) in windows of ``window_bytes``.

Ranges start on record boundaries: a segment start, an offset we produced ourselves (stream
offsets), or a split point found by walking the TOTALSIZE fields (``scan_boundaries``) — only
done for segments larger than the split size, so small stores pay nothing.

Where does valid data end? At the first thing that is not a whole record: zeros (the unwritten
tail of the newest file), a record that runs past the file, or a damaged record. A damaged or
torn record at the very end of the newest file is a crash mid-write, and RocketMQ's recovery
truncates it: the reader stops there silently. The same damage anywhere else — in a rolled
file, or followed by another valid record — is real corruption: ``CorruptRecordError`` with
the offset. ``valid_end`` (the "confirmed offset" of a store not open in this process) is the
end of the last whole record by the store's own rule (``store.recovery_scan.segment_end``, the
one "valid end of the CommitLog" recovery uses too); with ``verify_crc`` it also steps back over a
last record whose body CRC does not match (a record another process is still copying in).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Iterator

from ..errors import CorruptFileError, CorruptRecordError
from ..format.batch import (STOP_BLANK, STOP_CORRUPT, STOP_END, STOP_INCOMPLETE, DecodedRecords,
                            decode_records, scan_boundaries)
from ..format.hashing import crc32_masked
from ..format.layouts import name_to_offset
from ..format.record import (BODY_POS, BODYCRC_POS, BODYLENGTH_POS, MESSAGE_MAGIC_CODE,
                             MESSAGE_MAGIC_CODE_V2, PHYSICALOFFSET_POS, SYSFLAG_POS, host_shift,
                             store_timestamp_pos)
from ..store.recovery_scan import SegmentEnd, segment_end

try:  # InputPartition is a plain base class; keep this module importable without pyspark
    from pyspark.sql.datasource import InputPartition as _PartitionBase
except ImportError:  # pragma: no cover
    _PartitionBase = object  # type: ignore[misc,assignment]

DEFAULT_WINDOW_BYTES = 16 << 20
_HDR = struct.Struct(">ii")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")


@dataclass(frozen=True)
class Segment:
    path: str
    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class SegmentRange(_PartitionBase):
    """Absolute offsets ``[start, end)`` of one segment; ``tail``: the newest segment."""

    path: str
    base: int
    start: int
    end: int
    tail: bool = False

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def commitlog_dir(root: str, override: str | None = None) -> str:
    return override or os.path.join(root, "commitlog")


def list_segments(cl_dir: str) -> list[Segment]:
    """Segments in offset order; raises ``CorruptFileError`` for a gap or overlap."""
    if not os.path.isdir(cl_dir):
        raise FileNotFoundError(f"no CommitLog directory at {cl_dir}")
    segs = []
    for name in os.listdir(cl_dir):
        base = name_to_offset(name)
        if base is None:
            continue
        path = os.path.join(cl_dir, name)
        segs.append(Segment(path, base, os.path.getsize(path)))
    segs.sort(key=lambda s: s.base)
    for a, b in zip(segs, segs[1:]):
        if a.end != b.base:
            raise CorruptFileError(b.path, f"segment starts at {b.base} but the previous one "
                                           f"ends at {a.end} (missing or mis-sized file)")
    return segs


class MappedSegment:
    """A read-only mmap of one segment file (empty files map to ``b""``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh = open(path, "rb")
        size = os.fstat(self._fh.fileno()).st_size
        self.buf = mmap.mmap(self._fh.fileno(), size, access=mmap.ACCESS_READ) if size else b""

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            try:
                self.buf.close()
            except BufferError:  # numpy views still alive: the mmap closes when they go
                pass
        self._fh.close()

    def __enter__(self) -> "MappedSegment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _looks_like_record(buf, pos: int, base: int) -> bool:
    """A record header whose PHYSICALOFFSET equals its own position (a strong marker)."""
    if pos < 0 or pos + PHYSICALOFFSET_POS + 8 > len(buf):
        return False
    size, magic = _HDR.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or size <= 0:
        return False
    return _Q.unpack_from(buf, pos + PHYSICALOFFSET_POS)[0] == base + pos


def _check_stop(out: DecodedRecords, buf, rng: SegmentRange, rel_end: int) -> None:
    """Raise for damage that is not a torn tail (see module doc)."""
    pos = out.end
    if out.stop == STOP_CORRUPT or (out.stop == STOP_INCOMPLETE and pos < rel_end):
        size = _HDR.unpack_from(buf, pos)[0] if pos + 8 <= len(buf) else 0
        followed = size > 0 and _looks_like_record(buf, pos + size, rng.base)
        if followed or not rng.tail:
            raise CorruptRecordError(rng.base + pos, "record",
                                     f"{out.stop_reason or out.stop} in {rng.path}")
    elif out.stop == STOP_INCOMPLETE and not rng.tail and rng.end == rng.base + len(buf):
        raise CorruptRecordError(rng.base + pos, "TOTALSIZE", f"record runs past the end of {rng.path}")
    elif out.stop == STOP_END and not rng.tail and pos < rel_end and rng.end == rng.base + len(buf):
        # a rolled segment must end with a blank record, not zeros
        raise CorruptRecordError(rng.base + pos, "MAGICCODE",
                                 f"zeros before the end of rolled segment {rng.path}")


def read_range(rng: SegmentRange, *, check_crc: bool = False,
               window_bytes: int = DEFAULT_WINDOW_BYTES,
               delay_levels_ms=None) -> Iterator[tuple[object, DecodedRecords]]:
    """Decode the whole records of ``rng`` window by window: yields ``(buffer, DecodedRecords)``.

    Each decoder call sees at most ``window_bytes`` (grown to hold one record when a record is
    bigger), so the TOTALSIZE walk touches every record once. The buffer is only valid until
    the next item is requested.
    """
    with MappedSegment(rng.path) as seg:
        buf = seg.buf
        pos = rng.start - rng.base
        rel_end = min(rng.end - rng.base, len(buf))
        window = window_bytes
        while pos < rel_end:
            win_end = min(rel_end, pos + window)
            out = decode_records(buf, pos, win_end, base_offset=rng.base, check_crc=check_crc,
                                 delay_levels_ms=delay_levels_ms)
            if len(out):
                yield buf, out
            if win_end < rel_end and (out.stop == STOP_INCOMPLETE or
                                      (out.stop == STOP_END and out.end == win_end)):
                if out.end == pos:  # one record larger than the window: widen it to hold it
                    size = _HDR.unpack_from(buf, pos)[0] if pos + 8 <= len(buf) else 0
                    window = max(window * 2, size + 8)
                else:
                    window = window_bytes
                pos = out.end
                continue
            _check_stop(out, buf, rng, rel_end)
            return
        del buf


def first_store_timestamp(seg: Segment) -> int | None:
    """Store time of the first record of a segment (None if it holds none)."""
    with open(seg.path, "rb") as fh:
        head = fh.read(128)
    if len(head) < 64:
        return None
    size, magic = _HDR.unpack_from(head, 0)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return None
    sys_flag = _I.unpack_from(head, SYSFLAG_POS)[0]
    return _Q.unpack_from(head, store_timestamp_pos(sys_flag))[0]


def split_points(seg: Segment, split_size: int) -> list[int]:
    """Absolute record boundaries that cut ``seg`` into pieces of about ``split_size`` bytes."""
    with MappedSegment(seg.path) as m:
        positions, _, _ = scan_boundaries(m.buf, 0, len(m.buf))
    cuts, want = [], split_size
    for p in positions:
        if p >= want:
            cuts.append(seg.base + p)
            want = p + split_size
    return cuts


TAIL_RECHECK = 64  # records before the TOTALSIZE walk's end that the store's rule re-checks


def scan_segment_end(seg: Segment, start: int | None = None, *, verify_crc: bool = False) -> SegmentEnd:
    """Walk ``seg`` from ``start`` (a record boundary, default its base) to its valid end.

    The end is the store's own rule (``store.recovery_scan.segment_end``), applied from
    ``TAIL_RECHECK`` records before the end of a plain TOTALSIZE walk (which only skips ahead
    fast: a tail scan stays as cheap as a boundary walk). With ``verify_crc`` it also steps back
    over last records whose body CRC does not match (still being copied in)."""
    with MappedSegment(seg.path) as m:
        buf = m.buf
        rel = (start if start is not None else seg.base) - seg.base
        positions, walk_end, walk_kind = scan_boundaries(buf, rel, len(buf))
        recheck = positions[-TAIL_RECHECK] if len(positions) > TAIL_RECHECK else rel
        found = segment_end(buf, seg.base, len(buf), recheck, check_crc=False)
        stop = found.end - seg.base
        size = _HDR.unpack_from(buf, stop)[0] if found.stop == STOP_CORRUPT and stop + 8 <= len(buf) else 0
        if size > 0 and _looks_like_record(buf, stop + size, seg.base):
            # damage followed by data is corruption, not a torn tail: the end is where the
            # TOTALSIZE walk ends, so the reader meets the damage and raises (``_check_stop``)
            rolled = walk_kind == STOP_BLANK
            found = SegmentEnd(seg.base + (len(buf) if rolled else walk_end), walk_kind, found.reason,
                               rolled, [seg.base + p for p in positions])
        if verify_crc:
            last = found.last_records
            while last and not _crc_ok(buf, last[-1] - seg.base):
                found.end, found.stop, found.rolled = last.pop(), STOP_CORRUPT, False
        return found


def _crc_ok(buf, pos: int) -> bool:
    sys_flag = _I.unpack_from(buf, pos + SYSFLAG_POS)[0]
    tail = pos + sum(host_shift(sys_flag))
    body_len = _I.unpack_from(buf, tail + BODYLENGTH_POS)[0]
    body = buf[tail + BODY_POS: tail + BODY_POS + body_len]
    return crc32_masked(body) == _I.unpack_from(buf, pos + BODYCRC_POS)[0]


def record_at(seg: Segment, offset: int) -> bool:
    """True if ``offset`` is a record boundary of ``seg``: a record that names itself, a blank
    record, unwritten zeros right after data, or the segment's start/end."""
    if offset in (seg.base, seg.end):
        return True
    with MappedSegment(seg.path) as m:
        rel = offset - seg.base
        if _looks_like_record(m.buf, rel, seg.base):
            return True
        if rel + 8 <= len(m.buf):
            size, magic = _HDR.unpack_from(m.buf, rel)
            from ..format.message import BLANK_MAGIC_CODE
            return magic == BLANK_MAGIC_CODE or (size == 0 and magic == 0)
        return False


def _starts_empty(seg: Segment) -> bool:
    with open(seg.path, "rb") as fh:
        head = fh.read(8)
    return len(head) < 8 or head == bytes(8)


def tail_index(segs: list[Segment]) -> int:
    """Index of the newest segment holding data: later ones are pre-allocated, all zeros."""
    i = len(segs) - 1
    while i > 0 and _starts_empty(segs[i]):
        i -= 1
    return max(i, 0)


MIN_SPLIT = 32 << 20


def auto_split_size(segs: list[Segment], parallelism: int) -> int | None:
    """A split size giving each of ``parallelism`` workers about three ranges.

    Several ranges per worker keep every core busy when one task runs slow (a shared machine,
    a straggler). None (whole segments, no boundary walk) when the segments holding data are
    already that many; otherwise at least ``MIN_SPLIT`` bytes per range.
    """
    if not segs:
        return None
    want = 3 * max(1, parallelism)
    data = segs[:tail_index(segs) + 1]
    if len(data) >= want:
        return None
    return max(MIN_SPLIT, sum(s.size for s in data) // want)


def plan_ranges(segs: list[Segment], lo: int | None = None, hi: int | None = None,
                split_size: int | None = None) -> list[SegmentRange]:
    """Ranges covering ``[lo, hi)`` (whole segments unless split); see ``tail_index``."""
    out: list[SegmentRange] = []
    first_tail = tail_index(segs) if segs else 0
    for i, s in enumerate(segs):
        if hi is not None and s.base >= hi:
            break
        if lo is not None and s.end <= lo:
            continue
        tail = i >= first_tail
        cuts = [s.base]
        if split_size and s.size > split_size:
            cuts += split_points(s, split_size)
        bounds = cuts + [s.end]
        for a, b in zip(bounds, bounds[1:]):
            if lo is not None and b <= lo:
                continue
            if hi is not None and a >= hi:
                continue
            out.append(SegmentRange(s.path, s.base, a, b, tail))
    return out


def confirmed_offset(segs: list[Segment], cached: tuple[int, int] | None = None
                     ) -> tuple[int, tuple[int, int] | None]:
    """(End of the last whole CRC-checked record, scan position to resume from next time).

    ``cached`` is the second value of a previous call: the tail scan resumes there when it is
    still a record boundary of the same segment.
    """
    if not segs:
        return 0, None
    seg = segs[tail_index(segs)]
    start = None
    if cached and cached[0] == seg.base and cached[1] <= seg.end and record_at(seg, cached[1]):
        start = cached[1]
    end = scan_segment_end(seg, start, verify_crc=True)
    return end.end, (seg.base, end.end)
