"""Decoded CommitLog columns → ``pyarrow.RecordBatch`` with the contract's schema (CONTRACT §5).

Theory of operation. ``format.batch.decode_records`` already gives numpy columns for every
fixed-offset field and Python lists for topic and properties. This module only *shapes* them:

* fixed fields go to Arrow zero-copy-ish (``pa.array(ndarray)``); store/born times become
  Spark timestamps (µs, UTC) by one multiply;
* hosts and offset msgIds are built vectorised for IPv4 records: the 8 host bytes are gathered
  with numpy, hosts are formatted once per *distinct* host (``np.unique``) and taken back; the
  32-char msgId is a hex lookup table over the gathered 16 bytes, handed to Arrow as one
  buffer. IPv6 records fall back to the decoder's per-record helpers;
* bodies are gathered by one Arrow ``take`` over a zero-copy view of the buffer;
* tags/keys/uniq key are pulled from the raw properties strings (``extract_property``);
  only the ``properties`` map column parses every entry.

Only requested columns are built (the user's ``.schema(...)`` is the column-pruning API of
PySpark 4.3), rows can be pre-selected with an index array (pushed filters), and one decoded
chunk is cut into batches of at most ``max_batch_bytes`` so Arrow's 32-bit binary offsets never
overflow with 4 MiB bodies.
"""
from __future__ import annotations

from itertools import chain
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _native
from ..format.batch import DecodedRecords, extract_property
from ..format.message import (BORNHOST_V6_FLAG, KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS,
                              PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, STOREHOSTADDRESS_V6_FLAG,
                              SYSTEM_PROPERTY_NAMES, format_host, string_to_properties)

SCHEMA_DDL = (
    "topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, store_size INT, "
    "body_crc INT, flag INT, sys_flag INT, born_timestamp TIMESTAMP, born_host STRING, "
    "store_timestamp TIMESTAMP, store_host STRING, reconsume_times INT, "
    "prepared_transaction_offset BIGINT, tags STRING, tags_code BIGINT, keys ARRAY<STRING>, "
    "uniq_key STRING, properties MAP<STRING, STRING>, body BINARY, msg_id STRING, "
    "broker_name STRING, user_properties MAP<STRING, STRING>")

_TS = pa.timestamp("us", tz="UTC")
ARROW_TYPES: dict[str, pa.DataType] = {
    "topic": pa.string(), "queue_id": pa.int32(), "queue_offset": pa.int64(),
    "commitlog_offset": pa.int64(), "store_size": pa.int32(), "body_crc": pa.int32(),
    "flag": pa.int32(), "sys_flag": pa.int32(), "born_timestamp": _TS, "born_host": pa.string(),
    "store_timestamp": _TS, "store_host": pa.string(), "reconsume_times": pa.int32(),
    "prepared_transaction_offset": pa.int64(), "tags": pa.string(), "tags_code": pa.int64(),
    "keys": pa.list_(pa.field("element", pa.string())), "uniq_key": pa.string(),
    "properties": pa.map_(pa.string(), pa.string()), "body": pa.binary(), "msg_id": pa.string(),
    "broker_name": pa.string(), "user_properties": pa.map_(pa.string(), pa.string()),
}
# properties that are RocketMQ's (and the exactly-once sink's), not the producer's
_SYSTEM_PROPERTIES = SYSTEM_PROPERTY_NAMES | {"RS_SPARK_TXN"}
COLUMNS = list(ARROW_TYPES)
_NUMERIC = {"queue_id": "queue_id", "queue_offset": "queue_offset",
            "commitlog_offset": "commitlog_offset", "store_size": "size", "body_crc": "body_crc",
            "flag": "flag", "sys_flag": "sys_flag", "reconsume_times": "reconsume_times",
            "prepared_transaction_offset": "prepared_transaction_offset", "tags_code": "tags_code"}
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    unknown = [c for c in columns if c not in ARROW_TYPES]
    if unknown:
        raise ValueError(f"unknown rocketmq column(s) {unknown}; known: {', '.join(COLUMNS)}")
    return pa.schema([pa.field(c, ARROW_TYPES[c]) for c in columns])


