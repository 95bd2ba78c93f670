"""One RocketMQ IndexFile: a pure chain planner plus a thin mmap shell.

Byte layout: see ``rocketstore.format.index_layout`` (40-byte header, ``hash_slot_num`` int32
slots, 20-byte entries ``keyHash | phyOffset | timeDiff | prevIndex``, entry 0 unused)::

    [ header 40 B ][ slot 0 .. slot S-1 : 4 B each ][ entry 0 (unused) | entry 1 .. N-1 : 20 B ]

Theory of operation.

*One key at a time* (``put_key`` / ``put_hash``) follows RocketMQ's ``IndexFile.putKey`` step by
step: refuse when ``indexCount >= index_num``; read the slot (a value ``<= 0`` or ``> indexCount``
counts as empty); compute timeDiff against the *current* beginTimestamp; write the entry, then
the slot; the first entry sets beginPhyOffset/beginTimestamp (after its own timeDiff was
computed); an empty slot bumps hashSlotCount; finally indexCount, endPhyOffset, endTimestamp.

*A whole batch* (``put_batch``) gives the same bytes without a Python loop. ``plan_chains`` sorts
the batch by slot (stable, so batch order is kept inside a slot): the first batch entry of a slot
links to the slot's current head (sanitised exactly as ``putKey`` would at that entry's number),
every later one links to its predecessor in the batch, and the last one becomes the new head.
Entries are written as one numpy record array, then the header, then the new slot heads, so a
concurrent reader never follows a head past ``indexCount``. A batch longer than the free space
is cut: the return value says how many keys went in.

*Queries*: ``select_phy_offsets`` is RocketMQ's raw ``selectPhyOffset`` (hash match only, its
stop conditions, its max). ``candidates`` walks the same chain for the exact query of
``IndexService``: it ignores the result cap (collisions must not use it up) and widens the time
test by the second the stored timeDiff loses, so the caller can check the real store time.

*Splitting a key stream into files* (for the Spark rebuild): ``plan_index_files(phy, ts,
capacity, free_in_last=..., last_end_phy_offset=..., last_end_timestamp=...)`` returns
``IndexFilePlan(start, stop, new_file, carry_end_phy_offset, carry_end_timestamp)`` per file.
``capacity`` is ``max_index_num - 1``. A new file starts with RocketMQ's roll-over header: begin =
end = the previous file's end offset / end time (the last key put before the roll; the given
``last_end_*`` for the first new file), each only when > 0. Create each planned new file with
``IndexFile.create(path, slots, num, plan.carry_end_phy_offset, plan.carry_end_timestamp)``
and ``put_batch`` its slice: the result equals what the reput of one broker writes.
``index_keys(recs)`` turns decoded CommitLog columns into the key stream (``topic#uniqKey``
first, then ``topic#key`` per non-empty KEYS piece; rollback records skipped), and
``index_key_hash_columns(recs)`` goes straight to the hashes (what the reput uses).
"""
from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ..errors import CorruptFileError
from ..format.hashing import index_key_hash, java_hash
from ..format.index_layout import (BEGIN_PHY_OFFSET_POS, BEGIN_TIMESTAMP_POS, END_PHY_OFFSET_POS,
                                   END_TIMESTAMP_POS, ENTRY_DTYPE, HASH_SLOT_COUNT_POS, I64,
                                   INDEX_COUNT_POS, INDEX_ENTRY, INDEX_HEADER, INDEX_HEADER_SIZE,
                                   SLOT, build_key, entry_position, index_file_size,
                                   index_key_hashes, prefixed_index_key_hashes,
                                   is_time_matched, slot_position, time_diff_seconds,
                                   time_diff_seconds_many)
from ..format.message import KEY_SEPARATOR, TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from . import syncprobe
from .mapped_file import PageAllocator, map_private, open_sized_file

_I32 = SLOT


