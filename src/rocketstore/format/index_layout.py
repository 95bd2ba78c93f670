"""RocketMQ IndexFile byte layout (``index/<yyyyMMddHHmmssSSS>``) and its pure rules.

File size = ``40 + hash_slot_num * 4 + index_num * 20``; every integer is big-endian.

Header (40 bytes, written through to the file on every put)::

    off size field
      0    8 beginTimestamp   store time (ms) of the first entry (or the carried end time)
      8    8 endTimestamp     store time (ms) of the newest entry
     16    8 beginPhyOffset   CommitLog offset of the first entry (or the carried end offset)
     24    8 endPhyOffset     CommitLog offset of the newest entry
     32    4 hashSlotCount    slots that went from empty to used
     36    4 indexCount       next entry number; 1 for an empty file (0 on disk until a put)

Slot table: ``hash_slot_num`` int32 at byte 40; slot ``h % hash_slot_num`` holds the number of the
newest entry of that bucket, 0 = empty.

Entry ``k`` (20 bytes) at ``40 + hash_slot_num * 4 + k * 20``; entry 0 is never used, so a file
holds ``index_num - 1`` entries::

    off size field
      0    4 keyHash     index_key_hash(topic + "#" + key), never negative
      4    8 phyOffset   CommitLog offset of the record
     12    4 timeDiff    (storeTimestamp - beginTimestamp) // 1000, in seconds, clamped to
                         [0, Integer.MAX_VALUE]; 0 while beginTimestamp <= 0
     16    4 prevIndex   previous entry of the same slot, 0 = end of chain

Theory of operation. An index file is a hash table whose buckets are singly linked lists running
from the newest entry to the oldest: a put appends an entry pointing at the current slot head and
makes it the new head. Entry numbers only grow, so a chain can be walked newest first and a
walk stops as soon as a link points nowhere sensible (``<= 0``, past ``indexCount``, or at
itself) or the entries become older than the query window. Only the 31-bit key hash is stored,
never the key: two keys with one Java ``String.hashCode`` (``Aa``/``BB``) share a chain and the
index alone cannot tell them apart — callers must re-check the record.

The first entry of a file computes its timeDiff against the *old* beginTimestamp (0 for the
first file, the previous file's end time after a roll-over) and only then sets beginTimestamp to
its own store time; this module keeps that rule in ``time_diff_seconds`` callers' hands.

Everything here is pure: constants, ``struct`` layouts, a numpy record dtype for entries, and
small functions (sizes, positions, time rules, file names), plus ``index_key_hashes``, the bulk
key hash: keys become a fixed-width numpy unicode matrix (zero padded on the right) and Java's
``h = 31*h + c``, i.e. ``sum(c_j * 31**(width-1-j)) mod 2**32``, is one matrix-vector product
over all keys; the right padding multiplied each hash by ``31**pad``, which is undone with the
inverse of 31 modulo 2**32 (31 is odd, so it has one). Keys with characters outside the BMP (two UTF-16 units in Java) take
the scalar ``java_hash``.
"""
from __future__ import annotations

import struct
import time
from datetime import datetime
from typing import Sequence

import numpy as np

from .hashing import java_hash

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF

INDEX_HEADER = struct.Struct(
    ">"
    "q"  # beginTimestamp
    "q"  # endTimestamp
    "q"  # beginPhyOffset
    "q"  # endPhyOffset
    "i"  # hashSlotCount
    "i"  # indexCount
)
assert INDEX_HEADER.size == INDEX_HEADER_SIZE
BEGIN_TIMESTAMP_POS = 0
END_TIMESTAMP_POS = 8
BEGIN_PHY_OFFSET_POS = 16
END_PHY_OFFSET_POS = 24
HASH_SLOT_COUNT_POS = 32
INDEX_COUNT_POS = 36

INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # keyHash
    "q"  # phyOffset
    "i"  # timeDiff (seconds)
    "i"  # prevIndex
)
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE
SLOT = struct.Struct(">i")
I64 = struct.Struct(">q")

ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"),
                        ("prev_index", ">i4")])
assert ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE

INDEX_FILE_NAME_DIGITS = 17
KEY_SEPARATOR = "#"


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file: ``40 + slots*4 + entries*20`` (420,000,040 by default).

    >>> index_file_size(5_000_000, 20_000_000)
    420000040
    """
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def slot_position(slot: int) -> int:
    return INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE


def entry_position(hash_slot_num: int, index: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index * INDEX_ENTRY_SIZE


def build_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: ``topic#key``."""
    return f"{topic}{KEY_SEPARATOR}{key}"


