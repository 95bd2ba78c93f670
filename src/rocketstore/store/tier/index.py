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

from ...format.hashing import java_hash
from ...format.message import decode_message
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


@dataclass
class Item:
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


def build_segment(items: list[Item], slots: int) -> tuple[bytes, int, int]:
    """One sealed INDEX segment of ``items`` (in arrival order); returns (bytes, begin, end)."""
    begin = min(i.store_timestamp for i in items)
    end = max(i.store_timestamp for i in items)
    runs: dict[int, list[Item]] = {}
    for it in items:
        runs.setdefault(it.hash % slots, []).append(it)
    slot_table = bytearray(slots * SLOT)
    body = []
    pos = HEADER + slots * SLOT
    for s in range(slots):
        run = runs.get(s, ())
        _SLOT.pack_into(slot_table, s * SLOT, pos, len(run) * ITEM)
        for it in reversed(run):  # a slot's chain is walked newest first
            body.append(_ITEM.pack(it.hash, it.topic_id, it.queue_id, it.offset, it.size,
                                   (it.store_timestamp - begin) // 1000))
        pos += len(run) * ITEM
    header = _HEADER.pack(END_MAGIC, begin, end, len(runs), len(items))
    return header + bytes(slot_table) + b"".join(body), begin, end


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
        self.pending: list[Item] = []
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
        self.pending = []
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
        pending, segs = list(self.pending), list(self.segs)  # the uploader changes both
        out = [it for it in reversed(pending)
               if it.hash == h and begin <= it.store_timestamp <= end]
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