# ---- pure planning ---------------------------------------------------------------------------
def plan_chains(slots: np.ndarray, heads: np.ndarray, first_index: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Links for a batch put one by one from entry number ``first_index``.

    ``slots``: slot of each key; ``heads``: the slot table value of each key's slot *before* the
    batch. Returns (prevIndex per key, slots to update, their new heads, empty slots filled).
    """
    n = len(slots)
    idx = first_index + np.arange(n, dtype=np.int64)
    order = np.argsort(slots, kind="stable")
    s = slots[order]
    first = np.ones(n, dtype=bool)
    first[1:] = s[1:] != s[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    idx_sorted = idx[order]
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[1:] = idx_sorted[:-1]
    raw = heads[order].astype(np.int64)
    valid = (raw > 0) & (raw <= idx_sorted)
    prev_sorted[first] = np.where(valid[first], raw[first], 0)
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted
    new_slots = int(np.count_nonzero(first & ~valid))
    return prev, s[last], idx_sorted[last], new_slots


@dataclass(frozen=True)
class IndexFilePlan:
    """Keys ``[start, stop)`` of a stream go into one file (see the module doc)."""

    start: int
    stop: int
    new_file: bool
    carry_end_phy_offset: int
    carry_end_timestamp: int


def plan_index_files(phy_offsets: Sequence[int] | np.ndarray, store_timestamps: Sequence[int] | np.ndarray,
                     capacity: int, *, free_in_last: int = 0, last_end_phy_offset: int = 0,
                     last_end_timestamp: int = 0) -> list[IndexFilePlan]:
    """Split a global key stream into index files as RocketMQ's roll-over does."""
    if capacity <= 0:
        raise ValueError("capacity (max_index_num - 1) must be positive")
    n = len(phy_offsets)
    plans: list[IndexFilePlan] = []
    pos = 0
    carry = (int(last_end_phy_offset), int(last_end_timestamp))
    if free_in_last > 0 and n > 0:
        stop = min(n, free_in_last)
        plans.append(IndexFilePlan(0, stop, False, 0, 0))
        pos = stop
    while pos < n:
        if pos > 0:
            carry = (int(phy_offsets[pos - 1]), int(store_timestamps[pos - 1]))
        stop = min(n, pos + capacity)
        plans.append(IndexFilePlan(pos, stop, True, carry[0], carry[1]))
        pos = stop
    return plans


def _index_pieces(recs, mask):
    """(key pieces without the topic, record of each piece) in RocketMQ's put order."""
    pieces: list[str] = []
    owner: list[int] = []
    rollback = (recs.sys_flag & TRANSACTION_MASK) == TRANSACTION_ROLLBACK_TYPE
    use = ~rollback if mask is None else (mask & ~rollback)
    uniq, kprops = recs.uniq_keys(), recs.keys()
    sep = KEY_SEPARATOR
    add, own = pieces.append, owner.append
    for i in np.flatnonzero(use).tolist():
        u, ks = uniq[i], kprops[i]
        if u is not None:
            add(u)
            own(i)
        if ks:
            parts = ks.split(sep)
            if "" in parts:
                parts = [k for k in parts if k]
            pieces.extend(parts)
            owner.extend([i] * len(parts))
    return pieces, np.asarray(owner, dtype=np.int64)


def index_keys(recs, mask: np.ndarray | None = None) -> tuple[list[str], np.ndarray]:
    """Index keys (``topic#key``) of decoded records, in RocketMQ's put order, and the record of
    each key. ``recs`` is a ``DecodedRecords``; ``mask`` (bool per record) limits the records.
    Rollback records are skipped; prepared ones are indexed, as ``IndexService.buildIndex`` does.
    """
    pieces, owner = _index_pieces(recs, mask)
    topics = recs.topic
    return [f"{topics[o]}#{k}" for o, k in zip(owner.tolist(), pieces)], owner


_prefix_cache: dict[str, int] = {}


def index_key_hash_columns(recs, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Like ``index_keys`` but straight to index hashes (int32) without building the strings:
    the ``topic#`` prefix hash is computed once per topic and combined per key."""
    pieces, owner = _index_pieces(recs, mask)
    if not pieces:
        return np.zeros(0, dtype=np.int32), owner
    topics = recs.topic
    cache = _prefix_cache
    per_record = np.zeros(len(topics), dtype=np.int64)
    for i in np.unique(owner).tolist():
        t = topics[i]
        h = cache.get(t)
        if h is None:
            h = java_hash(t + "#")
            if len(cache) < 100_000:
                cache[t] = h
        per_record[i] = h
    return prefixed_index_key_hashes(per_record[owner], pieces), owner


# ---- the file ---------------------------------------------------------------------------------
ENTRY_AHEAD = 64 * 1024  # entry-list bytes allocated past the entries being written
class IndexFile:
    """One index file mapped read-write. Header fields are attributes, written through."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int, *, _create: bool = False,
                 carry_end_phy_offset: int = 0, carry_end_timestamp: int = 0,
                 private: bool = False) -> None:
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError("hash_slot_num must be > 0 and index_num > 1")
        self.path = path
        self.name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._io_lock = threading.Lock()  # mapping lifetime: msync vs close
        self._hdr_lock = threading.Lock()  # header write-through vs full rewrite on flush
        self._mm: mmap.mmap | None = None
        self.private = private  # a read-only open's copy-on-write view
        try:
            if private:
                self._mm = map_private(path, self.file_size, create=_create, what="index file")
            else:
                fd = open_sized_file(path, self.file_size, create=_create, what="index file",
                                     sparse=True)
        except CorruptFileError as exc:
            raise CorruptFileError(path, f"{exc.reason} (40 + {hash_slot_num} slots * 4 + "
                                         f"{index_num} entries * 20)") from exc
        # sparse on disk (RocketMQ's own index files are): blocks are allocated before each
        # write — the header page now, slot pages and the entry list as they are used
        self._alloc: PageAllocator | None = None
        if not private:
            try:
                self._mm = mmap.mmap(fd, self.file_size)
                self._alloc = PageAllocator(fd, path, self.file_size, "index file")
                self._alloc.ensure(0, INDEX_HEADER_SIZE)
            except BaseException:
                if self._alloc is not None:
                    self._alloc.close()
                else:
                    os.close(fd)
                if _create:  # leave no half-made file behind: a retry creates it again
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                raise
        self._slots = np.ndarray((hash_slot_num,), dtype=">i4", buffer=self._mm, offset=INDEX_HEADER_SIZE)
        self._entries = np.ndarray((index_num,), dtype=ENTRY_DTYPE, buffer=self._mm,
                                   offset=entry_position(hash_slot_num, 0))
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, index_count) = INDEX_HEADER.unpack_from(self._mm, 0)
        self.index_count = index_count if index_count > 0 else 1
        if self.index_count > index_num:
            self.close()
            raise CorruptFileError(path, f"indexCount {index_count} exceeds max_index_num {index_num}")
        if carry_end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = carry_end_phy_offset
            I64.pack_into(self._mm, BEGIN_PHY_OFFSET_POS, carry_end_phy_offset)
            I64.pack_into(self._mm, END_PHY_OFFSET_POS, carry_end_phy_offset)
        if carry_end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = carry_end_timestamp
            I64.pack_into(self._mm, BEGIN_TIMESTAMP_POS, carry_end_timestamp)
            I64.pack_into(self._mm, END_TIMESTAMP_POS, carry_end_timestamp)
        self.dirty = _create

    @classmethod
    def create(cls, path: str, hash_slot_num: int, index_num: int, end_phy_offset: int = 0,
               end_timestamp: int = 0, *, private: bool = False) -> "IndexFile":
        """A new zero-filled file, allocated on disk (``DiskFullError`` when there is no room);
        a roll-over passes the previous file's end values."""
        return cls(path, hash_slot_num, index_num, _create=True,
                   carry_end_phy_offset=end_phy_offset, carry_end_timestamp=end_timestamp,
                   private=private)

    @classmethod
    def open(cls, path: str, hash_slot_num: int, index_num: int, *, private: bool = False) -> "IndexFile":
        return cls(path, hash_slot_num, index_num, private=private)

    # -- state --------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.index_num - 1

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    @property
    def free(self) -> int:
        return self.index_num - self.index_count

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        return is_time_matched(self.begin_timestamp, self.end_timestamp, begin, end)

    def used_slots(self) -> int:
        return int(np.count_nonzero(self._slots))

    def slot_value(self, slot: int) -> int:
        return SLOT.unpack_from(self._mm, slot_position(slot))[0]

    def entry(self, index: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevIndex) of entry ``index``."""
        return INDEX_ENTRY.unpack_from(self._mm, entry_position(self.hash_slot_num, index))

    # -- writing ------------------------------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        return self.put_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """``IndexFile.putKey`` for an already hashed key; False when the file is full."""
        count = self.index_count
        if count >= self.index_num:
            return False
        spos = slot_position(key_hash % self.hash_slot_num)
        slot_value = SLOT.unpack_from(self._mm, spos)[0]
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
        diff = time_diff_seconds(store_timestamp, self.begin_timestamp)
        if self._alloc is not None:
            epos = entry_position(self.hash_slot_num, count)
            self._alloc.ensure(epos, epos + INDEX_ENTRY.size, ENTRY_AHEAD)
            self._alloc.ensure(spos, spos + SLOT.size)
        INDEX_ENTRY.pack_into(self._mm, entry_position(self.hash_slot_num, count), key_hash,
                              phy_offset, diff, slot_value)
        SLOT.pack_into(self._mm, spos, count)
        with self._hdr_lock:
            if count <= 1:
                self._set_begin(phy_offset, store_timestamp)
            if slot_value == 0:
                self.hash_slot_count += 1
                _I32.pack_into(self._mm, HASH_SLOT_COUNT_POS, self.hash_slot_count)
            self.index_count = count + 1
            _I32.pack_into(self._mm, INDEX_COUNT_POS, self.index_count)
            self._set_end(phy_offset, store_timestamp)
            self.dirty = True
        return True

    def put_batch(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """Put keys in order, as many as fit; returns how many went in (same bytes as put_hash)."""
        h = np.asarray(key_hashes, dtype=np.int64)
        n = min(len(h), self.index_num - self.index_count)
        if n <= 0:
            return 0
        h = h[:n]
        if int(h.min()) < 0:
            raise ValueError("index key hashes must be non-negative (use index_key_hash)")
        phy = np.asarray(phy_offsets, dtype=np.int64)[:n]
        ts = np.asarray(store_timestamps, dtype=np.int64)[:n]
        c0 = self.index_count
        slots = h % self.hash_slot_num
        prev, head_slots, head_values, new_slots = plan_chains(slots, self._slots[slots], c0)
        begin = np.full(n, self.begin_timestamp, dtype=np.int64)
        if c0 <= 1:
            begin[1:] = ts[0]
        rec = np.empty(n, dtype=ENTRY_DTYPE)
        rec["key_hash"] = h
        rec["phy_offset"] = phy
        rec["time_diff"] = time_diff_seconds_many(ts, begin)
        rec["prev_index"] = prev
        if self._alloc is not None:
            epos = entry_position(self.hash_slot_num, c0)
            self._alloc.ensure(epos, epos + n * INDEX_ENTRY.size, ENTRY_AHEAD)
            self._alloc.ensure_at(slot_position(0) + head_slots.astype(np.int64) * SLOT.size, SLOT.size)
        self._entries[c0:c0 + n] = rec
        with self._hdr_lock:
            if c0 <= 1:
                self._set_begin(int(phy[0]), int(ts[0]))
            self.hash_slot_count += new_slots
            _I32.pack_into(self._mm, HASH_SLOT_COUNT_POS, self.hash_slot_count)
            self.index_count = c0 + n
            _I32.pack_into(self._mm, INDEX_COUNT_POS, self.index_count)
            self._set_end(int(phy[-1]), int(ts[-1]))
            self.dirty = True
        self._slots[head_slots] = head_values
        return n

    def _set_begin(self, phy_offset: int, timestamp: int) -> None:
        self.begin_phy_offset, self.begin_timestamp = phy_offset, timestamp
        I64.pack_into(self._mm, BEGIN_PHY_OFFSET_POS, phy_offset)
        I64.pack_into(self._mm, BEGIN_TIMESTAMP_POS, timestamp)

    def _set_end(self, phy_offset: int, timestamp: int) -> None:
        self.end_phy_offset, self.end_timestamp = phy_offset, timestamp
        I64.pack_into(self._mm, END_PHY_OFFSET_POS, phy_offset)
        I64.pack_into(self._mm, END_TIMESTAMP_POS, timestamp)

    # -- reading ------------------------------------------------------------------------------
    def _chain(self, key_hash: int) -> Iterator[tuple[int, int, int, int, int]]:
        """(index, keyHash, phyOffset, timeDiff, prevIndex) along the slot's chain, newest first,
        with RocketMQ's link checks (a bad link ends the walk; at most ``indexCount`` steps)."""
        count = self.index_count
        idx = SLOT.unpack_from(self._mm, slot_position(key_hash % self.hash_slot_num))[0]
        if idx <= 0 or idx > count or count <= 1:
            return
        mm, unpack, base = self._mm, INDEX_ENTRY.unpack_from, entry_position(self.hash_slot_num, 0)
        for _ in range(count):
            kh, phy, diff, prev = unpack(mm, base + idx * 20)
            yield idx, kh, phy, diff, prev
            if prev <= 0 or prev > count or prev == idx:
                return
            idx = prev

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """RocketMQ's raw ``selectPhyOffset``: appends hash matches (collisions included)."""
        key_hash = index_key_hash(key)
        base_ts = self.begin_timestamp
        for _, kh, phy, diff, _prev in self._chain(key_hash):
            if len(out) >= max_num or diff < 0:
                return
            t = base_ts + diff * 1000
            if kh == key_hash and begin <= t <= end:
                out.append(phy)
            if t < begin:
                return

    def candidates(self, key_hash: int, begin: int, end: int) -> Iterator[int]:
        """Phy offsets whose hash matches and whose real store time may lie in [begin, end].

        Entry 1's time is the header's beginTimestamp exactly; any other entry's real time is
        in ``[timeRead, timeRead + 999]`` (timeDiff is truncated to seconds).
        """
        base_ts = self.begin_timestamp
        for idx, kh, phy, diff, _prev in self._chain(key_hash):
            if diff < 0:
                return
            lo = base_ts if idx == 1 else base_ts + diff * 1000
            hi = lo if idx == 1 else lo + 999
            if kh == key_hash and lo <= end and hi >= begin:
                yield phy
            if hi < begin:
                return

    # -- lifecycle ----------------------------------------------------------------------------
    def write_header(self) -> None:
        """``IndexHeader.updateByteBuffer``: rewrite all six fields (indexCount at least 1)."""
        INDEX_HEADER.pack_into(self._mm, 0, self.begin_timestamp, self.end_timestamp,
                               self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                               self.index_count)

    def flush(self) -> bool:
        """Rewrite the header and msync; False if the file was closed meanwhile.

        The header rewrite excludes concurrent puts (``_hdr_lock``), so it never puts an older
        value over a newer write-through one; the sync only excludes ``close``."""
        with self._io_lock:
            if self._mm is None:
                return False
            with self._hdr_lock:
                self.dirty = False
                self.write_header()
            if not self.private:
                # fdatasync writes the mapping's dirty pages as msync would (one page cache),
                # but releases the GIL: mmap.flush holds it for the whole sync, stalling every
                # thread of the broker (a put, the reput) while the disk works
                fd = self._alloc.fd if self._alloc is not None else -1
                if fd >= 0:
                    os.fdatasync(fd)
                else:
                    self._mm.flush()
                syncprobe.synced(self.path)
            return True

    def describe(self) -> dict:
        used = self.used_slots()
        return {"name": self.name, "path": self.path, "file_size": self.file_size,
                "begin_timestamp": self.begin_timestamp, "end_timestamp": self.end_timestamp,
                "begin_phy_offset": self.begin_phy_offset, "end_phy_offset": self.end_phy_offset,
                "hash_slot_count": self.hash_slot_count, "index_count": self.index_count,
                "entries": self.entry_count, "capacity": self.capacity,
                "fill": self.entry_count / self.capacity, "hash_slot_num": self.hash_slot_num,
                "used_slots": used, "slot_use": used / self.hash_slot_num,
                "full": self.is_write_full()}

    def close(self) -> None:
        with self._io_lock:
            if self._mm is None:
                return
            self._slots = self._entries = None  # type: ignore[assignment]
            self._mm.close()
            self._mm = None  # type: ignore[assignment]
            if self._alloc is not None:
                self._alloc.close()

    def destroy(self) -> None:
        self.close()
        if self.private:
            return
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (f"IndexFile({self.name}, entries={self.entry_count}/{self.capacity}, "
                f"phy=[{self.begin_phy_offset},{self.end_phy_offset}], "
                f"ts=[{self.begin_timestamp},{self.end_timestamp}])")


__all__ = ["IndexFile", "IndexFilePlan", "plan_chains", "plan_index_files", "index_keys",
           "index_key_hash_columns", "index_key_hashes", "build_key"]