def _gather_bytes(arr: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    return arr[pos[:, None] + np.arange(width, dtype=np.int64)]


def _host_column(arr: np.ndarray, buf, pos: np.ndarray, v6: np.ndarray) -> pa.Array:
    """``ip:port`` strings; ``pos`` points at the address, ``v6`` marks 16-byte addresses."""
    n = len(pos)
    if n == 0:
        return pa.array([], pa.string())
    if not v6.any():
        raw = _gather_bytes(arr, pos, 8)
        keys = raw.view(">u8").ravel()
        uniq, inverse = np.unique(keys, return_inverse=True)
        texts = [format_host(int(k >> 32).to_bytes(4, "big"), int(np.int32(np.uint32(k & 0xFFFFFFFF))))
                 for k in uniq.tolist()]
        return pa.array(texts, pa.string()).take(pa.array(inverse.ravel().astype(np.int32)))
    mv = memoryview(buf)
    cache: dict[bytes, str] = {}
    out = []
    for p, is6 in zip(pos.tolist(), v6.tolist()):
        alen = 16 if is6 else 4
        raw_b = bytes(mv[p:p + alen + 4])
        s = cache.get(raw_b)
        if s is None:
            s = cache[raw_b] = format_host(raw_b[:alen], int.from_bytes(raw_b[alen:], "big", signed=True))
        out.append(s)
    return pa.array(out, pa.string())


def _msg_id_column(arr: np.ndarray, buf, store_pos: np.ndarray, v6: np.ndarray,
                   offsets: np.ndarray) -> pa.Array:
    n = len(store_pos)
    if n and not v6.any():
        raw = np.empty((n, 16), dtype=np.uint8)
        raw[:, :8] = _gather_bytes(arr, store_pos, 8)
        raw[:, 8:] = offsets.astype(">i8").view(np.uint8).reshape(n, 8)
        text = _HEX[raw].reshape(n, 32)
        offs = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offs), pa.py_buffer(text.tobytes()))
    mv = memoryview(buf)
    out = []
    for p, is6, off in zip(store_pos.tolist(), v6.tolist(), offsets.tolist()):
        alen = 16 if is6 else 4
        out.append((bytes(mv[p:p + alen + 4]) + off.to_bytes(8, "big", signed=True)).hex().upper())
    return pa.array(out, pa.string())


def _body_column(buf, body_pos: np.ndarray, body_len: np.ndarray) -> pa.Array:
    """Bodies gathered by Arrow in C++: the buffer is seen (zero-copy) as alternating
    body / gap values — offsets ``[p0, e0, p1, e1, …]`` are monotone because records are in
    order — and ``take`` keeps every other value."""
    n = len(body_pos)
    if n == 0:
        return pa.array([], pa.binary())
    offs = np.empty(2 * n, dtype=np.int64)
    offs[0::2] = body_pos
    offs[1::2] = body_pos + body_len
    inter = pa.Array.from_buffers(pa.large_binary(), 2 * n - 1,
                                  [None, pa.py_buffer(offs), pa.py_buffer(buf)])
    out = inter.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64))).cast(pa.binary())
    del inter
    return out


def _keys_column(raw_keys: list[str | None]) -> pa.Array:
    """KEYS split on spaces (empty pieces dropped, as ``MessageExt.keys``), as list<string>."""
    flat: list[str] = []
    counts = np.zeros(len(raw_keys), dtype=np.int32)
    for i, k in enumerate(raw_keys):
        if k:
            parts = k.split(KEY_SEPARATOR)
            if "" in parts:
                parts = [p for p in parts if p]
            flat.extend(parts)
            counts[i] = len(parts)
    offs = np.zeros(len(raw_keys) + 1, dtype=np.int32)
    np.cumsum(counts, out=offs[1:])
    return pa.ListArray.from_arrays(pa.array(offs), pa.array(flat, pa.string()),
                                    type=ARROW_TYPES["keys"])


def _parse_properties_py(raw: list[str]) -> tuple[pa.Array, pa.Array, np.ndarray, bool]:
    """Every kept entry of every record: (names, values, row of each entry, no repeated name).

    Entries split on ``\x02``, name and value on the first ``\x01``, entries with an empty name
    or value dropped; ``exact`` is false when a record names one property twice."""
    items = pc.split_pattern(pa.array(raw, pa.string()), "\x02")
    parent = pc.list_parent_indices(items)
    kv = pc.split_pattern(pc.list_flatten(items), "\x01", max_splits=1)
    two = pc.equal(pc.list_value_length(kv), 2)
    kv, parent = kv.filter(two), parent.filter(two)
    pairs = pc.list_flatten(kv)
    m = len(kv)
    keys = pairs.take(pa.array(np.arange(0, 2 * m, 2)))
    vals = pairs.take(pa.array(np.arange(1, 2 * m, 2)))
    ok = pc.and_(pc.greater(pc.binary_length(keys), 0), pc.greater(pc.binary_length(vals), 0))
    keys, vals = keys.filter(ok), vals.filter(ok)
    rows = np.asarray(parent.filter(ok), dtype=np.int64)
    exact = True
    if len(keys):
        distinct = pa.table({"p": rows, "k": keys}).group_by(["p", "k"]).aggregate([])
        exact = distinct.num_rows == len(keys)
    return keys, vals, rows, exact


_parse_properties = _parse_properties_py  # the compiled twin below, when built
_speedups = _native.load("rocketstore.spark._speedups")
if _speedups is not None:
    _parse_properties = _speedups._parse_properties


