"""The CommitLog record layout and validity rule: the one place that defines them.

Every encoder (``message.encode_message``), decoder (``message.decode_message``, the vectorised
``batch.decode_records``), verifier (``store.verify``), recovery scan (``store.recovery_scan``)
and the Spark reader read their field offsets, limits and the rule for "this is a whole record"
from here. Today's rule is RocketMQ 4.9.7's ``CommitLog.checkMessageAndReturnSize``; the
recovery truncates at the first record that fails it and at nothing else.

Layout (big-endian; host fields are 8 bytes for IPv4 + port, 20 for IPv6 + port by sys flag)::

    off  size  field
      0     4  TOTALSIZE                whole record
      4     4  MAGICCODE                0xDAA320A7 (v1) | 0xDAA320AB (v2, 5.x) | 0xCBD43194 blank
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
    +.. 1|2+T  TOPICLENGTH (signed byte in v1, short in v2), TOPIC (UTF-8)
    +..   2+P  PROPERTIESLENGTH (signed short), PROPERTIES  name\\x01value\\x02 ...

Size = 91 + B + T + P for v1 with two IPv4 hosts; +12 per IPv6 host; +1 for v2. A segment that
cannot hold ``size + 8`` more bytes ends with an 8-byte blank record ``[int remaining][BLANK]``.

What makes a record valid (``checkMessageAndReturnSize``), in order:

1. MAGICCODE is a message magic (a blank magic ends the segment; anything else: invalid);
2. TOTALSIZE is at least ``MIN_RECORD_SIZE`` and the record lies wholly in the readable bytes;
3. the body fits; with CRC checking on, a non-empty body's CRC equals BODYCRC (a negative
   BODYLENGTH reads as an empty body, as Java's ``if (bodyLen > 0)`` does);
4. TOPICLENGTH >= 0 (v1: at most 127, Java reads a signed byte) and fits;
5. the properties fit (a negative PROPERTIESLENGTH reads as none, likewise);
6. TOTALSIZE equals ``record_length`` of those lengths.

Nothing else: topic and property *contents* (NUL bytes, invalid UTF-8: Java decodes with
replacement), queue-offset continuity and the PHYSICALOFFSET value are not part of validity.
A reader may *report* such oddities; it never treats them as the end of the data.
"""
from __future__ import annotations

import struct
from typing import Union

#: what records are read from: bytes, or a view of them or of a mapped segment
ReadBuffer = Union[bytes, bytearray, memoryview]
#: what records are written into in place
WriteBuffer = Union[bytearray, memoryview]

# ---- magic codes (signed ints as Java writes them) -------------------------------------------
MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
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

# ---- fixed positions ---------------------------------------------------------------------------
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
HOST_V4_SIZE = 8  # 4-byte address + 4-byte port
HOST_V6_SIZE = 20  # 16-byte address + 4-byte port
HOST_V6_EXTRA = HOST_V6_SIZE - HOST_V4_SIZE

# positions with two IPv4 hosts; each IPv6 host moves the later fields by HOST_V6_EXTRA
STORETIMESTAMP_POS = BORNHOST_POS + HOST_V4_SIZE  # 56 (+12 with a v6 born host)
STOREHOST_POS = STORETIMESTAMP_POS + 8  # 64
RECONSUMETIMES_POS = STOREHOST_POS + HOST_V4_SIZE  # 72 (+12 per v6 host)
PREPARED_TX_OFFSET_POS = RECONSUMETIMES_POS + 4  # 76
BODYLENGTH_POS = PREPARED_TX_OFFSET_POS + 8  # 84
BODY_POS = BODYLENGTH_POS + 4  # 88

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
assert RECONSUMETIMES_POS + TAIL.size == BODY_POS

# ---- limits ------------------------------------------------------------------------------------
MAX_TOPIC_LENGTH = 127  # v1 TOPICLENGTH is a signed byte
MAX_TOPIC_LENGTH_V2 = 32767
MAX_PROPERTIES_LENGTH = 32767  # PROPERTIESLENGTH is a signed short


def version_of(magic: int) -> int:
    """1 or 2 for a message magic, 0 otherwise."""
    return 1 if magic == MESSAGE_MAGIC_CODE else 2 if magic == MESSAGE_MAGIC_CODE_V2 else 0


def host_shift(sys_flag: int) -> tuple[int, int]:
    """(bytes the born host adds, bytes the store host adds) beyond the IPv4 layout."""
    return (HOST_V6_EXTRA if sys_flag & BORNHOST_V6_FLAG else 0,
            HOST_V6_EXTRA if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0)


def store_timestamp_pos(sys_flag: int) -> int:
    return STORETIMESTAMP_POS + host_shift(sys_flag)[0]


def record_length(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0,
                  version: int = 1) -> int:
    """``calMsgLength``: total record size for the given field lengths."""
    born, store = host_shift(sys_flag)
    return (BODY_POS + born + store + max(body_len, 0) + (1 if version == 1 else 2) + topic_len
            + 2 + max(props_len, 0))


MIN_RECORD_SIZE = record_length(0, 0, 0)  # 91


def length_problem(size: int, version: int, body_len: int, topic_len: int | None,
                   props_len: int | None, sys_flag: int, avail: int) -> tuple[str, str] | None:
    """Rules 2-6 (all but the CRC) for one record: None if they hold, else (field, reason).

    ``avail``: readable bytes from the record's start; ``topic_len``/``props_len`` None when
    their field lies beyond the record (then the earlier length is what is wrong).
    """
    if size < MIN_RECORD_SIZE:
        return "TOTALSIZE", f"size {size} below the minimum {MIN_RECORD_SIZE}"
    if size > avail:
        return "TOTALSIZE", f"size {size} with {avail} bytes available"
    born, store = host_shift(sys_flag)
    if BODY_POS + born + store + max(body_len, 0) + (1 if version == 1 else 2) > size:
        return "BODYLENGTH", f"{body_len} does not fit in the record"
    max_topic = MAX_TOPIC_LENGTH if version == 1 else MAX_TOPIC_LENGTH_V2
    if topic_len is None or topic_len < 0 or topic_len > max_topic:
        return "TOPICLENGTH", f"{topic_len} out of range"
    if props_len is None:
        return "PROPERTIESLENGTH", "beyond the record"
    expect = record_length(body_len, topic_len, props_len, sys_flag, version)
    if expect != size:
        return "TOTALSIZE", f"stored {size}, fields add up to {expect}"
    return None


__all__ = [n for n in dir() if n.isupper() and not n.startswith("_")] + [
    "version_of", "host_shift", "store_timestamp_pos", "record_length", "length_problem"]
