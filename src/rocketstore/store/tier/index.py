"""The tier's INDEX flat file: RocketMQ 5.3.3's tiered index (``IndexStoreFile``), so a query by
key finds messages whose local copy is gone.

**Layout of one INDEX segment** (what ``IndexStoreFile.compactToNewFile`` uploads; one segment
per sealed index file, under ``<broker>/rmq_sys_INDEX/0/INDEX/``, named for its byte offset in
that flat file, the first 0):

- a 28-byte header: magic ``0xCCDDEEFF ^ (1880681586 + 8)`` (a sealed file), begin and end
  timestamps (ms, 8 bytes each), the number of used hash slots, the number of items;
- ``tieredStoreIndexFileMaxHashSlotNum`` slots of 8 bytes: the position of the slot's first
  item in this file and the byte length of its run (an empty slot holds the position the
  next run would start at and length 0);
- the items, 28 bytes each, grouped by slot, newest first: hash of ``topic#key``
  (``abs(String.hashCode)``), topic id (the metadata's ``topicId``), queue id, the record's
  offset in the queue's flat COMMIT_LOG, its size, and ``(storeTimestamp - begin) / 1000``.

**Feeding it.** ``TierService`` hands every record it uploads (with its flat offset) to
``TierIndex.add``: its UNIQ_KEY and KEYS become pending items, held in memory. The pending
items are sealed into one segment when they reach ``tieredStoreIndexFileMaxIndexNum`` or the
oldest is ``tieredStoreIndexFileRollingIdleInterval`` ms old (RocketMQ's rolling), and after
the segment is durable ``config/tieredIndexOffset.json`` records, per queue, the flat offset
the INDEX files cover. On open the records past that mark are read back from the tier's own
COMMIT_LOG and indexed again, so a crash loses no key (an item indexed twice is dropped at
query time: one answer per queue offset). A segment shorter than its header says (a killed
upload) is deleted on open; the mark never covered it.

**Query.** Candidates come from the pending items and every segment whose time range meets
the query's; each is read from the flat COMMIT_LOG and kept only if its topic is the one
asked for and its UNIQ_KEY or KEYS hold the key exactly — a hash collision never answers.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...format.batch import decode_records
from ...format.hashing import java_hash, java_hash_many
from ...format.message import KEY_SEPARATOR, decode_message
from ..checkpoint import atomic_write
from . import layout

log = logging.getLogger(__name__)

HEADER = 28
SLOT = 8
ITEM = 28
_HEADER = struct.Struct(">iqqii")
_ITEM = struct.Struct(">iiiqii")
_SLOT = struct.Struct(">ii")


def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


BEGIN_MAGIC = _i32(0xCCDDEEFF ^ (1880681586 + 4))
END_MAGIC = _i32(0xCCDDEEFF ^ (1880681586 + 8))
MAX_READ_ITEMS = 1024  # one slot's run is read up to this many items, as RocketMQ does
WATERMARK_FILE = "tieredIndexOffset.json"
CATCH_UP_CHUNK = 4 << 20  # bytes of flat COMMIT_LOG read at a time when indexing again


def tier_key_hash(topic: str, key: str) -> int:
    """``IndexStoreFile.hashCode(buildKey(topic, key))``: ``abs`` of Java's String.hashCode
    (MIN_VALUE stays negative: RocketMQ cannot index such a key, neither do we)."""
    h = java_hash(f"{topic}#{key}")
    return -h if h < 0 else h


class Item(NamedTuple):
    hash: int
    topic_id: int
    queue_id: int
    offset: int  # in the queue's flat COMMIT_LOG
    size: int
    store_timestamp: int


def message_keys(msg) -> list[str]:
    """The keys RocketMQ's tiered dispatcher indexes: UNIQ_KEY and each of KEYS, once each."""
    out = []
    if msg.uniq_key:
        out.append(msg.uniq_key)
    for k in msg.keys:
        if k.strip() and k not in out:
            out.append(k)
    return out


