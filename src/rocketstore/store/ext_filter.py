"""The read path's side of ConsumeQueue-ext units and SQL92 filters, on whole batches of units.

``resolve_units`` turns a batch of ConsumeQueue tags slots into what the filters need, with numpy
over the ext files: the real tagsCode (an ext address is looked up in the queue's ext stream;
one that cannot be read gives ``None``, which a tag filter lets through as RocketMQ does) and, for
a SQL92 pull, whether each unit's bitmap lets the message through. ``prefilter_records``
evaluates the SQL92 expression on the properties of every remaining record at once: each
record's fields are read through strided views of its CommitLog segment and checked with the
record rule, the properties gathered into a ``filter.propblob.PropertyBlob`` and the expression
evaluated over it in numpy (``filter.columns.evaluate_blob``), so the per-unit loop only reads
the records that match (and, one by one, any the batch could not read in place).

A ``message_filter`` has ``matches_units(store_ts, has_bitmap, bitmaps)`` (a boolean array),
``matches_properties(props)`` and ``expression`` (the broker's ``ExpressionMessageFilter``).
"""
from __future__ import annotations

import numpy as np

from ..errors import CorruptRecordError
from ..filter import propblob
from ..filter.columns import evaluate_blob
from ..format.cq_ext import MAX_ADDR, MIN_EXT_UNIT_SIZE
from ..format.message import BLANK, decode_message
from ..format.record import (BODY_POS, BODYLENGTH_POS, BORNHOST_V6_FLAG, MAGIC_POS, MAX_TOPIC_LENGTH,
                             MAX_TOPIC_LENGTH_V2, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
                             MIN_RECORD_SIZE, STOREHOSTADDRESS_V6_FLAG, SYSFLAG_POS)

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
    """One record checked on its own properties; a record the record rule refuses raises
    ``CorruptRecordError`` (the pull skips it as unreadable)."""
    msg = decode_message(raw, 0, with_body=False)
    if msg is BLANK:
        raise CorruptRecordError(0, "MAGICCODE", "a blank record where a message should be")
    return message_filter.matches_properties(msg.properties)


def prefilter_records(commitlog, offs: np.ndarray, sizes: np.ndarray, unit_ok, message_filter) -> list:
    """``unit_ok`` (None: every unit) narrowed by the expression: True where the record's
    properties match, False where they do not or the bitmap ruled the unit out, None where the
    record could not be read in place (the per-unit loop reads and checks it, and reports it as
    RocketMQ does)."""
    expr = getattr(message_filter, "expression", None)
    if unit_ok is None:
        state = np.full(len(offs), _UNKNOWN, dtype=np.int8)
        cand = None
    else:
        ok = np.asarray(unit_ok, dtype=bool)
        state = np.where(ok, _UNKNOWN, _NO).astype(np.int8)
        cand = np.flatnonzero(ok)
    if expr is None or (cand is not None and not len(cand)):  # (e.g. a retry topic's filter
        return _as_objects(state)                             # checks each record itself)
    offs_a = (offs if cand is None else offs[cand]).astype(np.int64)
    sizes_a = (sizes if cand is None else sizes[cand]).astype(np.int64)
    where = np.arange(len(offs), dtype=np.int64) if cand is None else cand
    fsize = commitlog.file_size
    while len(offs_a):  # segment by segment (a batch of units rarely spans two)
        s = int(offs_a[0]) - int(offs_a[0]) % fsize
        pos = offs_a - s
        mine = (pos >= 0) & (pos < fsize)
        mf = commitlog.segment_at(s)
        if mf is not None:
            arr = np.frombuffer(mf.mm, dtype=np.uint8)
            starts, lens, good = _property_spans(arr, pos, sizes_a, mf.wrote_position)
            good &= mine
            if cand is None and len(pos) == len(offs) and good.all():  # the usual case
                return _evaluate(expr, arr, starts, lens).tolist()
            m = np.flatnonzero(good)
            state[where[m]] = _evaluate(expr, arr, starts[m], lens[m])
        if mine.all():
            break
        rest = np.flatnonzero(~mine)
        offs_a, sizes_a, where = offs_a[rest], sizes_a[rest], where[rest]
    return _as_objects(state)


