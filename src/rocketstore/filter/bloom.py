"""RocketMQ's bloom filter for ConsumeQueue-ext bitmaps (``filter/util/BloomFilter``, ``BitsArray``).

Theory of operation. A broker with ``enableCalcFilterBitMap`` gives every SQL92 consumer group
a fixed set of ``k`` bit positions in an ``m``-bit map (``BloomFilterData``), derived from
``"<group>#<topic>"``. For each stored message the dispatcher evaluates every registered
expression of the message's topic and ORs the positions of the groups that match into one map;
that map is saved in the message's ConsumeQueue-ext unit. A pull by a group then skips any unit
whose map lacks one of the group's positions, without reading the CommitLog (a set bit may be
another group's: hits are rechecked, misses are certain).

Numbers, exactly as RocketMQ: error rate ``f`` (percent) and expected groups ``n`` give
``k = ceil(log_0.5(f/100))`` and ``m = 8 * ceil(ceil(n * log2(100/f) * log2(e)) / 8)``
(defaults ``f=20, n=32``: ``k=3, m=112``). Positions: ``h = murmur3_x64_128(utf8(s))`` as
Guava's ``asLong`` (the first 8 bytes, little-endian), ``h1 = low 32 bits``, ``h2 = high 32
bits`` (both signed), then for ``i = 1..k``: ``c = h1 + i*h2`` with 32-bit wrap, ``~c`` when
negative, ``c % m``. Bit ``p`` of a map is bit ``p % 8`` (value ``1 << (p % 8)``) of byte
``p // 8``.

>>> bf = BloomFilter(20, 32); (bf.k, bf.m)
(3, 112)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

_M64 = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """MurmurHash3 x64 128-bit: ``(h1, h2)`` as unsigned 64-bit ints (Guava's ``murmur3_128``)."""
    h1 = h2 = seed & _M64
    n = len(data)
    nblocks = n // 16
    for b in range(nblocks):
        k1 = int.from_bytes(data[16 * b:16 * b + 8], "little")
        k2 = int.from_bytes(data[16 * b + 8:16 * b + 16], "little")
        k1 = (_rotl((k1 * _C1) & _M64, 31) * _C2) & _M64
        h1 ^= k1
        h1 = (_rotl(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        k2 = (_rotl((k2 * _C2) & _M64, 33) * _C1) & _M64
        h2 ^= k2
        h2 = (_rotl(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[16 * nblocks:]
    k1 = int.from_bytes(tail[:8], "little") if tail else 0
    k2 = int.from_bytes(tail[8:16], "little") if len(tail) > 8 else 0
    if k2:
        h2 ^= (_rotl((k2 * _C2) & _M64, 33) * _C1) & _M64
    if tail:
        h1 ^= (_rotl((k1 * _C1) & _M64, 31) * _C2) & _M64
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    return h1, h2


def _signed32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


@dataclass(frozen=True)
class BloomFilterData:
    """A group's bit positions and the map length they belong to (``BloomFilterData``)."""

    bit_pos: tuple[int, ...]
    bit_num: int

    def to_json(self) -> dict:
        return {"bitNum": self.bit_num, "bitPos": list(self.bit_pos)}

    @classmethod
    def from_json(cls, d: dict | None) -> "BloomFilterData | None":
        if not isinstance(d, dict) or d.get("bitPos") is None:
            return None
        return cls(tuple(int(x) for x in d["bitPos"]), int(d.get("bitNum") or 0))


class BloomFilter:
    """``BloomFilter.createByFn(f, n)``."""

    def __init__(self, f: int = 20, n: int = 32) -> None:
        if f < 1 or f >= 100:
            raise ValueError("f must be greater or equal than 1 and less than 100")
        if n < 1:
            raise ValueError("n must be greater than 0")
        self.f, self.n = f, n
        rate = f / 100.0
        self.k = int(math.ceil(math.log(rate) / math.log(0.5)))
        if self.k < 1:
            raise ValueError("Hash function num is less than 1")
        m = int(math.ceil(n * (math.log(1 / rate) / math.log(2)) * (math.log(math.e) / math.log(2))))
        self.m = int(8 * math.ceil(m / 8.0))

    @property
    def byte_length(self) -> int:
        return self.m // 8

    def calc_bit_positions(self, s: str) -> tuple[int, ...]:
        h1_64, _ = murmur3_x64_128(s.encode("utf-8", "surrogatepass"))
        hash1, hash2 = _signed32(h1_64), _signed32(h1_64 >> 32)
        out = []
        for i in range(1, self.k + 1):
            c = _signed32(hash1 + i * hash2)
            if c < 0:
                c = ~c
            out.append(c % self.m)
        return tuple(out)

    def generate(self, s: str) -> BloomFilterData:
        return BloomFilterData(self.calc_bit_positions(s), self.m)

    def is_valid(self, data: BloomFilterData | None) -> bool:
        return data is not None and data.bit_num == self.m and len(data.bit_pos) == self.k

    def hash_to(self, data: BloomFilterData, bits: bytearray) -> None:
        """Set the group's positions in ``bits`` (a map of ``m`` bits)."""
        for p in data.bit_pos:
            bits[p >> 3] |= 1 << (p & 7)

    def is_hit(self, data: BloomFilterData, bits: bytes) -> bool:
        return all(bits[p >> 3] & (1 << (p & 7)) for p in data.bit_pos)


def hit_mask(data: BloomFilterData) -> tuple[tuple[int, int], ...]:
    """``(byte index, mask)`` pairs that must all be set for a hit (for vectorised checks)."""
    masks: dict[int, int] = {}
    for p in data.bit_pos:
        masks[p >> 3] = masks.get(p >> 3, 0) | (1 << (p & 7))
    return tuple(sorted(masks.items()))
