"""The CommitLog: every message, appended to mapped segments under one lock.

Theory of operation. ``append`` takes pre-encoded records (``format.message.encode_message``)
and, inside the put lock, assigns each its queue offset (per ``(topic, queue_id)`` counter;
prepared and rollback transaction records get 0 and do not advance it), its physical offset
and the store timestamp, patches those three fields and copies the bytes into the last segment.
A record (or a whole batch) that does not leave 8 bytes free in the segment is not split: the
segment gets an 8-byte blank record ``[remaining][BLANK_MAGIC]`` and the records go to the next
segment. Readers find records by physical offset; ``scan_valid_end`` walks segments with the
batch decoder (CRC checked) to find where valid data ends, for recovery.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from operator import attrgetter
from typing import Iterator, NamedTuple, Sequence

from .. import _native
from ..config import StoreConfig
from ..errors import CorruptRecordError
from ..format import batch as fbatch
from ..format.batch import tags_code_of
from ..format.record import SYSFLAG_POS, store_timestamp_pos
from ..format.message import (BLANK, END_FILE_MIN_BLANK_LENGTH, TRANSACTION_MASK,
                              TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE,
                              EncodedMessage, MessageExt, decode_message, encode_blank,
                              patch_record, read_header)
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue


@dataclass(slots=True)
class AppendResult:
    wrote_offset: int
    sizes: list[int]
    queue_offsets: list[int]
    store_timestamp: int

    @property
    def wrote_bytes(self) -> int:
        return sum(self.sizes)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


class FeedItem(NamedTuple):
    """One append as the CommitLog's writer describes it to the reput (no decoding needed)."""

    start: int
    end: int
    commitlog_offset: list[int]
    size: list[int]
    queue_id: list[int]
    queue_offset: list[int]
    sys_flag: list[int]
    store_timestamp: list[int]
    tags_code: list[int]
    topic: list[str]
    properties: list[dict[str, str]]

    def columns(self) -> tuple[list, ...]:
        """In ``DecodedRecords.from_dispatch_columns`` order (the fields after start, end)."""
        return self[2:]


_DATA_OF = attrgetter("data")
DISPATCH_FEED_CAP = 100_000  # appends held for the reput; beyond it the reput decodes


class RecordTooLarge(ValueError):
    """A record or batch larger than a segment can hold."""


