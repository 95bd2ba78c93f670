"""The CommitLog message record (RocketMQ 4.9 "v1", read also "v2" of 5.x).

Byte layout, big-endian; host fields are 8 bytes (IPv4 + port) or 20 (IPv6 + port) by sys flag:

    off  size  field
      0     4  TOTALSIZE                whole record
      4     4  MAGICCODE                0xDAA320A7 (v1) | 0xDAA320AB (v2) | 0xCBD43194 blank
      8     4  BODYCRC                  crc32(body) & 0x7FFFFFFF
     12     4  QUEUEID
     16     4  FLAG
     20     8  QUEUEOFFSET              0 for prepared / rollback transaction records
     28     8  PHYSICALOFFSET           absolute CommitLog offset of this record
     36     4  SYSFLAG                  bit 0x10: born host v6, 0x20: store host v6
     40     8  BORNTIMESTAMP
     48  8|20  BORNHOST
    +0      8  STORETIMESTAMP
    +8   8|20  STOREHOST
    +..     4  RECONSUMETIMES
    +..     8  PREPARED TRANSACTION OFFSET
    +..   4+B  BODYLENGTH, BODY
    +.. 1|2+T  TOPICLENGTH (byte in v1, short in v2), TOPIC (UTF-8)
    +..   2+P  PROPERTIESLENGTH, PROPERTIES  name\\x01value\\x02 ...

Size = 91 + B + T + P for v1 with two IPv4 hosts; +12 per IPv6 host; +1 for v2.
A segment that cannot hold ``size + 8`` more bytes ends with an 8-byte blank record
``[int remaining][int BLANK_MAGIC]`` and the record goes to the next segment.

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
from typing import Mapping, Sequence

from ..errors import CorruptRecordError
from .hashing import crc32_masked, java_hash

# ---- magic codes (signed ints as Java writes them) -------------------------------------------
MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

# ---- sys flags -------------------------------------------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20

# ---- fixed positions (v4 born host) -----------------------------------------------------------
TOTALSIZE_POS = 0
MAGIC_POS = 4
BODYCRC_POS = 8
QUEUEID_POS = 12
FLAG_POS = 16
QUEUEOFFSET_POS = 20
PHYSICALOFFSET_POS = 28
SYSFLAG_POS = 36
BORNTIMESTAMP_POS = 40
BORNHOST_POS = 48

HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
assert HEAD.size == BORNHOST_POS
TAIL = struct.Struct(
    ">"
    "i"  # RECONSUMETIMES
    "q"  # PREPARED TRANSACTION OFFSET
    "i"  # BODYLENGTH
)
_I32 = struct.Struct(">i")
_Q64 = struct.Struct(">q")
_H16 = struct.Struct(">h")
_BLANK = struct.Struct(">ii")

MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767

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
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def record_length(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0,
                  version: int = 1) -> int:
    """``calMsgLength``: total record size for the given field lengths."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    topic_len_size = 1 if version == 1 else 2
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + body_len + topic_len_size + topic_len + 2 + props_len)


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


def format_host(addr: bytes, port: int) -> str:
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


_default_uniq = UniqKeyGenerator()


def create_uniq_key() -> str:
    return _default_uniq.next()


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


def encode_message(msg: Message, props: Mapping[str, str], *, born_timestamp: int,
                   born_host: str, store_host: str, max_body_size: int) -> EncodedMessage:
    """Encode a v1 record. Raises ``ValueError`` subclasses for illegal input."""
    topic_part = _topic_bytes(msg.topic)
    body = msg.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise ValueError(f"body must be bytes, not {type(body).__name__}")
    blen = len(body)
    if blen > max_body_size:
        raise MessageTooLarge(f"body of {blen} bytes exceeds max_message_size {max_body_size}")
    props_b = encode_properties(props)
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


def patch_record(buf, pos: int, store_ts_pos: int, queue_offset: int, physical_offset: int,
                 store_timestamp: int) -> None:
    """Fill in the fields only known inside the put lock, in place."""
    _Q64.pack_into(buf, pos + QUEUEOFFSET_POS, queue_offset)
    _Q64.pack_into(buf, pos + PHYSICALOFFSET_POS, physical_offset)
    _Q64.pack_into(buf, pos + store_ts_pos, store_timestamp)


def encode_blank(buf, pos: int, remaining: int) -> None:
    _BLANK.pack_into(buf, pos, remaining, BLANK_MAGIC_CODE)


# ---- decode -----------------------------------------------------------------------------------
class Blank:
    """Sentinel: a blank (end-of-segment) record."""


BLANK = Blank()


def read_header(buf, pos: int) -> tuple[int, int]:
    """(total size, magic) at ``pos``."""
    return _BLANK.unpack_from(buf, pos)


def decode_message(buf, pos: int = 0, *, check_crc: bool = False,
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
    if magic == MESSAGE_MAGIC_CODE:
        version = 1
    elif magic == MESSAGE_MAGIC_CODE_V2:
        version = 2
    else:
        raise CorruptRecordError(pos, "MAGICCODE", f"unknown magic {magic & 0xFFFFFFFF:#010x}")
    if size < record_length(0, 0, 0) or size > avail:
        raise CorruptRecordError(pos, "TOTALSIZE", f"size {size} with {avail} bytes available")
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
        if body_len < 0 or p + body_len > pos + size:
            raise CorruptRecordError(pos, "BODYLENGTH", f"{body_len} does not fit in the record")
        body = bytes(buf[p:p + body_len]) if with_body else b""
        if check_crc and body_len > 0:
            crc = crc32_masked(buf[p:p + body_len])
            if crc != body_crc:
                raise CorruptRecordError(pos, "BODYCRC", f"stored {body_crc}, computed {crc}")
        p += body_len
        if version == 1:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = _H16.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p:p + topic_len]).decode("utf-8")
        p += topic_len
        props_len = _H16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0:
            raise CorruptRecordError(pos, "PROPERTIESLENGTH", f"negative {props_len}")
        props = string_to_properties(bytes(buf[p:p + props_len]).decode("utf-8"))
        expect = record_length(body_len, topic_len, props_len, sys_flag, version)
        if expect != size:
            raise CorruptRecordError(pos, "TOTALSIZE", f"stored {size}, fields add up to {expect}")
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
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


def record_properties(buf, pos: int = 0) -> dict[str, str]:
    """The properties of the record at ``buf[pos:]`` without decoding the rest of it (a SQL92
    filter's input). The record is assumed whole (it came from the ConsumeQueue's size)."""
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POS)[0]
    q = pos + BORNHOST_POS + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
    q += (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) + 12
    body_len = _I32.unpack_from(buf, q)[0]
    q += 4 + max(body_len, 0)
    if _I32.unpack_from(buf, pos + MAGIC_POS)[0] == MESSAGE_MAGIC_CODE_V2:
        topic_len = _H16.unpack_from(buf, q)[0]
        q += 2
    else:
        topic_len = buf[q]
        q += 1
    q += topic_len
    props_len = _H16.unpack_from(buf, q)[0]
    q += 2
    return string_to_properties(bytes(buf[q:q + props_len]).decode("utf-8", "replace"))