def time_diff_seconds(store_timestamp: int, begin_timestamp: int) -> int:
    """The timeDiff stored for an entry, given the header's beginTimestamp at put time.

    Java long division truncates toward zero; negative results are clamped to 0 anyway.

    >>> time_diff_seconds(1500, 0), time_diff_seconds(1500, 400), time_diff_seconds(100, 5000)
    (0, 1, 0)
    """
    if begin_timestamp <= 0:
        return 0
    diff = store_timestamp - begin_timestamp
    if diff < 0:
        return 0
    return min(diff // 1000, INT_MAX)


def time_diff_seconds_many(store_timestamps: np.ndarray, begin_timestamps: np.ndarray) -> np.ndarray:
    """Vectorised ``time_diff_seconds`` (int64 in, int32 out)."""
    ts = np.asarray(store_timestamps, dtype=np.int64)
    begin = np.asarray(begin_timestamps, dtype=np.int64)
    diff = np.maximum(ts - begin, 0) // 1000
    diff = np.minimum(diff, INT_MAX)
    return np.where(begin <= 0, 0, diff).astype(np.int32)


def is_time_matched(file_begin: int, file_end: int, begin: int, end: int) -> bool:
    """``IndexFile.isTimeMatched``: the file's [begin, end] touches the query window."""
    return ((begin < file_begin and end > file_end)
            or file_begin <= begin <= file_end
            or file_begin <= end <= file_end)


def index_file_name(millis: int) -> str:
    """``UtilAll.timeMillisToHumanString`` in the local time zone: ``yyyyMMddHHmmssSSS``."""
    t = time.localtime(millis // 1000)
    return (f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}{t.tm_hour:02d}{t.tm_min:02d}"
            f"{t.tm_sec:02d}{millis % 1000:03d}")


def parse_index_file_name(name: str) -> int | None:
    """Local-time epoch ms of an index file name, or None when it is not 17 digits."""
    if len(name) != INDEX_FILE_NAME_DIGITS or not name.isdigit():
        return None
    try:
        dt = datetime(int(name[0:4]), int(name[4:6]), int(name[6:8]), int(name[8:10]),
                      int(name[10:12]), int(name[12:14]))
    except ValueError:
        return None
    return int(time.mktime(dt.timetuple())) * 1000 + int(name[14:17])


_CHUNK = 65536
_INV31 = pow(31, -1, 1 << 32)


def _powers(base: int, n: int) -> np.ndarray:
    out = np.empty(n + 1, dtype=np.uint64)
    v = 1
    for i in range(n + 1):  # n is the longest key: a short table
        out[i] = v
        v = (v * base) & 0xFFFFFFFF
    return out


def _java_hashes_units(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(Java hash as uint64 < 2**32, length in UTF-16 units) of every key."""
    n = len(keys)
    hashes = np.empty(n, dtype=np.uint64)
    units = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        part = keys[start:start + _CHUNK]
        a = np.array(part, dtype=np.str_)
        width = a.dtype.itemsize // 4
        m = a.view(np.uint32).reshape(len(part), width)
        # sum(c_j * 31**(width-1-j)): each product < 2**48, the sum fits uint64; keep mod 2**32
        weights = _powers(31, width)[width - 1::-1] if width else np.zeros(0, dtype=np.uint64)
        h = (m.astype(np.uint64) @ weights) & 0xFFFFFFFF
        lengths = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        longest = int(max(width, lengths.max(initial=0)))
        shift = lengths - width  # > 0 only for keys whose trailing NULs numpy dropped
        fix = np.where(shift >= 0, _powers(31, longest)[np.clip(shift, 0, None)],
                       _powers(_INV31, longest)[np.clip(-shift, 0, None)])
        h = (h * fix) & 0xFFFFFFFF
        if width and m.max() > 0xFFFF:  # characters outside the BMP: two UTF-16 units
            for i in np.flatnonzero((m > 0xFFFF).any(axis=1)).tolist():
                h[i] = java_hash(part[i]) & 0xFFFFFFFF
                lengths[i] = len(part[i].encode("utf-16-be")) // 2
        hashes[start:start + len(part)] = h
        units[start:start + len(part)] = lengths
    return hashes, units


def java_hashes(keys: Sequence[str]) -> np.ndarray:
    """Java ``String.hashCode`` of every key as int32, vectorised (see the module doc)."""
    return _java_hashes_units(keys)[0].astype(np.uint32).view(np.int32)


def _index_hash(h32: np.ndarray) -> np.ndarray:
    h = h32.astype(np.uint32).view(np.int32).astype(np.int64)
    h = np.abs(h)
    h[h == 0x80000000] = 0
    return h.astype(np.int32)


def index_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """``indexKeyHashMethod`` of every key: ``abs(hashCode)``, MIN_VALUE mapped to 0 (int32)."""
    return _index_hash(_java_hashes_units(keys)[0])


def prefixed_index_key_hashes(prefix_hashes: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    """``index_key_hash(prefix + key)`` per key, given ``java_hash(prefix)`` per key.

    Java's hash of a concatenation is ``hash(prefix) * 31**units(key) + hash(key)``, so the
    ``topic#`` strings never have to be built: ``build_key`` is only needed for one key.
    """
    h, units = _java_hashes_units(keys)
    longest = int(units.max(initial=0))
    pre = np.asarray(prefix_hashes, dtype=np.int64).astype(np.uint64) & 0xFFFFFFFF
    return _index_hash(((pre * _powers(31, longest)[units]) + h) & 0xFFFFFFFF)
