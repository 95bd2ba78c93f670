"""The read path's side of ConsumeQueue-ext units and SQL92 filters, on whole batches of units.

``resolve_units`` turns a batch of ConsumeQueue tags slots into what the filters need, with numpy
over the ext files: the real tagsCode (an ext address is looked up in the queue's ext stream;
one that cannot be read gives ``None``, which a tag filter lets through as RocketMQ does) and, for
a SQL92 pull, whether each unit's bitmap lets the message through. ``prefilter_records``
evaluates the SQL92 expression on the properties of every remaining record at once (their
property strings gathered from the CommitLog segments in one numpy pass, the expression
evaluated column by column), so the per-unit loop only reads the records that match.

A ``message_filter`` has ``matches_units(store_ts, has_bitmap, bitmaps)`` (a boolean array),
``matches_properties(props)`` and ``expression`` (the broker's ``ExpressionMessageFilter``).
"""
from __future__ import annotations

import re

import numpy as np

from ..filter.columns import evaluate_matches
from ..format.batch import extract_property
from ..format.cq_ext import MAX_ADDR, MIN_EXT_UNIT_SIZE
from ..format.message import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE_V2, STOREHOSTADDRESS_V6_FLAG, record_properties

_REAL_MASK = np.int64(0x7FFFFFFFFFFFFFFF)  # address - Long.MIN_VALUE, for addresses


