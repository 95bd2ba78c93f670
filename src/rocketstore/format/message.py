"""The CommitLog message record (RocketMQ 4.9 "v1", read also "v2" of 5.x).

The byte layout, its limits and the rule for a valid record are defined once, in
``format.record`` (RocketMQ 4.9.7's ``checkMessageAndReturnSize``); this module encodes and
decodes by it.

Theory of operation: ``encode_message`` builds the whole record with the three fields the store
only knows inside its put lock (queue offset, physical offset, store timestamp) set to zero;
``patch_record`` fills them in place (``struct.pack_into`` on the mmap). ``decode_message``
parses one record at a position and raises only ``CorruptRecordError``.
"""
from __future__ import annotations

import ipaddress
import os
import random
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from .. import _native
from ..errors import CorruptRecordError
from .hashing import crc32_masked, java_hash
from .timer_layout import PROPERTY_TIMER_OUT_MS, TIMER_PROPERTIES, TIMER_TOPIC

# the record layout (offsets, limits, validity) lives in ``format.record``; re-exported here
from .record import (ReadBuffer, WriteBuffer, BLANK_MAGIC_CODE, BODYCRC_POS, BORNHOST_POS, BORNHOST_V6_FLAG,  # noqa: F401
                     BORNTIMESTAMP_POS, COMPRESSED_FLAG, END_FILE_MIN_BLANK_LENGTH, FLAG_POS, HEAD,
                     MAGIC_POS, MAX_PROPERTIES_LENGTH, MAX_TOPIC_LENGTH, MESSAGE_MAGIC_CODE,
                     MESSAGE_MAGIC_CODE_V2, MULTI_TAGS_FLAG, PHYSICALOFFSET_POS, QUEUEID_POS,
                     QUEUEOFFSET_POS, STOREHOSTADDRESS_V6_FLAG, SYSFLAG_POS, TAIL, TOTALSIZE_POS,
                     TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE,
                     TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, length_problem,
                     record_length, version_of)

_I32 = struct.Struct(">i")
_Q64 = struct.Struct(">q")
_H16 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")

# ---- property names (MessageConst) ------------------------------------------------------------
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
# ours (``transactionPackEnable``): a half message whose body is a batch (``MessageBatch``'s
# encoding) of this many entries, committed as those entries (``broker.services.transaction``)
PROPERTY_TRANSACTION_PACKED = "RS_TXN_PACKED"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


# ---- hosts ------------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def parse_host(host: str) -> tuple[bytes, int, bool]:
    """``"1.2.3.4:10911"`` / ``"[::1]:10911"`` / ``"::1:10911"`` → (address bytes, port, is_v6).

    An IPv4-mapped IPv6 address becomes IPv4, as Java's ``InetAddress`` does.
    """
    h = host.strip()
    if h.startswith("["):
        addr_s, _, port_s = h[1:].partition("]:")
    else:
        addr_s, _, port_s = h.rpartition(":")
    try:
        port = int(port_s)
        addr = ipaddress.ip_address(addr_s)
    except ValueError as exc:
        raise ValueError(f"bad host {host!r}: want ip:port") from exc
    if not 0 <= port <= 0x7FFFFFFF:
        raise ValueError(f"bad port in {host!r}")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed, port, addr.version == 6


def format_host(addr: bytes | bytearray | memoryview, port: int) -> str:
    return _format_host(bytes(addr), port)


@lru_cache(maxsize=4096)
def _format_host(addr: bytes, port: int) -> str:
    ip = ipaddress.ip_address(addr)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


