"""Java hash and checksum semantics the on-disk formats depend on.

* ``java_hash(s)`` is Java's ``String.hashCode()``: ``h = 31*h + u`` over the UTF-16 code units
  of ``s`` with 32-bit wrap-around, returned as a signed int. RocketMQ uses it for the
  ConsumeQueue tagsCode (``"TagA"`` → 2598919) and for index keys (``topic#key``).
* ``index_key_hash(key)`` is ``IndexService.indexKeyHashMethod``: ``abs(hashCode)`` where
  ``abs(MIN_VALUE)`` stays negative and is then mapped to 0 (``"polygenelubricants"`` → 0).
* ``crc32_masked(body)`` is ``UtilAll.crc32``: zlib CRC-32 with the sign bit cleared.

``java_hash_many`` computes the hash of many strings at once with numpy, for bulk index work.
"""
from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Sequence

import numpy as np

from .. import _native

_MASK32 = 0xFFFFFFFF


def _to_signed32(h: int) -> int:
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def java_hash_py(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` (signed 32-bit).

    >>> java_hash("Aa") == java_hash("BB") == 2112
    True
    >>> java_hash("polygenelubricants")
    -2147483648
    """
    h = 0
    if s.isascii():
        for b in s.encode("ascii"):
            h = (31 * h + b) & _MASK32
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK32
    return _to_signed32(h)


java_hash = java_hash_py
_speedups = _native.load("rocketstore.format._speedups_hash")  # ``_speedups_hash.pyx``
if _speedups is not None:
    _speedups.bind(java_hash_py)
    java_hash = _speedups.java_hash


def index_key_hash(key: str) -> int:
    """RocketMQ's ``indexKeyHashMethod``: non-negative key hash, MIN_VALUE mapped to 0."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


def crc32_masked(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: CRC-32 (IEEE) & 0x7FFFFFFF; 0 for empty input."""
    if not data:
        return 0
    return zlib.crc32(data) & 0x7FFFFFFF


_POW31 = np.ones(1, dtype=np.uint32)


def _pow31(n: int) -> np.ndarray:
    global _POW31
    if len(_POW31) < n:
        size = max(n, 2 * len(_POW31))
        p = np.empty(size, dtype=np.uint32)
        p[0] = 1
        for i in range(1, size):  # one-off table build, amortised
            p[i] = (int(p[i - 1]) * 31) & _MASK32
        _POW31 = p
    return _POW31[:n]


def java_hash_many(strings: Sequence[str]) -> np.ndarray:
    """``java_hash`` of every string, as an int32 array: the compiled twin string by string
    (~0.2 µs a key), else vectorised with numpy over code units (~1.2 µs a key)."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    if _speedups is not None:
        return np.fromiter(map(java_hash, strings), dtype=np.int32, count=n)
    return java_hash_many_py(strings)


def java_hash_many_py(strings: Sequence[str]) -> np.ndarray:
    """``java_hash_many`` with numpy alone (the pure path)."""
    n = len(strings)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    encoded = [s.encode("utf-16-be") for s in strings]
    lengths = np.fromiter((len(e) // 2 for e in encoded), dtype=np.int64, count=n)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(n, dtype=np.int32)
    units = np.frombuffer(b"".join(encoded), dtype=">u2").astype(np.uint32)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    owner = np.repeat(np.arange(n), lengths)
    # exponent of each unit: distance to the end of its string minus one
    exp = ends[owner] - 1 - np.arange(total)
    prod = units * _pow31(int(exp.max()) + 1)[exp]  # uint32 wraps mod 2^32
    sums = np.zeros(n, dtype=np.uint32)
    nonempty = lengths > 0
    sums[nonempty] = np.add.reduceat(prod, starts[nonempty]).astype(np.uint32)
    return sums.view(np.int32)


def index_key_hash_many(keys: Sequence[str]) -> np.ndarray:
    """``index_key_hash`` of every key, as an int32 array."""
    h = java_hash_many(keys).astype(np.int64)
    h = np.abs(h)
    h[h == 0x80000000] = 0
    return h.astype(np.int32)
