"""The vectorised batch decoder: a byte range of committed records → columns.

One decoder, three users: the in-process reput, the Spark reader and ``rebuild``.

Theory of operation. Record boundaries can only be found by walking the 4-byte TOTALSIZE
fields (a tight loop that touches 8 bytes per record). Every fixed-offset field is then gathered
for all records at once with numpy fancy indexing; the two IPv6 flags only shift later fields by
12 bytes each, so their positions are computed as arrays too. Only the variable-length topic and
properties strings are decoded per record (topics through a small cache). The walk stops at the
first blank record (end of segment), at bytes that are not a record (end of data, or damage), or
at a record that does not fit in the range (not yet fully written). What counts as a record is
``format.record``'s rule (RocketMQ's ``checkMessageAndReturnSize``), vectorised here.
"""
from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .. import _native
from .hashing import java_hash
from . import record as R
from .message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_TAGS,
                      PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, SCHEDULE_TOPIC, format_host,
                      string_to_properties)
from .record import (BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
                     MIN_RECORD_SIZE, STOREHOSTADDRESS_V6_FLAG, ReadBuffer)

STOP_END = "end"  # ran out of bytes exactly at a record boundary (or zeros follow)
STOP_BLANK = "blank"  # an end-of-segment blank record at ``end``
STOP_INCOMPLETE = "incomplete"  # a record starts at ``end`` but is not wholly in the range
STOP_CORRUPT = "corrupt"  # the record at ``end`` is damaged

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> tuple[int, ...]:
    """``messageDelayLevel`` → delay in ms per level (index 0 is level 1)."""
    out = []
    for item in spec.split():
        out.append(int(item[:-1]) * _UNIT_MS[item[-1]])
    return tuple(out)


_HDR = struct.Struct(">ii")