def _gather(arr: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    idx = pos[:, None] + np.arange(width, dtype=np.int64)
    return arr[idx].view(dtype).ravel()


def resolve_units(tags_slots: np.ndarray, ext, message_filter) -> tuple[list, list | None]:
    tags = tags_slots.astype(np.int64)
    n = len(tags)
    is_addr = tags <= MAX_ADDR
    known = ~is_addr
    resolved = tags.copy()
    store_ts = np.zeros(n, dtype=np.int64)
    has_unit = np.zeros(n, dtype=bool)
    nbits = np.zeros(n, dtype=np.int64)
    bitmaps = None
    if is_addr.any() and ext is not None:
        want = getattr(message_filter, "bitmap_bytes", 0) if message_filter is not None else 0
        idx = np.flatnonzero(is_addr)
        real = tags[idx] & _REAL_MASK
        fsize = ext.file_size
        file_from = real - real % fsize
        if want:
            bitmaps = np.zeros((n, want), dtype=np.uint8)
        for ff in np.unique(file_from).tolist():
            mf = ext.queue.find(ff, ff == 0)
            if mf is None:
                continue
            sel = idx[file_from == ff]
            pos = real[file_from == ff] - ff
            ok = pos + MIN_EXT_UNIT_SIZE <= mf.wrote_position
            sel, pos = sel[ok], pos[ok]
            if not len(sel):
                continue
            arr = np.frombuffer(mf.mm, dtype=np.uint8)
            size = _gather(arr, pos, 2, ">i2").astype(np.int64)
            good = size > 0
            sel, pos = sel[good], pos[good]
            resolved[sel] = _gather(arr, pos + 2, 8, ">i8")
            store_ts[sel] = _gather(arr, pos + 10, 8, ">i8")
            nb = _gather(arr, pos + 18, 2, ">i2").astype(np.int64)
            nbits[sel] = nb
            has_unit[sel] = True
            known[sel] = True
            if want:
                full = (nb == want) & (pos + MIN_EXT_UNIT_SIZE + want <= mf.wrote_position)
                if full.any():
                    bitmaps[sel[full]] = arr[(pos[full] + MIN_EXT_UNIT_SIZE)[:, None]
                                             + np.arange(want, dtype=np.int64)]
    out_tags = resolved.tolist()
    if not known.all():
        for k in np.flatnonzero(~known).tolist():
            out_tags[k] = None
    if message_filter is None:
        return out_tags, None
    has_bitmap = has_unit & (nbits > 0)
    ok = message_filter.matches_units(store_ts, has_bitmap, bitmaps)
    return out_tags, ok.tolist()


def record_matches(message_filter, raw) -> bool:
    return message_filter.matches_properties(record_properties(raw))


def prefilter_records(commitlog, offs: list[int], sizes: list[int], unit_ok: list,
                      message_filter) -> list:
    """``unit_ok`` narrowed by the expression: True where the record's properties match, False
    where they do not or the bitmap ruled the unit out, None where the record could not be read
    in place (the per-unit loop reads and checks it, and reports it as RocketMQ does)."""
    expr = getattr(message_filter, "expression", None)
    out = [None if ok else False for ok in unit_ok]
    if expr is None:  # the filter checks each record itself (e.g. retry topics)
        return out
    cand = [i for i, ok in enumerate(unit_ok) if ok]
    if not cand:
        return out
    offs_a = np.asarray([offs[i] for i in cand], dtype=np.int64)
    sizes_a = np.asarray([sizes[i] for i in cand], dtype=np.int64)
    fsize = commitlog.file_size
    seg = offs_a - offs_a % fsize
    names = sorted(expr.properties())
    for s in np.unique(seg).tolist():
        mf = commitlog.segment_at(s)
        if mf is None:
            continue
        m = np.flatnonzero(seg == s)
        pos = offs_a[m] - s
        inside = pos + sizes_a[m] <= mf.wrote_position
        m, pos = m[inside], pos[inside]
        if not len(m):
            continue
        arr = np.frombuffer(mf.mm, dtype=np.uint8)
        cols = _property_columns(arr, pos, sizes_a[m], names)
        if cols is None:
            continue
        matched = evaluate_matches(expr, cols, len(m))
        for k, hit in zip(m.tolist(), matched):
            out[cand[k]] = hit
    return out


def _property_columns(arr: np.ndarray, pos: np.ndarray, size: np.ndarray,
                      names: list[str]) -> dict[str, list] | None:
    """Values of the named properties for each record at ``pos`` (None where absent), the same
    as ``string_to_properties(props).get(name)``; None if a record looks damaged."""
    spans = _property_spans(arr, pos, size)
    if spans is None:
        return None
    starts, lens = spans
    mm = arr.data
    blob = b"\x02".join([mm[a:a + b] for a, b in zip(starts.tolist(), lens.tolist())])
    if not blob.isascii():  # character and byte positions differ: record by record
        text = [bytes(mm[a:a + b]).decode("utf-8", "replace") for a, b in zip(starts.tolist(), lens.tolist())]
        return {name: extract_property(text, name) for name in names}
    n = len(starts)
    rec_start = np.concatenate(([0], np.cumsum(lens[:-1] + 1))) if n else np.zeros(0, np.int64)
    text = blob.decode("ascii")
    b = np.frombuffer(blob, dtype=np.uint8)
    seps = np.flatnonzero(b == 2)
    out: dict[str, list] = {}
    for name in names:
        needle = name.encode("ascii", "replace")
        if not name.isascii() or b"\x01" in needle or b"\x02" in needle:
            out[name] = _column_by_regex(text, rec_start, name, n)
            continue
        out[name] = _column_by_bytes(b, text, seps, rec_start, needle + b"\x01", n)
    return out


def _column_by_bytes(b: np.ndarray, text: str, seps: np.ndarray, rec_start: np.ndarray,
                     needle: bytes, n: int) -> list:
    """One property's values, found with numpy: every ``name\x01`` at the blob's start or right
    after a ``\x02``, its value up to the next ``\x02``; per record the last non-empty one."""
    width = len(needle)
    at = np.flatnonzero(b[:max(0, len(b) - width + 1)] == needle[0])
    for k in range(1, width):
        at = at[b[at + k] == needle[k]]
    at = at[(at == 0) | (b[np.maximum(at - 1, 0)] == 2)]
    value_at = at + width
    bounded = np.append(seps, len(b))  # a value runs to the next separator or the blob's end
    value_end = bounded[np.searchsorted(seps, value_at)]
    nonempty = value_end > value_at
    at, value_at, value_end = at[nonempty], value_at[nonempty], value_end[nonempty]
    col = np.full(n, None, dtype=object)
    if len(at):
        owner = np.searchsorted(rec_start, at, "right") - 1
        last = np.append(owner[1:] != owner[:-1], True)
        col[owner[last]] = [text[a:e] for a, e in zip(value_at[last].tolist(),
                                                      value_end[last].tolist())]
    return col.tolist()


def _column_by_regex(text: str, rec_start: np.ndarray, name: str, n: int) -> list:
    col: list = [None] * n
    found = [(mt.start(), mt.group(1)) for mt in _name_pattern(name).finditer(text)]
    if found:
        at = np.fromiter((f[0] for f in found), dtype=np.int64, count=len(found))
        owner = (np.searchsorted(rec_start, at, "right") - 1).tolist()
        for i, (_, v) in zip(owner, found):  # the last non-empty entry wins
            if v:
                col[i] = v
    return col


_PATTERNS: dict[str, "re.Pattern[str]"] = {}


def _name_pattern(name: str):
    p = _PATTERNS.get(name)
    if p is None:
        p = _PATTERNS[name] = re.compile("(?:^|(?<=\x02))" + re.escape(name) + "\x01([^\x02]*)")
    return p


def _property_spans(arr: np.ndarray, pos: np.ndarray, size: np.ndarray):
    """(start, length) of each record's properties bytes (None if one looks damaged)."""
    sys_flag = _gather(arr, pos + 36, 4, ">i4").astype(np.int64)
    magic = _gather(arr, pos + 4, 4, ">i4").astype(np.int64)
    d = np.where(sys_flag & BORNHOST_V6_FLAG, 12, 0) + np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, 12, 0)
    body_len = _gather(arr, pos + d + 84, 4, ">i4").astype(np.int64)
    tl_pos = pos + d + 88 + np.clip(body_len, 0, None)
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    end = pos + size
    if not ((body_len >= 0) & (tl_pos + 2 <= end)).all():
        return None
    topic_len = np.where(v2, _gather(arr, tl_pos, 2, ">i2").astype(np.int64), arr[tl_pos].astype(np.int64))
    pl_pos = tl_pos + np.where(v2, 2, 1) + topic_len
    if not (pl_pos + 2 <= end).all():
        return None
    props_len = _gather(arr, pl_pos, 2, ">i2").astype(np.int64)
    if not ((props_len >= 0) & (pl_pos + 2 + props_len <= end)).all():
        return None
    return pl_pos + 2, props_len