class CommitLog:
    def __init__(self, cfg: StoreConfig, *, readonly: bool = False) -> None:
        self.cfg = cfg
        self.file_size = cfg.mapped_file_size_commitlog
        self.queue = MappedFileQueue(cfg.commitlog_dir, self.file_size, readonly=readonly,
                                     private=cfg.read_only, durable_create=True,
                                     crash_point="commitlog-roll", sparse=True)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()
        # records appended by this process, for the reput (see ``ReputService``); None: off
        self.dispatch_feed: collections.deque | None = None
        self.delay_levels_ms = fbatch.parse_delay_levels(cfg.message_delay_level)
        self._last_ts = 0

    def load(self) -> None:
        self.queue.load()

    # -- write ------------------------------------------------------------------------------------
    def append(self, records: Sequence[EncodedMessage], *,
               nowait: bool = False) -> AppendResult | None:
        """Append one record or one batch atomically (same segment, consecutive offsets).

        Raises ``RecordTooLarge`` if it can never fit and ``DiskFullError``/``StoreError`` when a
        new segment cannot be created; nothing is written in either case. With ``nowait`` it
        returns None instead of waiting: when the lock is held (a putter, the flush thread's
        snapshot) or the records need a new segment (creating one means file I/O), so an event
        loop can append in place and hand only those rare cases to a thread.
        """
        total = sum(map(len, map(_DATA_OF, records)))
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise RecordTooLarge(f"{total} bytes do not fit in a {self.file_size}-byte segment")
        if not nowait:
            with self.lock:
                return self._append_locked(records, total)
        if not self.lock.acquire(blocking=False):
            return None
        try:
            mf = self.queue.last()
            if mf is None or total + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
                return None
            return self._append_locked(records, total)
        finally:
            self.lock.release()

    def _append_locked(self, records: Sequence[EncodedMessage], total: int) -> AppendResult:
        now = int(time.time() * 1000)
        if now < self._last_ts:
            now = self._last_ts  # store time never goes backwards within a process
        self._last_ts = now
        mf = self.queue.get_last_mapped_file(0)
        assert mf is not None
        if total + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            if mf.remaining >= END_FILE_MIN_BLANK_LENGTH:
                mf.ensure_allocated(mf.wrote_position + END_FILE_MIN_BLANK_LENGTH)
                encode_blank(mf.mm, mf.wrote_position, mf.remaining)
            mf.wrote_position = self.file_size
            mf = self.queue.get_last_mapped_file(0)
            assert mf is not None
        start_pos = mf.wrote_position
        if start_pos + total > mf.allocated:  # disk blocks first: a full disk fails here, cleanly
            mf.ensure_allocated(start_pos + total)
        queue_offsets, sizes = write_records(mf.mm, start_pos, mf.file_from_offset + start_pos,
                                             records, self.topic_queue_table, now)
        pos = start_pos + total
        mf.store_timestamp = now
        mf.wrote_position = pos
        first = mf.file_from_offset + start_pos
        feed = self.dispatch_feed
        if feed is not None and len(feed) < DISPATCH_FEED_CAP:
            feed.append(self._feed_item(records, first, sizes, queue_offsets, now))
        return AppendResult(first, sizes, queue_offsets, now)

    def _feed_item(self, records: Sequence[EncodedMessage], first: int, sizes: list[int],
                   queue_offsets: list[int], now: int) -> FeedItem:
        """What the reput needs about records just appended, so it need not decode them."""
        return feed_item(records, first, sizes, queue_offsets, now, self.delay_levels_ms)

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self.topic_queue_table.get((topic, queue_id), 0)

    # -- read -------------------------------------------------------------------------------------
    def min_offset(self) -> int:
        first = self.queue.first()
        return first.file_from_offset if first is not None else 0

    def max_offset(self) -> int:
        return self.queue.max_offset()

    def flushed_offset(self) -> int:
        return self.queue.flushed_where()

    def segment_at(self, offset: int) -> MappedFile | None:
        return self.queue.find(offset)

    def _locate(self, offset: int) -> tuple[MappedFile, int, int] | None:
        """(segment, position, write position) when at least a record header lies at ``offset``."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        wrote = mf.wrote_position
        return None if pos + 8 > wrote else (mf, pos, wrote)

    def read_record(self, offset: int) -> bytes | None:
        """The raw record at ``offset``, or None if no whole record is there."""
        loc = self._locate(offset)
        if loc is None:
            return None
        mf, pos, wrote = loc
        size, magic = read_header(mf.mm, pos)
        if size <= 8 or pos + size > wrote or magic == fbatch.BLANK_MAGIC_CODE:
            return None
        return mf.mm[pos:pos + size]

    def records_at(self, offsets: Sequence[int]) -> list[memoryview | None]:
        """The whole record starting at each offset, as a zero-copy view of its segment (its
        size read from its header); None where no whole record starts there (out of range,
        past the write position, a blank or a size that does not fit). Nothing is decoded."""
        return self._record_views(offsets, None)

    def read_record_views(self, offsets: list[int], sizes: list[int]) -> list[memoryview | None]:
        """``read_record`` for many (offset, expected size) pairs, as zero-copy views of the
        segments; None where no whole record of that size is there. Consecutive offsets in one
        segment (a queue's records) share one segment lookup."""
        return self._record_views(offsets, sizes)

    def _record_views(self, offsets: Sequence[int], sizes: Sequence[int] | None
                      ) -> list[memoryview | None]:
        out: list[memoryview | None] = []
        mf = None
        lo = hi = 0
        mv = None
        blank = fbatch.BLANK_MAGIC_CODE
        for k, off in enumerate(offsets):
            if mf is None or not lo <= off < hi:
                mf = self.queue.find(off)
                if mf is None:
                    out.append(None)
                    continue
                lo, hi = mf.file_from_offset, mf.file_from_offset + self.file_size
                mv = memoryview(mf.mm)
            pos = off - lo
            wrote = mf.wrote_position
            want = 0 if sizes is None else sizes[k]  # 0: whatever size the header says
            if pos + max(want, 9) > wrote or 0 < want <= 8:
                out.append(None)
                continue
            size, magic = read_header(mf.mm, pos)
            fits = 8 < size and pos + size <= wrote and want in (0, size)
            out.append(mv[pos:pos + size] if fits and magic != blank else None)
        return out

    def look_message(self, offset: int, *, with_body: bool = True) -> MessageExt | None:
        """Decode the record at ``offset``; None if out of range, blank or not a record."""
        loc = self._locate(offset)
        if loc is None:
            return None
        mf, pos, wrote = loc
        try:
            msg = decode_message(mf.view(0, wrote), pos, with_body=with_body)
        except CorruptRecordError:
            return None
        return None if msg is BLANK else msg  # type: ignore[return-value]

    def store_timestamp_at(self, offset: int, size: int) -> int:
        """Store timestamp of the record at ``offset`` (-1 when unreadable)."""
        mf = self.queue.find(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + size > mf.wrote_position or size < fbatch.MIN_RECORD_SIZE:
            return -1
        sys_flag = int.from_bytes(mf.mm[pos + SYSFLAG_POS:pos + SYSFLAG_POS + 4], "big", signed=True)
        p = pos + store_timestamp_pos(sys_flag)
        return int.from_bytes(mf.mm[p:p + 8], "big", signed=True)

    def iter_segments(self, start: int, end: int) -> Iterator[tuple[MappedFile, int, int]]:
        """(segment, start position, end position) covering ``[start, end)``."""
        off = start
        while off < end:
            mf = self.queue.find(off)
            if mf is None:
                return
            pos = off - mf.file_from_offset
            stop = min(mf.wrote_position, end - mf.file_from_offset)
            if stop <= pos:
                return
            yield mf, pos, stop
            off = mf.file_from_offset + self.file_size

    # -- replication (store/ha) ------------------------------------------------------------------
    def get_data(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` written bytes from ``offset`` to the write position of the one
        segment holding it (RocketMQ's ``getData``: a slice never crosses a segment); None when
        no segment holds ``offset`` or nothing is written there yet."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = min(mf.wrote_position, pos + max_bytes)
        if end <= pos:
            return None
        return mf.mm[pos:end]

    def append_data(self, offset: int, data: bytes | memoryview) -> bool:
        """A slave's append of bytes its master sent for CommitLog ``offset`` (RocketMQ's
        ``appendData``): copied as they are, no parsing, so the segments stay byte-identical
        to the master's. False (nothing written) when ``offset`` is not where this CommitLog
        ends or the bytes would cross a segment end. An empty ``data`` may create the next
        segment, as RocketMQ's does."""
        n = len(data)
        with self.lock:
            mf = self.queue.last()
            if mf is not None and self.queue.max_offset() == 0 and offset >= self.file_size:
                self.queue.destroy_all()  # an empty store joining at a later segment
                mf = None
            if mf is None:
                mf = self.queue.get_last_mapped_file(offset)
                assert mf is not None
                mf.set_positions(offset - mf.file_from_offset)  # a first frame inside a segment
            elif mf.is_full():
                if offset != mf.file_from_offset + self.file_size:
                    return False
                mf = self.queue.get_last_mapped_file(0)
                assert mf is not None
            pos = mf.wrote_position
            if mf.file_from_offset + pos != offset or pos + n > self.file_size:
                return False
            if n:
                mf.ensure_allocated(pos + n)
                mf.mm[pos:pos + n] = data
                mf.wrote_position = pos + n
            return True

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # -- recovery helpers -------------------------------------------------------------------------
    def scan_valid_end(self, start_index: int, check_crc: bool) -> tuple[int, str, str]:
        """Walk segments from ``start_index``: (offset where valid data ends, stop kind, reason)."""
        files = self.queue.files
        if not files:
            return 0, fbatch.STOP_END, ""
        off = files[start_index].file_from_offset
        for mf in files[start_index:]:
            chunk = 64 << 20
            pos = 0
            while True:
                end = min(self.file_size, pos + chunk)
                recs = fbatch.decode_records(mf.mm, pos, end, base_offset=mf.file_from_offset,
                                             check_crc=check_crc)
                pos = recs.end
                if recs.stop == fbatch.STOP_INCOMPLETE and end < self.file_size and len(recs):
                    continue  # record straddles our chunk boundary, not the data end
                break
            if recs.stop == fbatch.STOP_BLANK:
                off = mf.file_from_offset + self.file_size
                continue
            return mf.file_from_offset + pos, recs.stop, recs.stop_reason
        return off, fbatch.STOP_END, ""

    def first_record_timestamp(self, mf: MappedFile) -> int:
        """Store time of a segment's first record, or 0 if it does not start with a message."""
        _size, magic = read_header(mf.mm, 0)  # isMappedFileMatchedRecover reads the field as is
        if magic not in (fbatch.MESSAGE_MAGIC_CODE, fbatch.MESSAGE_MAGIC_CODE_V2):
            return 0
        sys_flag = int.from_bytes(mf.mm[SYSFLAG_POS:SYSFLAG_POS + 4], "big", signed=True)
        p = store_timestamp_pos(sys_flag)
        return int.from_bytes(mf.mm[p:p + 8], "big", signed=True)

    def truncate(self, offset: int) -> None:
        self.queue.truncate_dirty(offset)

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    def last_store_timestamp(self) -> int:
        last = self.queue.last()
        return last.store_timestamp if last is not None else 0

    def close(self) -> None:
        self.queue.close()


def write_records(mm, pos: int, phys: int, records: Sequence[EncodedMessage],
                  table: dict[tuple[str, int], int], now: int) -> tuple[list[int], list[int]]:
    """Copy ``records`` into ``mm`` from ``pos`` (CommitLog offset ``phys``), each with its queue
    offset (from ``table``, advanced; prepared and rollback transaction records get 0), physical
    offset and store time ``now``: (queue offsets, sizes). The caller checked that they fit.

    Crash safety: everything but the first record's TOTALSIZE+MAGIC goes in first and is
    patched; those 8 bytes are written last, so a process killed mid-append leaves zeros at
    ``pos`` (the end of valid data), never a whole-looking record with unpatched offsets.
    """
    data = records[0].data if len(records) == 1 else b"".join([r.data for r in records])
    total = len(data)
    head = bytes(data[:8])
    mm[pos + 8:pos + total] = memoryview(data)[8:]
    queue_offsets = []
    sizes = []
    for rec in records:
        tran = rec.sys_flag & TRANSACTION_MASK
        if tran == TRANSACTION_PREPARED_TYPE or tran == TRANSACTION_ROLLBACK_TYPE:
            qo = 0
        else:
            key = (rec.topic, rec.queue_id)
            qo = table.get(key, 0)
            table[key] = qo + 1
        n = len(rec.data)
        patch_record(mm, pos, rec.store_ts_pos, qo, phys, now)
        queue_offsets.append(qo)
        sizes.append(n)
        pos += n
        phys += n
    mm[pos - total:pos - total + 8] = head
    return queue_offsets, sizes


def feed_item(records: Sequence[EncodedMessage], first: int, sizes: list[int],
              queue_offsets: list[int], now: int, delays: Sequence[int]) -> FeedItem:
    """The reput's columns of records appended at ``first`` with ``sizes`` and ``now``."""
    offsets = []
    off = first
    for n in sizes:
        offsets.append(off)
        off += n
    return FeedItem(first, off, offsets, sizes, [r.queue_id for r in records], queue_offsets,
                    [r.sys_flag for r in records], [now] * len(records),
                    [tags_code_of(r.topic, r.properties, now, delays) for r in records],
                    [r.topic for r in records], [r.properties for r in records])


# the specifications of the compiled twins
write_records_py = write_records
feed_item_py = feed_item

_speedups = _native.load("rocketstore.store._speedups")
if _speedups is not None:
    write_records = _speedups.write_records  # noqa: F811
    feed_item = _speedups.feed_item  # noqa: F811