class PropertyColumns:
    """All properties of a batch parsed at once with Arrow compute kernels.

    Same answers as ``string_to_properties`` per record: entries split on ``\x02``, name and
    value on the first ``\x01``, entries with an empty name or value dropped. A record with a
    repeated name (``exact`` false) is left to the Python parser, whose dict keeps the last value.
    """

    def __init__(self, raw: list[str]) -> None:
        self.n = len(raw)
        self.keys, self.vals, self.parent, self.exact = _parse_properties(raw)

    def get(self, name: str) -> pa.Array:
        """The value of ``name`` per record (null where absent)."""
        sel = np.flatnonzero(np.asarray(pc.equal(self.keys, name)))
        idx = np.full(self.n, -1, dtype=np.int64)
        idx[self.parent[sel]] = sel
        return self.vals.take(pa.array(idx, mask=idx < 0))

    def map_column(self) -> pa.Array:
        offs = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(np.bincount(self.parent, minlength=self.n), out=offs[1:])
        return pa.MapArray.from_arrays(pa.array(offs), self.keys, self.vals)

    def keys_column(self) -> pa.Array:
        split = pc.split_pattern(self.get(PROPERTY_KEYS), KEY_SEPARATOR)
        parent = np.asarray(pc.list_parent_indices(split), dtype=np.int64)
        pieces = pc.list_flatten(split)
        keep = pc.greater(pc.binary_length(pieces), 0)
        parent = parent[np.asarray(keep)]
        offs = np.zeros(self.n + 1, dtype=np.int32)
        np.cumsum(np.bincount(parent, minlength=self.n), out=offs[1:])
        return pa.ListArray.from_arrays(pa.array(offs), pieces.filter(keep), type=ARROW_TYPES["keys"])


def _props_column(props: list[dict[str, str]]) -> pa.Array:
    offs = np.zeros(len(props) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in props], out=offs[1:])
    keys = pa.array(list(chain.from_iterable(props)), pa.string())
    vals = pa.array(list(chain.from_iterable(d.values() for d in props)), pa.string())
    return pa.MapArray.from_arrays(pa.array(offs), keys, vals)


def _build(rec: DecodedRecords, buf, idx: np.ndarray, columns: Sequence[str],
           schema: pa.Schema, broker_name: str | None = None) -> pa.RecordBatch:
    arr = np.frombuffer(buf, dtype=np.uint8)
    need_raw = any(c in ("tags", "keys", "uniq_key", "properties", "user_properties")
                   for c in columns)
    il = idx.tolist() if (need_raw or "topic" in columns) else None
    raw = [rec.props_raw[i] for i in il] if need_raw else None
    props = PropertyColumns(raw) if need_raw else None
    if props is not None and not props.exact:
        props = None  # a repeated property name: the Python parser decides which value wins
    pos = rec.pos[idx]
    sys_flag = rec.sys_flag[idx]
    born6 = (sys_flag & BORNHOST_V6_FLAG) != 0
    store6 = (sys_flag & STOREHOSTADDRESS_V6_FLAG) != 0
    store_host_pos = pos + 48 + np.where(born6, 20, 8) + 8
    cols = []
    for c in columns:
        if c in _NUMERIC:
            a = pa.array(getattr(rec, _NUMERIC[c])[idx], ARROW_TYPES[c])
        elif c == "topic":
            a = pa.array([rec.topic[i] for i in il], pa.string())
        elif c in ("born_timestamp", "store_timestamp"):
            a = pa.array(getattr(rec, c)[idx] * 1000, pa.int64()).cast(_TS)
        elif c == "born_host":
            a = _host_column(arr, buf, pos + 48, born6)
        elif c == "store_host":
            a = _host_column(arr, buf, store_host_pos, store6)
        elif c == "msg_id":
            a = _msg_id_column(arr, buf, store_host_pos, store6, rec.commitlog_offset[idx])
        elif c == "body":
            a = _body_column(buf, rec.body_pos[idx], rec.body_len[idx])
        elif c in ("tags", "uniq_key"):
            name = PROPERTY_TAGS if c == "tags" else PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
            a = props.get(name) if props else pa.array(extract_property(raw, name), pa.string())
        elif c == "keys":
            a = props.keys_column() if props else _keys_column(extract_property(raw, PROPERTY_KEYS))
        elif c == "properties":
            a = props.map_column() if props else _props_column([string_to_properties(r) for r in raw])
        elif c == "user_properties":
            a = _props_column([{k: v for k, v in string_to_properties(r).items()
                                if k not in _SYSTEM_PROPERTIES} for r in raw])
        elif c == "broker_name":  # the broker a row was pulled from (None: read from files)
            a = pa.array([broker_name] * len(idx), pa.string())
        else:
            raise ValueError(f"unknown column {c!r}")
        cols.append(a)
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def to_batches(rec: DecodedRecords, buf, columns: Sequence[str], schema: pa.Schema | None = None,
               mask: np.ndarray | None = None,
               max_batch_bytes: int = 64 << 20,
               broker_name: str | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the selected rows (``mask``) of one decoded chunk."""
    schema = schema or arrow_schema(columns)
    idx = np.nonzero(mask)[0] if mask is not None else np.arange(len(rec))
    if len(idx) == 0:
        return
    csum = np.cumsum(rec.size[idx].astype(np.int64))
    start = 0
    while start < len(idx):
        base = csum[start - 1] if start else 0
        stop = int(np.searchsorted(csum, base + max_batch_bytes, side="right"))
        stop = max(stop, start + 1)
        yield _build(rec, buf, idx[start:stop], columns, schema, broker_name)
        start = stop
