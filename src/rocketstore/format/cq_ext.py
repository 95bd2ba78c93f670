"""ConsumeQueue extension units (RocketMQ's ``ConsumeQueueExt.CqExtUnit``) and ext addresses.

With ``enableConsumeQueueExt`` every ConsumeQueue unit's 8-byte tagsCode slot holds the
*address* of an ext unit instead of the tags hash; the unit then carries the tagsCode, the
store time and the SQL92 filter bitmap. Files live in ``<root>/consumequeue_ext/<topic>/<qid>/``,
named by the 20-digit offset of their first byte, 48 MiB each by default. Unit (big-endian)::

    off size field
      0    2 size        whole unit, 20 + bitMapSize (a short: at most 32767)
      2    8 tagsCode
     10    8 msgStoreTime
     18    2 bitMapSize  0 when no bitmap was computed
     20    n filterBitMap

Units are appended; one that does not fit in the rest of a file (keeping 4 bytes free at the
end) is written at the next file, and the old file's tail gets the short ``-1`` as an end mark.
An address is the unit's offset in the ext stream plus ``Long.MIN_VALUE``, so every address is
at or below ``MAX_ADDR = Integer.MIN_VALUE - 1`` and can never be mistaken for a tags hash (an
int) or a delay deliver time (positive).

>>> decorate(0) == -(1 << 63) and is_ext_addr(decorate(0)) and not is_ext_addr(-5)
True
>>> decode_unit(encode_unit(7, 99, b"\\x01\\x02"))
ExtUnit(size=22, tags_code=7, store_timestamp=99, bitmap=b'\\x01\\x02')
"""
from __future__ import annotations

import struct
from typing import NamedTuple

LONG_MIN = -(1 << 63)
MAX_ADDR = -(1 << 31) - 1  # Integer.MIN_VALUE - 1
MAX_REAL_OFFSET = MAX_ADDR - LONG_MIN
END_BLANK_DATA_LENGTH = 4
END_MARK = b"\xff\xff"  # the short -1 written where a file's units end early

EXT_HEAD = struct.Struct(
    ">"
    "h"  # size
    "q"  # tagsCode
    "q"  # msgStoreTime
    "h"  # bitMapSize
)
MIN_EXT_UNIT_SIZE = EXT_HEAD.size  # 20
MAX_EXT_UNIT_SIZE = 32767
DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024


class ExtUnit(NamedTuple):
    size: int
    tags_code: int
    store_timestamp: int
    bitmap: bytes | None


def is_ext_addr(value: int) -> bool:
    return value <= MAX_ADDR


def decorate(offset: int) -> int:
    return offset if is_ext_addr(offset) else offset + LONG_MIN


def undecorate(address: int) -> int:
    return address - LONG_MIN if is_ext_addr(address) else address


def unit_size(bitmap: bytes | None) -> int:
    return MIN_EXT_UNIT_SIZE + (len(bitmap) if bitmap else 0)


def encode_unit(tags_code: int, store_timestamp: int, bitmap: bytes | None) -> bytes:
    n = len(bitmap) if bitmap else 0
    return EXT_HEAD.pack(MIN_EXT_UNIT_SIZE + n, tags_code, store_timestamp, n) + (bitmap or b"")


def decode_unit(buf: bytes | bytearray | memoryview, pos: int = 0) -> ExtUnit | None:
    """The unit at ``pos`` (None where no unit was written: size < 1 or out of the buffer)."""
    if pos + MIN_EXT_UNIT_SIZE > len(buf):
        return None
    size, tags, ts, nbits = EXT_HEAD.unpack_from(buf, pos)
    if size < 1:
        return None
    if nbits < 1:
        return ExtUnit(size, tags, ts, None)
    start = pos + MIN_EXT_UNIT_SIZE
    if start + nbits > len(buf):
        return None
    return ExtUnit(size, tags, ts, bytes(buf[start:start + nbits]))