_ITEM_DTYPE = np.dtype([("hash", ">i4"), ("topic_id", ">i4"), ("queue_id", ">i4"),
                        ("offset", ">i8"), ("size", ">i4"), ("diff", ">i4")])
assert _ITEM_DTYPE.itemsize == ITEM
_SLOT_DTYPE = np.dtype([("pos", ">i4"), ("len", ">i4")])
_PENDING_DTYPE = np.dtype([("hash", "<i8"), ("topic_id", "<i4"), ("queue_id", "<i4"),
                           ("offset", "<i8"), ("size", "<i4"), ("store_timestamp", "<i8")])


class PendingItems:
    """The items not sealed yet, in arrival order, as columns (chunks of a structured array:
    a batch of keys costs one array, not an object per key)."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def append(self, it: Item) -> None:
        self.extend(np.array([tuple(it)], dtype=_PENDING_DTYPE))

    def extend(self, chunk: np.ndarray) -> None:
        if len(chunk):
            self._chunks.append(chunk)
            self._n += len(chunk)

    def array(self) -> np.ndarray:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, dtype=_PENDING_DTYPE)

    def __iter__(self):
        return (Item(*row) for row in self.array().tolist())

    def snapshot(self) -> np.ndarray:
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=_PENDING_DTYPE)


def build_segment(items, slots: int) -> tuple[bytes, int, int]:
    """One sealed INDEX segment of ``items`` (``PendingItems`` or a list of ``Item``, in arrival
    order); returns (bytes, begin, end). Each slot's run holds its items newest first (a chain
    is walked that way); an empty slot holds the position the next run would start at."""
    a = items.array() if isinstance(items, PendingItems) else \
        np.array([tuple(i) for i in items], dtype=_PENDING_DTYPE)
    n = len(a)
    ts = a["store_timestamp"]
    begin, end = int(ts.min()), int(ts.max())
    slot = a["hash"] % slots
    order = np.lexsort((-np.arange(n), slot))  # by slot, newest first within one
    counts = np.bincount(slot, minlength=slots)
    table = np.empty(slots, dtype=_SLOT_DTYPE)
    table["pos"] = HEADER + slots * SLOT + ITEM * (np.cumsum(counts) - counts)
    table["len"] = counts * ITEM
    body = np.empty(n, dtype=_ITEM_DTYPE)
    s = a[order]
    body["hash"], body["topic_id"], body["queue_id"] = s["hash"], s["topic_id"], s["queue_id"]
    body["offset"], body["size"] = s["offset"], s["size"]
    body["diff"] = (s["store_timestamp"] - begin) // 1000
    header = _HEADER.pack(END_MAGIC, begin, end, int(np.count_nonzero(counts)), n)
    return header + table.tobytes() + body.tobytes(), begin, end


@dataclass
class IndexSeg:
    base: int
    size: int
    begin: int
    end: int
    slots: int


class TierIndex:
    """The INDEX flat file of one broker's tier (see the module doc)."""

    def __init__(self, backend, cluster: str, broker: str, store_root: str, tcfg) -> None:
        self.backend = backend
        self.cluster = cluster
        self.queue = layout.queue_path(broker, layout.INDEX_TOPIC, 0)
        self.slots = tcfg.index_max_hash_slot_num
        self.max_items = tcfg.index_max_index_num
        self.rolling_ms = tcfg.index_rolling_idle_interval
        self.mark_path = os.path.join(store_root, "config", WATERMARK_FILE)
        self.segs: list[IndexSeg] = []
        self.pending = PendingItems()
        self.pending_since = 0.0
        self.pending_marks: dict[str, int] = {}  # queue path -> flat offset indexed (pending)
        self.marks: dict[str, int] = {}  # queue path -> flat offset the segments cover

    def key(self, base: int) -> str:
        return layout.segment_key(self.cluster, self.queue, layout.INDEX, base)

    # -- open ---------------------------------------------------------------------------------
    def load(self) -> None:
        try:
            with open(self.mark_path, encoding="utf-8") as fh:
                self.marks = {k: int(v) for k, v in json.load(fh).items()}
        except (OSError, ValueError):
            self.marks = {}
        prefix = f"{layout.cluster_dir(self.cluster)}/{self.queue}/{layout.INDEX}"
        segs = []
        for key, size in self.backend.list(prefix):
            base = layout.parse_file_name(key.rsplit("/", 1)[-1])
            if base is None:
                continue
            head = self.backend.read(key, 0, HEADER)
            if len(head) < HEADER:
                log.warning("tier INDEX %s: a torn segment of %d bytes, deleted", key, size)
                self.backend.delete(key)
                continue
            magic, begin, end, _used, count = _HEADER.unpack(head)
            slots = (size - HEADER - count * ITEM) // SLOT
            if magic != END_MAGIC or slots <= 0 or HEADER + slots * SLOT + count * ITEM != size:
                log.warning("tier INDEX %s: %d bytes do not match its header, deleted", key, size)
                self.backend.delete(key)
                continue
            segs.append(IndexSeg(base, size, begin, end, slots))
        self.segs = sorted(segs, key=lambda s: s.base)
        self.pending_marks = dict(self.marks)

    def catch_up(self, fq, topic_id: int) -> int:
        """Index what the queue's flat COMMIT_LOG holds past the mark: after a crash, after an
        upload whose answer was lost, or for a tier written before the index existed. Returns
        the records read."""
        at = max(self.pending_marks.get(fq.path, 0),
                 fq.commitlog.min_offset if fq.commitlog.segs else 0)
        end = fq.commitlog.end
        n = 0
        while 0 <= at < end:  # in chunks: one read serves many records (S3: one GET)
            chunk = fq.commitlog.read(at, min(CATCH_UP_CHUNK, end - at))
            pos, batch = 0, []
            while pos + 4 <= len(chunk):
                size = int.from_bytes(chunk[pos:pos + 4], "big", signed=True)
                if size <= 0 or pos + size > len(chunk):
                    break
                batch.append((at + pos, chunk[pos:pos + size]))
                pos += size
            if not batch:
                if len(chunk) >= 4 and 0 < int.from_bytes(chunk[:4], "big", signed=True) <= end - at:
                    rec = fq.commitlog.read(at, int.from_bytes(chunk[:4], "big"))  # a big one
                    if rec and len(rec) == int.from_bytes(chunk[:4], "big"):
                        batch = [(at, rec)]
                        pos = len(rec)
                if not batch:
                    break
            self.add(fq, topic_id, batch)
            at += pos
            n += len(batch)
        self.pending_marks[fq.path] = max(self.pending_marks.get(fq.path, 0), at)
        return n

    # -- write --------------------------------------------------------------------------------
    def add(self, fq, topic_id: int, records: list[tuple[int, bytes]]) -> None:
        """Index records just written to ``fq``'s flat COMMIT_LOG at the given offsets."""
        for off, rec in records:
            msg = decode_message(rec, 0)
            if msg is None:
                continue
            for k in message_keys(msg):
                h = tier_key_hash(fq.topic, k)
                if h < 0:
                    continue
                if not self.pending:
                    self.pending_since = time.monotonic()
                self.pending.append(Item(h, topic_id, fq.queue_id, off, len(rec),
                                         msg.store_timestamp))
            self.pending_marks[fq.path] = off + len(rec)

    def add_written(self, fq, topic_id: int, written) -> None:
        """``add`` per batch: the records ``FlatQueue.append`` just wrote (one contiguous run,
        ``flat.Written``) decoded as columns at once and their keys hashed at once; the same
        keys, in the same order, as ``add`` gives record by record."""
        if not len(written):
            return
        recs = decode_records(written.blob, base_offset=written.base)
        n = len(recs.pos)
        if n < len(written):  # a record the columns cannot read: the record-by-record way
            self.add(fq, topic_id, written.records())
            return
        keys: list[str] = []
        owner: list[int] = []
        for i, (u, k) in enumerate(zip(recs.uniq_keys(), recs.keys())):
            ks = [u] if u else []
            if k:
                for piece in k.split(KEY_SEPARATOR):
                    if piece and piece.strip() and piece not in ks:
                        ks.append(piece)
            keys += ks
            owner += [i] * len(ks)
        if keys:
            prefix = fq.topic + "#"
            h = java_hash_many([prefix + k for k in keys]).astype(np.int64)
            keep = h != -0x80000000  # ``tier_key_hash``: RocketMQ cannot index it, nor do we
            own = np.asarray(owner, dtype=np.int64)[keep]
            chunk = np.empty(int(keep.sum()), dtype=_PENDING_DTYPE)
            chunk["hash"] = np.abs(h[keep])
            chunk["topic_id"], chunk["queue_id"] = topic_id, fq.queue_id
            chunk["offset"] = written.offsets[own]
            chunk["size"] = recs.size[own]
            chunk["store_timestamp"] = recs.store_timestamp[own]
            if not self.pending:
                self.pending_since = time.monotonic()
            self.pending.extend(chunk)
        self.pending_marks[fq.path] = written.base + len(written.blob)

    def due(self) -> bool:
        if not self.pending:
            return False
        return len(self.pending) >= self.max_items - 1 or \
            (time.monotonic() - self.pending_since) * 1000 >= self.rolling_ms

    def seal(self) -> IndexSeg | None:
        """Upload the pending items as one segment, then move the marks past them."""
        if not self.pending:
            self._save_marks()
            return None
        data, begin, end = build_segment(self.pending, self.slots)
        base = self.segs[-1].base + self.segs[-1].size if self.segs else 0
        self.backend.append(self.key(base), 0, data)
        seg = IndexSeg(base, len(data), begin, end, self.slots)
        self.segs.append(seg)
        self.pending = PendingItems()
        self._save_marks()
        return seg

    def _save_marks(self) -> None:
        if self.pending_marks == self.marks:
            return
        self.marks = dict(self.pending_marks)
        os.makedirs(os.path.dirname(self.mark_path), exist_ok=True)
        atomic_write(self.mark_path, json.dumps(self.marks, sort_keys=True).encode(), point=None)

    def expire(self, before_ms: int) -> int:
        """Delete the segments whose newest item is older than ``before_ms``."""
        n = 0
        while self.segs and self.segs[0].end < before_ms:
            self.backend.delete(self.key(self.segs.pop(0).base))
            n += 1
        return n

    # -- read ---------------------------------------------------------------------------------
    def candidates(self, topic: str, key: str, begin: int, end: int) -> list[Item]:
        h = tier_key_hash(topic, key)
        if h < 0:
            return []
        pending, segs = self.pending.snapshot(), list(self.segs)  # the uploader changes both
        ts = pending["store_timestamp"]
        hit = pending[(pending["hash"] == h) & (ts >= begin) & (ts <= end)]
        out = [Item(*row) for row in reversed(hit.tolist())]
        for seg in reversed(segs):
            if seg.end < begin or seg.begin > end:
                continue
            k = self.key(seg.base)
            slot = self.backend.read(k, HEADER + (h % seg.slots) * SLOT, SLOT)
            if len(slot) < SLOT:
                continue  # deleted by retention meanwhile
            pos, length = _SLOT.unpack(slot)
            length = min(length, ITEM * MAX_READ_ITEMS)
            if pos <= 0 or length <= 0:
                continue
            raw = self.backend.read(k, pos, length)
            for i in range(0, len(raw) - ITEM + 1, ITEM):
                ih, tid, qid, off, size, diff = _ITEM.unpack_from(raw, i)
                ts = seg.begin + diff * 1000
                if ih == h and begin <= ts <= end:
                    out.append(Item(ih, tid, qid, off, size, ts))
        return out

    def segment_infos(self) -> list[layout.SegmentInfo]:
        return [layout.SegmentInfo(self.queue, layout.INDEX, s.base, s.size, s.begin, s.end,
                                   s.begin, sealed=True) for s in self.segs]
