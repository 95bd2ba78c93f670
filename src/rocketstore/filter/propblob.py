"""The properties of many messages as rows of one byte array, searched with numpy.

A ``PropertyBlob`` holds one fixed-width row per record: ``\\x02`` at ``lo[i]``, the record's
properties bytes after it up to ``hi[i]``, then whatever followed them where they were read
from (never looked at). With that leading separator every ``name\\x01value`` entry, the
record's first included, starts right after a ``\\x02`` and its value runs to the next
``\\x02`` or ``hi[i]``: one rule for the whole batch. The rows are also a numpy bytes array, so
searching is numpy's string functions (``np.strings.rfind``/``find``/``startswith``), one C
loop per batch.

``column(name)`` finds one property for every record at once, with ``string_to_properties``'s
answer (the last entry with a non-empty value wins; an entry's name is everything before its
first ``\\x01``). ``equals`` and ``small_ints`` compare values without making Python strings;
``strings`` decodes them as the per-record decoder does, for the evaluator's exact fallbacks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEP, KV = 2, 1
PAD = 16  # spare bytes after every row's data, so short fixed-width gathers stay in the row


@dataclass(frozen=True)
class ByteColumn:
    """One property of every record: ``present[i]`` and, where present, its value's bytes
    ``blob.flat[start[i]:end[i]]`` (never empty)."""
    present: np.ndarray
    start: np.ndarray
    end: np.ndarray


def gather(arr: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> "PropertyBlob":
    """The rows of the records whose properties are ``arr[starts[i]:starts[i] + lens[i]]``
    (every ``starts[i] >= 1``: the byte before becomes the separator). Rows are gathered as
    aligned 8-byte words; near the end of ``arr`` byte by byte."""
    n = len(starts)
    first = starts - 1
    lo = first & 7
    hi = lo + 1 + lens
    width = ((int(hi.max()) if n else 0) + PAD + 7) & ~7
    words = len(arr) >> 3
    w0 = first >> 3
    if n and int(w0.max()) + (width >> 3) <= words:
        aligned = arr[:words << 3].view(np.uint64)
        flat2 = aligned[w0[:, None] + np.arange(width >> 3)].view(np.uint8)
    else:
        flat2 = np.take(arr, (w0 << 3)[:, None] + np.arange(width), mode="clip")
    flat2[np.arange(n), lo] = SEP
    return PropertyBlob(flat2, lo, hi)


def from_texts(texts: list[bytes]) -> "PropertyBlob":
    """A blob of the given properties strings (UTF-8 bytes), laid out as records would be."""
    arr = np.frombuffer(b"".join(b"\x00" * 5 + t for t in texts) + b"\x00" * 8, dtype=np.uint8)
    lens = np.asarray([len(t) for t in texts], dtype=np.int64)
    starts = np.cumsum(lens + 5) - lens
    return gather(arr, starts.astype(np.int64), lens)


class PropertyBlob:
    def __init__(self, flat2: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        self.n, self.width = flat2.shape
        self.flat = flat2.reshape(-1)
        self.rows = flat2.view(f"S{self.width}").reshape(-1) if self.n else np.zeros(0, "S1")
        self.lo = lo
        self.hi = hi
        self._base: np.ndarray | None = None
        self._ints: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._columns: dict[str, ByteColumn | None] = {}

    def subset(self, rows: np.ndarray) -> "PropertyBlob":
        """The blob of the given records only (their rows copied)."""
        flat2 = self.flat.reshape(self.n, self.width)[rows]
        return PropertyBlob(flat2, self.lo[rows], self.hi[rows])

    @property
    def base(self) -> np.ndarray:
        """Index in ``flat`` of each row's first byte."""
        if self._base is None:
            self._base = np.arange(0, self.n * self.width, self.width, dtype=np.int64)
        return self._base

    def column(self, name: str) -> ByteColumn | None:
        """The property's values, or None if ``name`` cannot be searched as bytes (it holds a
        separator, a NUL — numpy's bytes strings end at trailing NULs — or a character the
        decoder could never produce: use ``strings``)."""
        if name in self._columns:
            return self._columns[name]
        try:
            needle = name.encode("utf-8") if "\ufffd" not in name and "\x00" not in name else b""
        except UnicodeEncodeError:
            needle = b""
        col = None
        if needle and SEP not in needle and KV not in needle:
            col = self._find(b"\x02" + needle + b"\x01")
        self._columns[name] = col
        return col

    def _find(self, needle: bytes) -> ByteColumn:
        rows, lo, hi = self.rows, self.lo, self.hi
        at = np.strings.rfind(rows, needle, lo, hi)
        value_at = at + len(needle)
        value_end = np.strings.find(rows, b"\x02", value_at, hi)
        value_end = np.where(value_end < 0, hi, value_end)
        present = at >= 0
        empty = np.flatnonzero(present & (value_end <= value_at))
        for i in empty.tolist():  # an empty last entry: an earlier one may hold the value
            a = int(at[i])
            while a >= 0:
                a = int(np.strings.rfind(rows[i], needle, int(lo[i]), a + len(needle) - 1))
                if a < 0:
                    break
                e = int(np.strings.find(rows[i], b"\x02", a + len(needle), int(hi[i])))
                e = int(hi[i]) if e < 0 else e
                if e > a + len(needle):
                    value_at[i], value_end[i] = a + len(needle), e
                    break
            present[i] = a >= 0
        return ByteColumn(present, self.base + value_at, self.base + value_end)

    def text(self, i: int) -> str:
        a = int(self.base[i] + self.lo[i]) + 1
        return self.flat[a:int(self.base[i] + self.hi[i])].tobytes().decode("utf-8", "replace")

    def strings(self, name: str, rows: np.ndarray | None = None) -> list:
        """Values as Python strings (None where absent), for all records or ``rows``."""
        from ..format.message import string_to_properties
        col = self.column(name)
        idx = np.arange(self.n) if rows is None else rows
        if col is None:
            return [string_to_properties(self.text(i)).get(name) for i in idx.tolist()]
        out: list = [None] * len(idx)
        k = np.flatnonzero(col.present[idx])
        for j, v in zip(k.tolist(), self.strings_at(col, idx[k])):
            out[j] = v
        return out

    def equals(self, col: ByteColumn, literal: str) -> np.ndarray:
        """Is each record's value exactly ``literal`` (meaningful where ``col.present``)?
        Comparing bytes is exact unless the literal holds U+FFFD (an invalid sequence decodes
        to it), a NUL (numpy's bytes strings end at trailing NULs) or cannot be encoded: then
        the values are decoded first."""
        try:
            lit = literal.encode("utf-8") if "\ufffd" not in literal and "\x00" not in literal else None
        except UnicodeEncodeError:
            lit = None
        if lit is None:
            out = np.zeros(self.n, dtype=bool)
            k = np.flatnonzero(col.present)
            out[k] = [s == literal for s in self.strings_at(col, k)]
            return out
        same_length = (col.end - col.start) == len(lit)
        if not lit:
            return same_length
        return same_length & np.strings.startswith(self.rows, lit, col.start - self.base)

    def strings_at(self, col: ByteColumn, rows: np.ndarray) -> list[str]:
        """The values of the present ``rows``, decoded as the per-record decoder does."""
        mv = self.flat.data
        return [bytes(mv[a:e]).decode("utf-8", "replace")
                for a, e in zip(col.start[rows].tolist(), col.end[rows].tolist())]

    def small_ints(self, col: ByteColumn) -> tuple[np.ndarray, np.ndarray]:
        """(ok, value) per record: ok where the value is present and is an optional sign and
        one to eight ASCII digits (``Integer.valueOf`` cannot fail on it nor leave int range;
        longer numbers take the exact path). The digits are read as one little-endian 8-byte
        word and combined pairwise (SWAR), no per-digit step."""
        key = id(col)
        if key in self._ints:
            return self._ints[key]
        words = np.ndarray(shape=(len(self.flat) - 7,), dtype="<u8", buffer=self.flat, strides=(1,))
        st = np.where(col.present, col.start, 0)
        first = self.flat[st]
        neg = first == ord("-")
        ds = st + (neg | (first == ord("+")))
        dl = col.end - ds
        ok = col.present & (dl >= 1) & (dl <= 8)
        n8 = np.where(ok, dl, 8).astype(np.uint64)
        # the value's bytes moved to the word's top, '0's shifted in below them
        w = (words[ds] << ((8 - n8) * 8)) | _ZERO_FILL[n8]
        ok &= ((w & _HIGH) == _ZEROS) & (((w + _SIXES) & _HIGH) == _ZEROS)  # every byte a digit
        w -= _ZEROS
        w = ((w * np.uint64(10)) + (w >> np.uint64(8))) & _PAIRS
        w = ((w * np.uint64(100)) + (w >> np.uint64(16))) & _QUADS
        w = (w * np.uint64(10000)) + (w >> np.uint64(32))
        val = (w & np.uint64(0xFFFFFFFF)).astype(np.int64)
        val = np.where(ok, np.where(neg, -val, val), 0)
        self._ints[key] = ok, val
        return ok, val


_ZEROS = np.uint64(0x3030303030303030)
_HIGH = np.uint64(0xF0F0F0F0F0F0F0F0)
_SIXES = np.uint64(0x0606060606060606)
_PAIRS = np.uint64(0x00FF00FF00FF00FF)
_QUADS = np.uint64(0x0000FFFF0000FFFF)
_ZERO_FILL = np.array([(0x3030303030303030 >> (8 * k)) if k < 8 else 0 for k in range(9)], dtype=np.uint64)