# ---- properties -------------------------------------------------------------------------------
def properties_to_string(props: Mapping[str, str]) -> str:
    """``messageProperties2String``: ``name\\x01value\\x02`` per entry, in the mapping's order."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items() if v is not None)


def string_to_properties(s: str) -> dict[str, str]:
    """``string2messageProperties``: entries with an empty name or value are dropped."""
    out: dict[str, str] = {}
    if not s:
        return out
    for item in s.split("\x02"):
        k, _, v = item.partition("\x01")
        if k and v:
            out[k] = v
    return out


def check_property(name: str, value: str) -> None:
    if not name or "\x01" in name or "\x02" in name:
        raise ValueError(f"illegal property name {name!r}")
    if not isinstance(value, str) or not value or "\x02" in value:
        raise ValueError(f"illegal value for property {name!r}: {value!r}")


# ---- message ids ------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def _msg_id_prefix(store_host: str) -> str:
    addr, port, _ = parse_host(store_host)
    return (addr + struct.pack(">i", port)).hex().upper()


def create_message_id(store_host: str, physical_offset: int) -> str:
    """Offset msgId: store ip | port | physical offset, upper-case hex (32 or 56 chars)."""
    if physical_offset >= 0:
        return f"{_msg_id_prefix(store_host)}{physical_offset:016X}"
    return _msg_id_prefix(store_host) + struct.pack(">q", physical_offset).hex().upper()


def create_message_ids(store_host: str, first: int, sizes: Sequence[int]) -> list[str]:
    """``create_message_id`` of each record of a batch appended at ``first`` with ``sizes``."""
    ids = []
    off = first
    for n in sizes:
        ids.append(create_message_id(store_host, off))
        off += n
    return ids


def parse_message_id(msg_id: str) -> tuple[str, int]:
    """Offset msgId → (store host, physical offset). Raises ``ValueError`` if malformed."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"bad message id {msg_id!r}: want 32 or 56 hex chars")
    raw = bytes.fromhex(msg_id)
    alen = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, alen)
    return format_host(raw[:alen], port), offset


class UniqKeyGenerator:
    """``MessageClientIDSetter.createUniqID``: ip | pid(2) | class-loader hash(4) | ms since
    the start of the month(4) | counter(2), upper-case hex."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        addr, _, _ = parse_host(f"{ip}:0")
        self._prefix = (addr + struct.pack(">hi", os.getpid() & 0x7FFF, random.getrandbits(31))).hex().upper()
        self._lock = threading.Lock()
        self._counter = 0
        self._month_start_ms, self._next_month_ms = self._month_window()

    @staticmethod
    def _month_window() -> tuple[int, int]:
        t = time.localtime()
        start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        ny, nm = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
        nxt = time.mktime((ny, nm, 1, 0, 0, 0, 0, 0, -1))
        return int(start * 1000), int(nxt * 1000)

    def next(self) -> str:
        now = int(time.time() * 1000)
        with self._lock:
            if now >= self._next_month_ms:
                self._month_start_ms, self._next_month_ms = self._month_window()
            diff = max(0, now - self._month_start_ms) & 0x7FFFFFFF
            c = self._counter & 0xFFFF
            self._counter += 1
        return f"{self._prefix}{diff:08X}{c:04X}"

    def next_many(self, n: int) -> list[str]:
        """``n`` keys at once: what ``n`` calls of ``next`` in the same millisecond give."""
        now = int(time.time() * 1000)
        with self._lock:
            if now >= self._next_month_ms:
                self._month_start_ms, self._next_month_ms = self._month_window()
            diff = max(0, now - self._month_start_ms) & 0x7FFFFFFF
            c0 = self._counter
            self._counter += n
        head = f"{self._prefix}{diff:08X}"
        return [f"{head}{c & 0xFFFF:04X}" for c in range(c0, c0 + n)]


_default_uniq = UniqKeyGenerator()


def create_uniq_key() -> str:
    return _default_uniq.next()


def create_uniq_keys(n: int) -> list[str]:
    """``n`` fresh UNIQ_KEY values (one clock read and one lock for all)."""
    return _default_uniq.next_many(n)


# ---- values -----------------------------------------------------------------------------------
@dataclass(slots=True)
class Message:
    """A message to store. ``keys`` may be a list or one space-separated string."""

    topic: str
    body: bytes = b""
    tags: str | None = None
    keys: Sequence[str] | str | None = None
    properties: dict[str, str] | None = None
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int | None = None
    born_host: str | None = None
    store_host: str | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def all_properties(self) -> dict[str, str]:
        """User properties plus TAGS and KEYS, as they are stored."""
        props = dict(self.properties or {})
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else KEY_SEPARATOR.join(self.keys)
            if keys:
                props[PROPERTY_KEYS] = keys
        return props


@dataclass(slots=True)
class MessageExt:
    """A stored message with every record field."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_size: int
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    magic: int = MESSAGE_MAGIC_CODE
    msg_id: str = field(default="")

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        k = self.properties.get(PROPERTY_KEYS)
        return [p for p in k.split(KEY_SEPARATOR) if p] if k else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def tags_code(self) -> int:
        t = self.tags
        return java_hash(t) if t else 0

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_MASK