def _gather(arr: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    idx = pos[:, None] + np.arange(width, dtype=np.int64)
    return arr[idx].view(dtype).ravel()


# The fixed head of every record, TOTALSIZE .. BORNTIMESTAMP, read in one gather per batch.
HEAD_DTYPE = np.dtype({"names": ["size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
                                 "commitlog_offset", "sys_flag", "born_timestamp"],
                       "formats": [">i4", ">i4", ">i4", ">i4", ">i4", ">i8", ">i8", ">i4", ">i8"],
                       "offsets": [R.TOTALSIZE_POS, R.MAGIC_POS, R.BODYCRC_POS, R.QUEUEID_POS,
                                   R.FLAG_POS, R.QUEUEOFFSET_POS, R.PHYSICALOFFSET_POS,
                                   R.SYSFLAG_POS, R.BORNTIMESTAMP_POS],
                       "itemsize": R.BORNHOST_POS})
# RECONSUMETIMES .. BODYLENGTH, after the hosts (so at a per-record position): one more gather.
TAIL_DTYPE = np.dtype({"names": ["reconsume_times", "prepared_transaction_offset", "body_len"],
                       "formats": [">i4", ">i8", ">i4"],
                       "offsets": [0, R.PREPARED_TX_OFFSET_POS - R.RECONSUMETIMES_POS,
                                   R.BODYLENGTH_POS - R.RECONSUMETIMES_POS],
                       "itemsize": R.BODY_POS - R.RECONSUMETIMES_POS})


def _gather_struct(arr: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``dtype``-sized rows starting at each of ``pos``, as one structured array."""
    idx = pos[:, None] + np.arange(dtype.itemsize, dtype=np.int64)
    return arr[idx].reshape(-1).view(dtype)


@dataclass
class DecodedRecords:
    """Columns of the whole records found in ``buf[start:end]``.

    ``base_offset`` is the CommitLog offset of ``buf[0]``; ``pos`` are positions in ``buf``.
    """

    base_offset: int
    pos: np.ndarray
    size: np.ndarray
    magic: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    commitlog_offset: np.ndarray
    sys_flag: np.ndarray
    born_timestamp: np.ndarray
    store_timestamp: np.ndarray
    reconsume_times: np.ndarray
    prepared_transaction_offset: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic: list[str]
    props_raw: list[str]
    tags_code: np.ndarray
    end: int
    stop: str
    stop_reason: str = ""
    _props: list[dict[str, str]] | None = field(default=None, repr=False)
    _known: dict[str, list[str | None]] | None = field(default=None, repr=False)

    @property
    def properties(self) -> list[dict[str, str]]:
        """Parsed properties per record (parsed on first use)."""
        if self._props is None:
            self._props = [string_to_properties(p) for p in self.props_raw]
        return self._props

    def _property(self, name: str) -> list[str | None]:
        if self._known is not None and name in self._known:
            return self._known[name]
        return extract_property(self.props_raw, name)

    @classmethod
    def from_dispatch_columns(cls, commitlog_offset: list[int], size: list[int],
                              queue_id: list[int], queue_offset: list[int], sys_flag: list[int],
                              store_timestamp: list[int], tags_code: list[int], topic: list[str],
                              properties: list[dict[str, str]]) -> "DecodedRecords":
        """Dispatch columns the writer already holds for records it just appended.

        Carries what the dispatchers read (offsets, sizes, queue, flags, store time, tagsCode,
        topic, properties); body and host columns are not filled. ``next_offset`` is the end of
        the last record.
        """
        n = len(commitlog_offset)
        off = np.asarray(commitlog_offset, dtype=np.int64)
        sz = np.asarray(size, dtype=np.int32)
        zeros32 = np.zeros(n, dtype=np.int32)
        zeros64 = np.zeros(n, dtype=np.int64)
        end = int(off[-1]) + int(sz[-1]) if n else 0
        rec = cls(base_offset=0, pos=off, size=sz, magic=np.full(n, MESSAGE_MAGIC_CODE, dtype=np.int32),
                  body_crc=zeros32, queue_id=np.asarray(queue_id, dtype=np.int32), flag=zeros32,
                  queue_offset=np.asarray(queue_offset, dtype=np.int64), commitlog_offset=off,
                  sys_flag=np.asarray(sys_flag, dtype=np.int32), born_timestamp=zeros64,
                  store_timestamp=np.asarray(store_timestamp, dtype=np.int64),
                  reconsume_times=zeros32, prepared_transaction_offset=zeros64, body_pos=zeros64,
                  body_len=zeros32, topic=topic, props_raw=[], tags_code=np.asarray(tags_code, dtype=np.int64),
                  end=end, stop=STOP_END)
        rec._props = properties
        rec._known = {name: [p.get(name) for p in properties]
                      for name in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)}
        return rec

    def __len__(self) -> int:
        return len(self.pos)

    @property
    def offsets(self) -> np.ndarray:
        """Where each record actually is in the CommitLog (``base_offset + pos``). Writers of
        derived files use this, not the PHYSICALOFFSET field, which a damaged record (valid
        by RocketMQ's rule, which does not check it) may misstate."""
        return self.pos if self.base_offset == 0 else self.base_offset + self.pos

    @property
    def next_offset(self) -> int:
        """CommitLog offset right after the last whole record (or at the blank)."""
        return self.base_offset + self.end

    def tags(self) -> list[str | None]:
        return self._property(PROPERTY_TAGS)

    def keys(self) -> list[str | None]:
        """Raw KEYS property (space-separated) per record."""
        return self._property(PROPERTY_KEYS)

    def uniq_keys(self) -> list[str | None]:
        return self._property(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def bodies(self, buf: ReadBuffer) -> list[bytes]:
        mv = memoryview(buf)
        return [bytes(mv[p:p + n]) for p, n in zip(self.body_pos.tolist(), self.body_len.tolist())]

    def hosts(self, buf: ReadBuffer) -> tuple[list[str], list[str]]:
        """(born hosts, store hosts) as ``ip:port`` strings."""
        mv = memoryview(buf)
        born, store = [], []
        for p, sf in zip(self.pos.tolist(), self.sys_flag.tolist()):
            q = p + R.BORNHOST_POS
            alen = 16 if sf & BORNHOST_V6_FLAG else 4
            born.append(format_host(bytes(mv[q:q + alen]), int.from_bytes(mv[q + alen:q + alen + 4], "big", signed=True)))
            q += alen + 4 + 8
            alen = 16 if sf & STOREHOSTADDRESS_V6_FLAG else 4
            store.append(format_host(bytes(mv[q:q + alen]), int.from_bytes(mv[q + alen:q + alen + 4], "big", signed=True)))
        return born, store

    def msg_ids(self, buf: ReadBuffer) -> list[str]:
        """Offset message ids (store host + commitlog offset), upper-case hex."""
        mv = memoryview(buf)
        out = []
        for p, sf, off in zip(self.pos.tolist(), self.sys_flag.tolist(), self.commitlog_offset.tolist()):
            q = p + R.STOREHOST_POS + R.host_shift(sf)[0]
            alen = 16 if sf & STOREHOSTADDRESS_V6_FLAG else 4
            out.append((bytes(mv[q:q + alen + 4]) + off.to_bytes(8, "big", signed=True)).hex().upper())
        return out


def scan_boundaries_py(buf: ReadBuffer, start: int, end: int, limit: int | None = None) -> tuple[list[int], int, str]:
    """Walk TOTALSIZE fields from ``start``: (record positions, stop position, stop kind).

    With ``limit`` the walk stops after that many records (kind ``end``).
    """
    positions: list[int] = []
    pos = start
    unpack = _HDR.unpack_from
    while True:
        if limit is not None and len(positions) >= limit:
            return positions, pos, STOP_END
        if pos + 8 > end:
            return positions, pos, (STOP_END if pos == end else STOP_INCOMPLETE)
        size, magic = unpack(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            return positions, pos, STOP_BLANK
        if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
            return positions, pos, (STOP_END if size == 0 and magic == 0 else STOP_CORRUPT)
        if size < MIN_RECORD_SIZE:
            return positions, pos, STOP_CORRUPT
        if pos + size > end:
            return positions, pos, STOP_INCOMPLETE
        positions.append(pos)
        pos += size


_topic_cache: dict[bytes, str] = {}
_SEP = 0xFF  # never a byte of valid UTF-8: separates records in one gathered buffer
_ESCAPED = re.compile("[\udc80-\udcfe]")  # (\udcff, a raw 0xFF, splits: caught by the count)


def _decode_topics_py(buf: ReadBuffer, topic_pos: np.ndarray, topic_len: np.ndarray) -> list[str]:
    """The topic of every record (UTF-8, replacement characters), through a small cache."""
    mv = memoryview(buf)
    topics: list[str] = []
    cache = _topic_cache
    for tp, tl in zip(topic_pos.tolist(), topic_len.tolist()):
        tb = bytes(mv[tp:tp + tl])
        t = cache.get(tb)
        if t is None:
            t = tb.decode("utf-8", "replace")
            if len(cache) < 100_000:
                cache[tb] = t
        topics.append(t)
    return topics


def _gather_strings_py(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list[str]:
    """UTF-8 strings at ``arr[start:start+length]`` for every record, decoded in one call."""
    n = len(starts)
    if n == 0:
        return []
    lengths = lengths.astype(np.int64)
    total = int(lengths.sum()) + n - 1
    out_start = np.concatenate(([0], np.cumsum(lengths[:-1] + 1)))
    idx = np.arange(total, dtype=np.int64)
    owner = np.repeat(np.arange(n), lengths + 1)[:total]
    src = starts[owner] + (idx - out_start[owner])
    gathered = arr[np.minimum(src, len(arr) - 1)]
    sep_pos = out_start[1:] - 1
    gathered[sep_pos] = _SEP
    text = gathered.tobytes().decode("utf-8", "surrogateescape")
    parts = text.split("\udcff")
    if len(parts) != n or _ESCAPED.search(text):
        # a raw 0xFF or other invalid UTF-8 inside a string: decode each record as Java does
        # (replacement characters), never leaving lone surrogates in a str
        mv = memoryview(arr.tobytes())
        return [bytes(mv[s:s + ln]).decode("utf-8", "replace")
                for s, ln in zip(starts.tolist(), lengths.tolist())]
    return parts


def decode_records(buf: ReadBuffer, start: int = 0, end: int | None = None, *, base_offset: int = 0,
                   check_crc: bool = False, max_records: int | None = None,
                   delay_levels_ms: Sequence[int] | None = None,
                   properties: bool = True) -> DecodedRecords:
    """Decode every whole record of ``buf[start:end]`` into columns (see module doc).

    ``properties=False`` (recovery scans) skips the properties strings and tags codes: the
    columns hold ``""`` and 0 there; layout and CRC checks are the same.
    """
    if end is None:
        end = len(buf)
    positions, stop_pos, stop = scan_boundaries(buf, start, end, max_records)
    arr = np.frombuffer(buf, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    head = _gather_struct(arr, pos, HEAD_DTYPE)  # every fixed field before the hosts at once
    size = head["size"].astype(np.int32)
    magic = head["magic"].astype(np.int32)
    sys_flag = head["sys_flag"].astype(np.int32)
    d_born = np.where(sys_flag & BORNHOST_V6_FLAG, R.HOST_V6_EXTRA, 0).astype(np.int64)
    d_store = np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, R.HOST_V6_EXTRA, 0).astype(np.int64)
    tail = pos + d_born + d_store
    after_hosts = _gather_struct(arr, tail + R.RECONSUMETIMES_POS, TAIL_DTYPE)
    # Java reads a negative BODYLENGTH / PROPERTIESLENGTH as none (``format.record`` rule 3, 5)
    body_len = np.clip(after_hosts["body_len"].astype(np.int64), 0, None)
    body_pos = tail + R.BODY_POS
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    topic_len_pos = body_pos + body_len
    rec_end = pos + size
    # bounds guard before gathering variable fields: a damaged record must not read past it
    ok = topic_len_pos + 2 <= rec_end  # v1: the topic length byte and at least PROPERTIESLENGTH
    if not ok.all():
        bad = int(np.argmin(ok))
        return _truncated(buf, base_offset, positions[:bad], start, positions[bad], STOP_CORRUPT,
                          "body length out of record", check_crc, delay_levels_ms)
    topic_len = np.where(v2, _gather(arr, topic_len_pos, 2, ">i2").astype(np.int64),
                         arr[topic_len_pos].astype(np.int64))
    topic_pos = topic_len_pos + np.where(v2, 2, 1)
    props_len_pos = topic_pos + topic_len
    ok = (topic_len >= 0) & (topic_len <= np.where(v2, R.MAX_TOPIC_LENGTH_V2, R.MAX_TOPIC_LENGTH)) \
        & (props_len_pos + 2 <= rec_end)
    if not ok.all():
        bad = int(np.argmin(ok))
        return _truncated(buf, base_offset, positions[:bad], start, positions[bad], STOP_CORRUPT,
                          "topic length out of record", check_crc, delay_levels_ms)
    props_len = np.clip(_gather(arr, props_len_pos, 2, ">i2").astype(np.int64), 0, None)
    expect = (MIN_RECORD_SIZE + d_born + d_store + body_len + topic_len + props_len
              + v2.astype(np.int64))
    ok = expect == size
    if not ok.all():
        bad = int(np.argmin(ok))
        return _truncated(buf, base_offset, positions[:bad], start, positions[bad], STOP_CORRUPT,
                          "TOTALSIZE does not match the fields", check_crc, delay_levels_ms)
    if check_crc:
        crc = head["body_crc"]
        mv = memoryview(buf)
        for i, (bp, bl, c) in enumerate(zip(body_pos.tolist(), body_len.tolist(), crc.tolist())):
            if bl > 0 and (zlib.crc32(mv[bp:bp + bl]) & 0x7FFFFFFF) != c:
                return _truncated(buf, base_offset, positions[:i], start, positions[i],
                                  STOP_CORRUPT, "body CRC mismatch", False, delay_levels_ms)
    props_start = props_len_pos + 2
    topics = _decode_topics(buf, topic_pos, topic_len)
    store_ts = _gather(arr, pos + R.STORETIMESTAMP_POS + d_born, 8, ">i8").astype(np.int64)
    if properties:
        props = _gather_strings(arr, props_start, props_len)
        tags_code = _tags_codes(topics, props, store_ts, delay_levels_ms)
    else:
        props = [""] * len(topics)
        tags_code = np.zeros(len(topics), dtype=np.int64)
    return DecodedRecords(
        base_offset=base_offset, pos=pos, size=size, magic=magic,
        body_crc=head["body_crc"].astype(np.int32),
        queue_id=head["queue_id"].astype(np.int32),
        flag=head["flag"].astype(np.int32),
        queue_offset=head["queue_offset"].astype(np.int64),
        commitlog_offset=head["commitlog_offset"].astype(np.int64),
        sys_flag=sys_flag,
        born_timestamp=head["born_timestamp"].astype(np.int64),
        store_timestamp=store_ts,
        reconsume_times=after_hosts["reconsume_times"].astype(np.int32),
        prepared_transaction_offset=after_hosts["prepared_transaction_offset"].astype(np.int64),
        body_pos=body_pos, body_len=body_len.astype(np.int32), topic=topics, props_raw=props,
        tags_code=tags_code, end=stop_pos, stop=stop)


def _truncated(buf: ReadBuffer, base_offset: int, positions: list[int], start: int,
               bad_pos: int, stop: str, reason: str, check_crc: bool,
               delay: Sequence[int] | None) -> DecodedRecords:
    """Decode the good prefix before a damaged record and report where it stopped."""
    if positions:
        out = decode_records(buf, start, bad_pos, base_offset=base_offset, check_crc=check_crc,
                             delay_levels_ms=delay)
        if out.stop == STOP_CORRUPT:
            return out  # an earlier record failed its CRC: the data ends there, not at bad_pos
    else:
        out = decode_records(buf, start, start, base_offset=base_offset, delay_levels_ms=delay)
    out.end, out.stop, out.stop_reason = bad_pos, stop, reason
    return out


_DEFAULT_DELAYS = parse_delay_levels()


def _tags_codes_py(topics: list[str], props: list[str], store_ts: np.ndarray,
                   delay_levels_ms: Sequence[int] | None) -> np.ndarray:
    out = np.zeros(len(topics), dtype=np.int64)
    delays = _DEFAULT_DELAYS if delay_levels_ms is None else delay_levels_ms
    tags = extract_property(props, PROPERTY_TAGS)
    for i, t in enumerate(tags):
        if t:
            out[i] = java_hash(t)
    sched = [i for i, t in enumerate(topics) if t == SCHEDULE_TOPIC]
    if sched:
        levels = extract_property([props[i] for i in sched], PROPERTY_DELAY_TIME_LEVEL)
        for i, lv in zip(sched, levels):
            if lv is None:
                continue
            try:
                level = min(int(lv), len(delays))
            except ValueError:
                level = 0
            if level > 0:
                out[i] = int(store_ts[i]) + delays[level - 1]
    return out


def tags_code_of(topic: str, props: dict[str, str], store_timestamp: int,
                 delay_levels_ms: Sequence[int] | None = None) -> int:
    """tagsCode of one record from its properties (same rule as the batch decoder)."""
    if topic == SCHEDULE_TOPIC:
        lv = props.get(PROPERTY_DELAY_TIME_LEVEL)
        if lv:
            delays = _DEFAULT_DELAYS if delay_levels_ms is None else delay_levels_ms
            try:
                level = min(int(lv), len(delays))
            except ValueError:
                level = 0
            if level > 0:
                return store_timestamp + delays[level - 1]
    t = props.get(PROPERTY_TAGS)
    return java_hash(t) if t else 0


def extract_property_py(raws: Sequence[str], name: str) -> list[str | None]:
    """The value of one property in each raw properties string, without parsing the rest.

    Same answer as ``string_to_properties(s).get(name)`` (the last entry wins; an empty value
    counts as absent).
    """
    key = name + "\x01"
    klen = len(key)
    out: list[str | None] = []
    append = out.append
    for s in raws:
        i = s.rfind(key)
        while i > 0 and s[i - 1] != "\x02":
            i = s.rfind(key, 0, i)
        if i < 0:
            append(None)
            continue
        st = i + klen
        j = s.find("\x02", st)
        v = s[st:] if j < 0 else s[st:j]
        if not v and i > 0:  # an empty last entry: an earlier one may hold the value
            append(string_to_properties(s).get(name))
        else:
            append(v or None)
    return out


# ---- the compiled twins (``_speedups_batch.pyx``; ``rocketstore._native``) --------------------------
scan_boundaries, _decode_topics, _gather_strings, _tags_codes, extract_property = (
    scan_boundaries_py, _decode_topics_py, _gather_strings_py, _tags_codes_py, extract_property_py)
_speedups = _native.load("rocketstore.format._speedups_batch")
if _speedups is not None:
    scan_boundaries, _decode_topics, _gather_strings, _tags_codes, extract_property = (
        _speedups.scan_boundaries, _speedups._decode_topics, _speedups._gather_strings,
        _speedups._tags_codes, _speedups.extract_property)
