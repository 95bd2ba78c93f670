"""Damage, described and looked past: pure functions over CommitLog bytes.

``root_cause(buf, pos, base)`` says what is wrong with the record at ``pos`` — the field, what
the record's other fields say it should be, what is stored — and where the next intact record
starts. ``find_records(data, base)`` walks bytes that hold damage: at each candidate position
(four bytes before an occurrence of a message magic code) it decodes a record with the record
rule of ``format.record`` and its body CRC; one that passes is taken and the walk jumps past
it, anything else moves the search on by one byte. Non-zero bytes no record covers are the
*unsaved* ranges. ``verify`` and recovery use the first, ``salvage`` the second.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from ..errors import CorruptRecordError
from ..format import record as R
from ..format.message import BLANK, MessageExt, decode_message
from ..format.record import MESSAGE_MAGICS

_MAGIC_BYTES = [struct.pack(">i", m) for m in MESSAGE_MAGICS]
_BLANK_BYTES = struct.pack(">i", R.BLANK_MAGIC_CODE)


@dataclass
class PieceScan:
    records: list[MessageExt] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)  # CommitLog offset each record was at
    unsaved: list[tuple[int, int]] = field(default_factory=list)  # (CommitLog offset, bytes)


def find_records(data: bytes, base_offset: int, limit: int | None = None) -> PieceScan:
    """Every intact record in ``data`` (CommitLog bytes from ``base_offset``); with ``limit``,
    stop after that many (then ``unsaved`` covers only what was walked)."""
    out = PieceScan()
    covered_to = 0  # data[:covered_to] is accounted for (a record or reported)
    pos = 0
    n = len(data)
    while pos < n:
        cand = min((i for i in (data.find(mb, pos + 4) for mb in _MAGIC_BYTES) if i >= 0),
                   default=-1)
        if cand < 0:
            break
        start = cand - 4
        try:
            rec = decode_message(data, start, check_crc=True)
        except CorruptRecordError:
            pos = start + 1
            continue
        if rec is BLANK or not isinstance(rec, MessageExt):
            pos = start + 1
            continue
        _note_gap(data, covered_to, start, base_offset, out)
        out.records.append(rec)
        out.positions.append(base_offset + start)
        pos = covered_to = start + rec.store_size
        if limit is not None and len(out.records) >= limit:
            return out
    tail = n
    blank = data.rfind(_BLANK_BYTES, covered_to)
    if blank - 4 >= covered_to and blank + 4 == n:  # a segment's end-of-file blank record
        tail = blank - 4
    _note_gap(data, covered_to, tail, base_offset, out)
    return out


def _note_gap(data: bytes, lo: int, hi: int, base: int, out: PieceScan) -> None:
    gap = data[lo:hi]
    if gap.strip(b"\0"):
        first = lo + (len(gap) - len(gap.lstrip(b"\0")))
        last = lo + len(gap.rstrip(b"\0"))
        out.unsaved.append((base + first, last - first))


_REASON_PATTERNS = [  # (regex over the decoder's reason, expected, found) — group names
    (re.compile(r"stored (?P<found>-?\d+), fields add up to (?P<expected>-?\d+)"), None, None),
    (re.compile(r"stored (?P<found>-?\d+), computed (?P<expected>-?\d+)"), None, None),
    (re.compile(r"unknown magic (?P<found>\S+)"), "0xdaa320a7 or 0xdaa320ab", None),
    (re.compile(r"size (?P<found>-?\d+) below the minimum (?P<expected>\d+)"), None, None),
    (re.compile(r"size (?P<found>-?\d+) with (?P<avail>\d+) bytes available"), None, None),
]


def root_cause(buf: bytes, pos: int, base_offset: int) -> dict:
    """What is wrong with the record at ``buf[pos:]``: offset, field, expected, found, reason,
    and where the next intact record starts (None: none in ``buf``)."""
    field_name, reason = "record", "cut short"
    try:
        decode_message(buf, pos, check_crc=True)
    except CorruptRecordError as exc:
        field_name, reason = exc.field, exc.reason
    expected = found = None
    for rx, exp, fnd in _REASON_PATTERNS:
        m = rx.search(reason)
        if m:
            g = m.groupdict()
            found = fnd or g.get("found")
            expected = exp or g.get("expected") or (f"<= {g['avail']}" if "avail" in g else None)
            break
    if found is None:
        found = reason
    if field_name == "TOTALSIZE":  # what the record's own length fields add up to
        want = _size_from_fields(buf, pos)
        if want is not None:
            expected = str(want)
    nxt = find_records(bytes(buf[pos + 1:]), base_offset + pos + 1, limit=1).positions
    return {"offset": base_offset + pos, "field": field_name,
            "expected": expected or "a valid value", "found": found, "reason": reason,
            "next_intact": nxt[0] if nxt else None}


def _size_from_fields(buf, pos: int) -> int | None:
    """The record size its BODYLENGTH, TOPICLENGTH and PROPERTIESLENGTH imply (None when they
    do not fit the bytes at hand)."""
    try:
        magic = int.from_bytes(buf[pos + 4:pos + 8], "big", signed=True)
        version = R.version_of(magic) or 1
        sys_flag = int.from_bytes(buf[pos + R.SYSFLAG_POS:pos + R.SYSFLAG_POS + 4], "big",
                                  signed=True)
        born, store = R.host_shift(sys_flag)
        bl_pos = pos + R.BODYLENGTH_POS + born + store
        body_len = max(int.from_bytes(buf[bl_pos:bl_pos + 4], "big", signed=True), 0)
        tl_pos = bl_pos + 4 + body_len
        tl_size = 1 if version == 1 else 2
        topic_len = int.from_bytes(buf[tl_pos:tl_pos + tl_size], "big", signed=version == 1)
        pl_pos = tl_pos + tl_size + topic_len
        if topic_len < 0 or pl_pos + 2 > len(buf):
            return None
        props_len = int.from_bytes(buf[pl_pos:pl_pos + 2], "big", signed=True)
        return R.record_length(body_len, topic_len, props_len, sys_flag, version)
    except (ValueError, IndexError):
        return None