# ---- encode -----------------------------------------------------------------------------------
class RecordFields:
    """What ``encode_message`` reads of a message besides its properties, on a light object a
    caller fills in turn for each record of a batch (a ``Message`` each would cost more than
    the encoding). The compiled encoder takes it as it takes a ``Message``."""

    __slots__ = ("topic", "body", "queue_id", "flag", "sys_flag", "reconsume_times",
                 "prepared_transaction_offset")
    topic: str
    body: bytes
    queue_id: int
    flag: int
    sys_flag: int
    reconsume_times: int
    prepared_transaction_offset: int


@dataclass(slots=True)
class EncodedMessage:
    """A pre-encoded record; ``data`` lacks queue offset, physical offset and store time
    (``patch_record`` writes them where the record lands)."""

    data: bytes
    store_ts_pos: int
    topic: str
    queue_id: int
    sys_flag: int
    properties: Mapping[str, str]


class MessageTooLarge(ValueError):
    """Body over ``max_message_size``."""


class PropertiesTooLarge(ValueError):
    """Properties string over 32767 bytes."""


@lru_cache(maxsize=4096)
def _host_bytes(host: str) -> tuple[bytes, bool]:
    addr, port, v6 = parse_host(host)
    return addr + _I32.pack(port), v6


@lru_cache(maxsize=4096)
def _topic_bytes(topic: str) -> bytes:
    if not isinstance(topic, str) or not topic:
        raise ValueError("topic must be a non-empty string")
    tb = topic.encode("utf-8")
    if len(topic) > MAX_TOPIC_LENGTH or len(tb) > MAX_TOPIC_LENGTH:
        raise ValueError(f"topic longer than {MAX_TOPIC_LENGTH}: {len(tb)} bytes")
    return bytes([len(tb)]) + tb


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Validate and serialise properties (``name\x01value\x02`` each)."""
    parts = []
    for k, v in props.items():
        if v is None:
            continue
        if not k or not isinstance(k, str) or "\x01" in k or "\x02" in k:
            raise ValueError(f"illegal property name {k!r}")
        if not isinstance(v, str) or not v or "\x02" in v:
            raise ValueError(f"illegal value for property {k!r}: {v!r}")
        parts.append(f"{k}\x01{v}\x02")
    return "".join(parts).encode("utf-8")


def encode_message(msg: Message | RecordFields, props: Mapping[str, str], *, born_timestamp: int,
                   born_host: str, store_host: str, max_body_size: int) -> EncodedMessage:
    """Encode a v1 record. Raises ``ValueError`` subclasses for illegal input."""
    topic_part = _topic_bytes(msg.topic)
    body = msg.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise ValueError(f"body must be bytes, not {type(body).__name__}")
    blen = len(body)
    if blen > max_body_size:
        raise MessageTooLarge(f"body of {blen} bytes exceeds max_message_size {max_body_size}")
    props_b = encode_properties_py(props)
    plen = len(props_b)
    if plen > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLarge(f"properties of {plen} bytes exceed {MAX_PROPERTIES_LENGTH}")
    qid = msg.queue_id
    if not isinstance(qid, int) or isinstance(qid, bool) or not 0 <= qid <= 0x7FFFFFFF:
        raise ValueError(f"queue_id must be a non-negative int, not {qid!r}")
    born_part, bv6 = _host_bytes(born_host)
    store_part, sv6 = _host_bytes(store_host)
    sys_flag = msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    if bv6:
        sys_flag |= BORNHOST_V6_FLAG
    if sv6:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    size = (BORNHOST_POS + len(born_part) + 8 + len(store_part) + TAIL.size + blen
            + len(topic_part) + 2 + plen)
    crc = (zlib.crc32(body) & 0x7FFFFFFF) if blen else 0
    data = b"".join((HEAD.pack(size, MESSAGE_MAGIC_CODE, crc, qid, msg.flag, 0, 0, sys_flag,
                               born_timestamp),
                     born_part, _ZERO8, store_part,
                     TAIL.pack(msg.reconsume_times, msg.prepared_transaction_offset, blen),
                     body, topic_part, _H16.pack(plen), props_b))
    return EncodedMessage(data, BORNHOST_POS + len(born_part), msg.topic, qid, sys_flag, props)


_ZERO8 = bytes(8)


def patch_record(buf: WriteBuffer, pos: int, store_ts_pos: int, queue_offset: int, physical_offset: int,
                 store_timestamp: int) -> None:
    """Fill in the fields only known inside the put lock, in place."""
    _Q64.pack_into(buf, pos + QUEUEOFFSET_POS, queue_offset)
    _Q64.pack_into(buf, pos + PHYSICALOFFSET_POS, physical_offset)
    _Q64.pack_into(buf, pos + store_ts_pos, store_timestamp)


class BatchRefused(ValueError):
    """A ``put_messages`` batch that may not be stored as one (delayed, timer properties)."""


def encode_batch(msgs: Sequence[Message], *, now: int, default_host: str, max_body_size: int,
                 generate_uniq_key: bool) -> tuple[list[EncodedMessage], bool]:
    """Encode the messages of one ``put_messages`` batch: (records, wait).

    Per message, in order: its stored properties (``all_properties``); ``WAIT=false`` on any
    message makes ``wait`` False; a ``DELAY`` level other than "" / "0" or a timer property
    (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` outside the timer topic,
    without ``TIMER_OUT_MS``) refuses the batch (``BatchRefused``); a fresh ``UNIQ_KEY`` when it
    has none and ``generate_uniq_key``; then ``encode_message`` with the message's own born
    timestamp (``now`` when None), born host and store host (``default_host`` when empty). The
    first refusal raises: ``BatchRefused``, ``MessageTooLarge``, ``PropertiesTooLarge`` or
    another ``ValueError`` / ``TypeError`` / ``AttributeError`` for illegal fields.
    """
    encoded = []
    wait = True
    keys = None
    for i, m in enumerate(msgs):
        props = m.all_properties()
        if props.get(PROPERTY_WAIT_STORE_MSG_OK) == "false":
            wait = False
        level = props.get(PROPERTY_DELAY_TIME_LEVEL)
        if level is not None and level not in ("", "0"):
            raise BatchRefused("a batch cannot be delayed")
        if (m.topic != TIMER_TOPIC and PROPERTY_TIMER_OUT_MS not in props
                and any(k in props for k in TIMER_PROPERTIES)):  # not silently delivered at once
            raise BatchRefused("a batch cannot carry timer properties")
        if generate_uniq_key and PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            if keys is None:  # one clock read for the rest of the batch
                keys = iter(create_uniq_keys(len(msgs) - i))
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = next(keys)
        encoded.append(encode_message_py(
            m, props, born_timestamp=m.born_timestamp if m.born_timestamp is not None else now,
            born_host=m.born_host or default_host, store_host=m.store_host or default_host,
            max_body_size=max_body_size))
    return encoded, wait


def encode_committed(halves: Sequence[Any], *, now: int, host: str, max_body_size: int
                     ) -> list[EncodedMessage | Exception]:
    """``endMessageTransaction``'s record for each stored half record of ``halves`` (objects
    with a ``MessageExt``'s fields: ``properties``, ``body``, ``flag``, ``sys_flag``,
    ``born_timestamp``, ``born_host``, ``store_host``, ``reconsume_times``,
    ``commitlog_offset``): the copy on the real topic and queue (REAL_TOPIC / REAL_QID, which
    it drops with TRAN_MSG), sysFlag COMMIT, preparedTransactionOffset the half's offset, born
    timestamp and hosts the half's (``now`` / ``host`` where empty). An ``EncodedMessage``
    each, or the exception that refuses that one (``KeyError``: no REAL_TOPIC / REAL_QID;
    ``ValueError``, ``TypeError``, ``struct.error``: a field ``encode_message`` refuses)."""
    out: list[EncodedMessage | Exception] = []
    m = RecordFields()
    for half in halves:
        try:
            props = dict(half.properties)
            m.topic = props.pop(PROPERTY_REAL_TOPIC)
            m.queue_id = int(props.pop(PROPERTY_REAL_QUEUE_ID))
            props.pop(PROPERTY_TRANSACTION_PREPARED, None)
            m.body, m.flag = half.body, half.flag
            m.sys_flag = (half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
            m.reconsume_times = half.reconsume_times
            m.prepared_transaction_offset = half.commitlog_offset
            out.append(encode_message_py(
                m, props, born_timestamp=half.born_timestamp or now,
                born_host=half.born_host or host, store_host=half.store_host or host,
                max_body_size=max_body_size))
        except (KeyError, ValueError, TypeError, struct.error) as exc:
            out.append(exc)  # a field out of its range or of another type: this one refused
    return out


# the pure functions under their own names: the specification the compiled twins are tested
# against (``_speedups.pyx`` hands them every unusual input)
encode_message_py = encode_message
encode_properties_py = encode_properties
create_message_ids_py = create_message_ids
encode_batch_py = encode_batch
encode_committed_py = encode_committed
string_to_properties_py = string_to_properties


def record_bytes(m: MessageExt) -> bytes:
    """The stored record of a decoded ``MessageExt``, byte for byte."""
    raw = getattr(m, "raw", None)
    if raw:
        return bytes(raw)
    msg = Message(topic=m.topic, body=m.body, queue_id=m.queue_id, flag=m.flag,
                  sys_flag=m.sys_flag, reconsume_times=m.reconsume_times,
                  prepared_transaction_offset=m.prepared_transaction_offset)
    enc = encode_message(msg, m.properties, born_timestamp=m.born_timestamp,
                         born_host=m.born_host, store_host=m.store_host,
                         max_body_size=max(len(m.body), 1))
    data = bytearray(enc.data)
    patch_record(data, 0, enc.store_ts_pos, m.queue_offset, m.commitlog_offset,
                 m.store_timestamp)
    return bytes(data)


def encode_blank(buf: WriteBuffer, pos: int, remaining: int) -> None:
    _BLANK.pack_into(buf, pos, remaining, BLANK_MAGIC_CODE)


# ---- decode -----------------------------------------------------------------------------------
class Blank:
    """Sentinel: a blank (end-of-segment) record."""


BLANK = Blank()


def read_header(buf: ReadBuffer, pos: int) -> tuple[int, int]:
    """(total size, magic) at ``pos``."""
    return _BLANK.unpack_from(buf, pos)


def decode_message(buf: ReadBuffer, pos: int = 0, *, check_crc: bool = False,
                   with_body: bool = True) -> MessageExt | Blank:
    """Decode the record at ``buf[pos:]``.

    Returns ``BLANK`` for an end-of-segment blank record; raises ``CorruptRecordError`` for
    anything that is not a whole, consistent record.
    """
    avail = len(buf) - pos
    if avail < 8:
        raise CorruptRecordError(pos, "TOTALSIZE", "fewer than 8 bytes left")
    size, magic = _BLANK.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return BLANK
    version = version_of(magic)
    if not version:
        raise CorruptRecordError(pos, "MAGICCODE", f"unknown magic {magic & 0xFFFFFFFF:#010x}")
    if size < record_length(0, 0, 0) or size > avail:
        raise CorruptRecordError(pos, "TOTALSIZE", f"size {size} with {avail} bytes available")
    end = pos + size
    try:
        (_, _, body_crc, queue_id, flag, queue_offset, phys, sys_flag,
         born_ts) = HEAD.unpack_from(buf, pos)
        p = pos + BORNHOST_POS
        alen = 16 if sys_flag & BORNHOST_V6_FLAG else 4
        born_host = format_host(buf[p:p + alen], _I32.unpack_from(buf, p + alen)[0])
        p += alen + 4
        store_ts = _Q64.unpack_from(buf, p)[0]
        p += 8
        alen = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
        saddr = bytes(buf[p:p + alen])
        sport = _I32.unpack_from(buf, p + alen)[0]
        p += alen + 4
        reconsume, prepared, body_len = TAIL.unpack_from(buf, p)
        p += TAIL.size
        body_pos = p
        body_len = max(body_len, 0)  # Java: a negative length reads as no body
        tl_pos = p + body_len
        topic_len = props_len = None
        if tl_pos + (1 if version == 1 else 2) <= end:
            topic_len = buf[tl_pos] if version == 1 else _H16.unpack_from(buf, tl_pos)[0]
            pl_pos = tl_pos + (1 if version == 1 else 2) + topic_len
            if topic_len >= 0 and pl_pos + 2 <= end:
                props_len = _H16.unpack_from(buf, pl_pos)[0]
        problem = length_problem(size, version, body_len, topic_len, props_len, sys_flag, avail)
        if problem is not None:
            raise CorruptRecordError(pos, *problem)
        body = bytes(buf[body_pos:body_pos + body_len]) if with_body else b""
        if check_crc and body_len > 0:
            crc = crc32_masked(buf[body_pos:body_pos + body_len])
            if crc != body_crc:
                raise CorruptRecordError(pos, "BODYCRC", f"stored {body_crc}, computed {crc}")
        assert topic_len is not None and props_len is not None  # (length_problem checked)
        p = tl_pos + (1 if version == 1 else 2)
        # Java decodes both strings with replacement: their content never makes a record invalid
        topic = bytes(buf[p:p + topic_len]).decode("utf-8", "replace")
        p += topic_len + 2
        props_len = max(props_len, 0)
        props = string_to_properties(bytes(buf[p:p + props_len]).decode("utf-8", "replace"))
    except (struct.error, IndexError, ValueError) as exc:
        if isinstance(exc, CorruptRecordError):
            raise
        raise CorruptRecordError(pos, "record", str(exc)) from exc
    store_host = format_host(saddr, sport)
    msg_id = (saddr + struct.pack(">iq", sport, phys)).hex().upper()
    return MessageExt(topic=topic, body=body, properties=props, queue_id=queue_id,
                      queue_offset=queue_offset, commitlog_offset=phys, store_size=size,
                      body_crc=body_crc, flag=flag, sys_flag=sys_flag, born_timestamp=born_ts,
                      born_host=born_host, store_timestamp=store_ts, store_host=store_host,
                      reconsume_times=reconsume, prepared_transaction_offset=prepared,
                      magic=magic, msg_id=msg_id)


def record_properties(buf: ReadBuffer, pos: int = 0) -> tuple[str, int, dict[str, str]] | None:
    """(topic, queue offset, properties) of the record at ``buf[pos:]`` without decoding the
    rest (the timer store's enqueue reads only these); None for a blank or a record that is not
    whole (``decode_message`` says why)."""
    try:
        size, magic = _BLANK.unpack_from(buf, pos)
        version = version_of(magic)
        if not version or size > len(buf) - pos:
            return None
        sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POS)[0]
        queue_offset = struct.unpack_from(">q", buf, pos + QUEUEOFFSET_POS)[0]
        p = pos + BORNHOST_POS + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
        p += (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8)
        body_len = max(TAIL.unpack_from(buf, p)[2], 0)
        p += TAIL.size + body_len
        topic_len = buf[p] if version == 1 else _H16.unpack_from(buf, p)[0]
        p += 1 if version == 1 else 2
        topic = bytes(buf[p:p + topic_len]).decode("utf-8", "replace")
        p += topic_len
        props_len = max(_H16.unpack_from(buf, p)[0], 0)
        p += 2
        if p + props_len > pos + size:
            return None
        return topic, queue_offset, string_to_properties(bytes(buf[p:p + props_len]).decode("utf-8", "replace"))
    except (struct.error, IndexError, ValueError):
        return None


# ---- the compiled twins (``_speedups.pyx``; ``rocketstore._native``) --------------------------
_speedups = _native.load("rocketstore.format._speedups")
if _speedups is not None:
    encode_message = _speedups.encode_message  # noqa: F811
    encode_properties = _speedups.encode_properties  # noqa: F811
    create_message_ids = _speedups.create_message_ids  # noqa: F811
    encode_batch = _speedups.encode_batch  # noqa: F811
    encode_committed = _speedups.encode_committed  # noqa: F811
    string_to_properties = _speedups.string_to_properties  # noqa: F811


# names RocketMQ keeps for itself (MessageConst.STRING_HASH_SET, the ones clients could collide
# with); a user property with one of these names is refused
SYSTEM_PROPERTY_NAMES = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
    "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
    "EXTEND_UNIQ_INFO", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "INNER_NUM", "INNER_BASE",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET", "__transactionId__",
    "TRANSACTION_CHECK_TIMES", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "__SHARDINGKEY", "PROPERTY_FORWARD_QUEUE_ID", "REDIRECT",
    "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT", "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS", "__BORNHOST", "BORN_TIMESTAMP", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
    "TIMER_DELAY_MS", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID"})