def _evaluate(expr, arr: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Does ``expr`` match each record whose properties are ``arr[starts[i]:][:lens[i]]``?"""
    groups = _by_width(lens)
    if len(groups) == 1:
        return evaluate_blob(expr, propblob.gather(arr, starts, lens))
    out = np.zeros(len(lens), dtype=bool)
    for sel in groups:
        out[sel] = evaluate_blob(expr, propblob.gather(arr, starts[sel], lens[sel]))
    return out


def _by_width(lens: np.ndarray) -> list:
    """One group, unless a few long properties would make every row as wide as theirs."""
    if not len(lens):
        return []
    if int(lens.max()) * len(lens) <= 2 * int(lens.sum()) + 64 * len(lens):
        return [slice(None)]
    cut = 2 * int(np.median(lens)) + 64
    return [np.flatnonzero(lens <= cut), np.flatnonzero(lens > cut)]


_NO, _YES, _UNKNOWN = 0, 1, 2  # (a match stored as a bool is _NO or _YES)
_OBJECTS = np.array([False, True, None], dtype=object)


def _as_objects(state: np.ndarray) -> list:
    return _OBJECTS[state].tolist()


def _property_spans(arr: np.ndarray, pos: np.ndarray, size: np.ndarray, wrote: int):
    """(start, length, good) of each record's properties bytes. ``good`` holds where the record
    passes the record rule's length checks (``format.record.length_problem``, as the decoder
    applies it): stored TOTALSIZE equal to the unit's size, a message magic, the whole record
    below ``wrote``, topic length in range, and the fields adding up to the size exactly. The
    rest are left to the per-unit loop, which decodes them one by one and reports them as the
    rule says. Each field is one gather from a view of the segment whose element ``i`` is the
    big-endian integer at byte ``i``."""
    u4 = np.ndarray(shape=(len(arr) - 3,), dtype=">u4", buffer=arr, strides=(1,))
    u2 = np.ndarray(shape=(len(arr) - 1,), dtype=">u2", buffer=arr, strides=(1,))
    end = pos + size
    good = (pos >= 0) & (size >= MIN_RECORD_SIZE) & (end <= wrote)
    p = pos if good.all() else np.where(good, pos, 0)  # (a bad row reads harmless bytes at 0)
    good &= u4[p] == size
    magic = u4[p + MAGIC_POS]
    v2 = magic == (MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF)
    good &= v2 | (magic == (MESSAGE_MAGIC_CODE & 0xFFFFFFFF))
    sys_flag = u4[p + SYSFLAG_POS]
    if (sys_flag & _V6).any():  # a v6 host address makes its field 12 bytes longer
        p = p + np.where(sys_flag & BORNHOST_V6_FLAG, 12, 0) + np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, 12, 0)
        good &= p + MIN_RECORD_SIZE <= end
        p[~good] = 0
    body_len = u4[p + BODYLENGTH_POS].astype(np.int64)
    body_len[body_len >= 1 << 31] = 0  # Java reads a negative length as no body
    last = len(arr) - 2
    tl_pos = np.minimum(p + BODY_POS + body_len, last)
    if v2.any():
        topic_len = np.where(v2, u2[tl_pos], arr[tl_pos])
        good &= topic_len <= np.where(v2, MAX_TOPIC_LENGTH_V2, MAX_TOPIC_LENGTH)
        pl_pos = tl_pos + np.where(v2, 2, 1) + topic_len
    else:
        topic_len = arr[tl_pos]
        good &= topic_len <= MAX_TOPIC_LENGTH
        pl_pos = tl_pos + 1 + topic_len
    props_len = u2[np.minimum(pl_pos, last)].astype(np.int64)
    good &= (pl_pos + 2 + props_len == end) & (props_len <= 0x7FFF)
    return pl_pos + 2, props_len, good


_V6 = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
