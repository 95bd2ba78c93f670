"""ConsumeQueue extension files (RocketMQ's ``ConsumeQueueExt``) and their dispatcher.

Theory of operation. With ``enable_consume_queue_ext`` the dispatcher below runs just before the
ConsumeQueue dispatcher: for every record that gets a ConsumeQueue unit it appends an ext unit
``(tagsCode, storeTime, bitmap)`` to the queue's ext file and replaces the record's tagsCode
column with the unit's address, which the ConsumeQueue writer then stores in the unit's
tags-code slot — the same order as RocketMQ's ``putMessagePositionInfoWrapper``. The bitmap comes
from ``bitmap_source`` (the broker's SQL92 filter registry, RocketMQ's
``CommitLogDispatcherCalcBitMap``); without one, units carry no bitmap (20 bytes), as RocketMQ
writes them when ``enableCalcFilterBitMap`` is off. Records the ConsumeQueue already holds
(a re-dispatch after recovery) get no second unit.

Readers resolve an address with :meth:`ConsumeQueueExt.get`; a store with ext files is read
correctly even when the setting is off (RocketMQ would take the addresses for tag hashes).
Recovery finds the end of the last ext file (the first unit whose size is not positive) and cuts
what follows the unit the ConsumeQueue's last unit points at.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Sequence

import numpy as np

from ..format import cq_ext
from ..format.cq_ext import ExtUnit, decode_unit, decorate, encode_unit, is_ext_addr, undecorate
from ..format.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from .consume_queue import queue_dirs
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

EXT_DIR = "consumequeue_ext"
# (topics, properties getter, store timestamps) -> one bitmap (or None) per record
BitmapSource = Callable[[Sequence[str], Callable[[int], dict], Sequence[int]], list]


def ext_root(root_dir: str) -> str:
    return os.path.join(root_dir, EXT_DIR)


class ConsumeQueueExt:
    """The ext stream of one (topic, queue id)."""

    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int, *,
                 private: bool = False) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, private=private)
        self.lock = threading.Lock()

    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Position the write point after the last unit of the last file."""
        mf = self.queue.last()
        if mf is None:
            return
        pos, mm, limit = 0, mf.mm, self.file_size
        while pos + 2 <= limit:
            size = int.from_bytes(mm[pos:pos + 2], "big", signed=True)
            if size <= 0:
                break
            pos += size
        self.queue.truncate_dirty(mf.file_from_offset + min(pos, limit))

    def truncate_by_max_address(self, address: int) -> None:
        """Drop every unit after the one at ``address`` (the ConsumeQueue's last)."""
        unit = self.get(address)
        if unit is not None:
            self.queue.truncate_dirty(undecorate(address) + unit.size)

    def truncate_by_min_address(self, address: int) -> int:
        """Delete the files wholly below the unit at ``address`` (the ConsumeQueue's first);
        returns how many (RocketMQ's ``truncateByMinAddress``)."""
        if not is_ext_addr(address):
            return 0
        real = undecorate(address)
        n = sum(1 for mf in self.queue.files[:-1] if mf.file_from_offset + self.file_size < real)
        if n:
            self.queue.delete_first_files(n)
        return n

    # -- write ------------------------------------------------------------------------------------
    def put_many(self, units: Sequence[bytes]) -> list[int]:
        """Append encoded units; their addresses (1 for a unit that cannot be stored)."""
        out: list[int] = []
        with self.lock:
            run: list[bytes] = []
            pending = 0  # bytes in ``run``, not yet copied to ``mf``
            mf = None
            limit = cq_ext.MAX_REAL_OFFSET - self.queue.max_offset()
            for data in units:
                size = len(data)
                if size > cq_ext.MAX_EXT_UNIT_SIZE or size > limit:
                    out.append(1)
                    continue
                if mf is None or mf.is_full():
                    self._flush_run(mf, run)
                    run, pending = [], 0
                    mf = self.queue.get_last_mapped_file(0)
                if size > self.file_size - (mf.wrote_position + pending) - cq_ext.END_BLANK_DATA_LENGTH:
                    self._flush_run(mf, run)
                    run, pending = [], 0
                    mf.mm[mf.wrote_position:mf.wrote_position + 2] = cq_ext.END_MARK
                    mf.wrote_position = self.file_size
                    mf = self.queue.get_last_mapped_file(0)
                out.append(decorate(mf.file_from_offset + mf.wrote_position + pending))
                run.append(data)
                pending += size
                limit -= size
            self._flush_run(mf, run)
        return out

    @staticmethod
    def _flush_run(mf, run: list[bytes]) -> None:
        if mf is not None and run:
            mf.append(b"".join(run))

    # -- read -------------------------------------------------------------------------------------
    def get(self, address: int) -> ExtUnit | None:
        if not is_ext_addr(address):
            return None
        real = undecorate(address)
        mf = self.queue.find(real, real == 0)
        if mf is None:
            return None
        pos = real % self.file_size
        if pos >= mf.wrote_position:
            return None
        return decode_unit(memoryview(mf.mm)[:mf.wrote_position], pos)

    def min_address(self) -> int:
        first = self.queue.first()
        return decorate(first.file_from_offset if first else 0)

    def max_address(self) -> int:
        return decorate(self.queue.max_offset())

    def flush(self, least_pages: int = 0) -> None:
        self.queue.flush(least_pages)

    def close(self) -> None:
        self.queue.close()


class ConsumeQueueExtTable:
    """Every ext stream of a store (``<root>/consumequeue_ext/<topic>/<qid>``)."""

    def __init__(self, root_dir: str, file_size: int = cq_ext.DEFAULT_EXT_FILE_SIZE, *,
                 private: bool = False) -> None:
        self.root = ext_root(root_dir)
        self.file_size = file_size
        self.private = private  # a read-only open: copy-on-write maps, nothing reaches the disk
        self.exts: dict[tuple[str, int], ConsumeQueueExt] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        for topic, qid, path in queue_dirs(self.root):
            ext = ConsumeQueueExt(topic, qid, path, self.file_size, private=self.private)
            ext.load()
            ext.recover()
            self.exts[(topic, qid)] = ext

    def recover(self, cq_table) -> None:
        """Cut each ext stream after the unit its ConsumeQueue's last unit points at."""
        for (topic, qid), ext in self.exts.items():
            cq = cq_table.find(topic, qid)
            if cq is None:
                continue
            max_off = cq.max_offset_in_queue()
            unit = cq.unit(max_off - 1) if max_off > 0 else None
            if unit is not None and is_ext_addr(unit[2]):
                ext.truncate_by_max_address(unit[2])

    def delete_expired(self, cq_table) -> int:
        """After the ConsumeQueues dropped expired files: drop ext files no unit points at."""
        n = 0
        for (topic, qid), ext in list(self.exts.items()):
            cq = cq_table.find(topic, qid)
            if cq is None:
                continue
            unit = cq.unit(cq.min_offset_in_queue())
            if unit is not None:
                n += ext.truncate_by_min_address(unit[2])
        return n

    def find(self, topic: str, queue_id: int) -> ConsumeQueueExt | None:
        return self.exts.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueueExt:
        ext = self.exts.get((topic, queue_id))
        if ext is None:
            with self._lock:
                ext = self.exts.get((topic, queue_id))
                if ext is None:
                    ext = ConsumeQueueExt(topic, queue_id, os.path.join(self.root, topic, str(queue_id)),
                                          self.file_size, private=self.private)
                    self.exts[(topic, queue_id)] = ext
        return ext

    def __iter__(self):
        return iter(list(self.exts.values()))

    def describe(self) -> list[dict]:
        """Per stream: files, bytes used, the first unit's bitmap length (for ``inspect``)."""
        out = []
        for (topic, qid), ext in sorted(self.exts.items()):
            first = ext.queue.first()
            unit = ext.get(decorate(first.file_from_offset)) if first is not None else None
            out.append({"topic": topic, "queue_id": qid, "files": len(ext.queue.files),
                        "bytes": undecorate(ext.max_address()) - undecorate(ext.min_address()),
                        "bitmap_bits": 8 * len(unit.bitmap) if unit and unit.bitmap else 0})
        return out

    def flush(self) -> None:
        for ext in self:
            ext.flush()

    def close(self) -> None:
        for ext in self:
            ext.close()


def ext_units_for(recs, bitmap_source: BitmapSource | None, idx: np.ndarray) -> list[bytes]:
    """Encoded ext units for records ``idx`` of a decoded batch (tagsCode, store time, bitmap)."""
    tags = recs.tags_code[idx].tolist()
    ts = recs.store_timestamp[idx].tolist()
    bitmaps: list = [None] * len(tags)
    if bitmap_source is not None and len(tags):
        topics = [recs.topic[i] for i in idx.tolist()]
        order = idx.tolist()
        bitmaps = bitmap_source(topics, lambda j: recs.properties[order[j]], ts)
    return [encode_unit(t, s, b) for t, s, b in zip(tags, ts, bitmaps)]


def cq_records(recs) -> np.ndarray:
    """Indexes of the records that get a ConsumeQueue unit (not prepared / rolled back)."""
    tran = recs.sys_flag & TRANSACTION_MASK
    return np.flatnonzero((tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE))


class ConsumeQueueExtDispatcher:
    """Appends ext units and swaps the tagsCode column for their addresses (see module doc)."""

    def __init__(self, table: ConsumeQueueExtTable, cq_table,
                 bitmap_source: BitmapSource | None = None) -> None:
        self.table = table
        self.cq_table = cq_table
        self.bitmap_source = bitmap_source

    def dispatch(self, recs) -> None:
        if not len(recs):
            return
        idx = cq_records(recs)
        if not len(idx):
            return
        groups: dict[tuple[str, int], list[int]] = {}
        topics, qids = recs.topic, recs.queue_id.tolist()
        for i in idx.tolist():
            groups.setdefault((topics[i], qids[i]), []).append(i)
        new_tags = recs.tags_code.copy()
        ends = (recs.offsets + recs.size.astype(np.int64))
        for key, members in groups.items():
            sel = np.asarray(members, dtype=np.int64)
            cq = self.cq_table.find(*key)
            if cq is not None:  # a re-dispatch: the queue holds these already
                sel = sel[ends[sel] > cq.max_physic_offset]
            if not len(sel):
                continue
            units = ext_units_for(recs, self.bitmap_source, sel)
            addrs = self.table.find_or_create(*key).put_many(units)
            ok = np.asarray([is_ext_addr(a) for a in addrs], dtype=bool)
            if not ok.all():
                log.warning("ext units of %s/%d not saved: tagsCode kept", key[0], key[1])
            new_tags[sel[ok]] = np.asarray(addrs, dtype=np.int64)[ok]
        recs.tags_code = new_tags


def _existing_file_size(root: str) -> int | None:
    """The size of the ext files already there (they keep the size they were created with):
    the spacing of two file names of a queue, else the largest first file. Never the size of
    one file alone, which may be cut short (then every other file looked misplaced and the
    error named the wrong one)."""
    if not os.path.isdir(root):
        return None
    largest = None
    for _topic, _qid, qdir in queue_dirs(root):
        offs = sorted(int(n) for n in os.listdir(qdir) if len(n) == 20 and n.isdigit())
        if len(offs) >= 2 and offs[1] - offs[0] > 0:
            return offs[1] - offs[0]
        if offs:
            size = os.path.getsize(os.path.join(qdir, f"{offs[0]:020d}"))
            largest = size if largest is None else max(largest, size)
    return largest


def ext_file_size(cfg) -> int:
    """The ext file size of the store at ``cfg``: the existing files', else the configured one."""
    return _existing_file_size(ext_root(cfg.store_path_root_dir)) or \
        getattr(cfg, "mapped_file_size_consume_queue_ext", cq_ext.DEFAULT_EXT_FILE_SIZE)


def open_ext_table(cfg) -> ConsumeQueueExtTable | None:
    """The store's ext streams: written when ``enable_consume_queue_ext``, read whenever present."""
    enabled = bool(getattr(cfg, "enable_consume_queue_ext", False))
    if not enabled and not os.path.isdir(ext_root(cfg.store_path_root_dir)):
        return None
    table = ConsumeQueueExtTable(cfg.store_path_root_dir, ext_file_size(cfg),
                                 private=bool(getattr(cfg, "read_only", False)))
    table.load()
    return table


def read_ext_tags(qdir: str, tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``verify``: the tagsCode behind each ext address among ``tags`` (units of the queue
    at ``<root>/consumequeue/<topic>/<qid>``), read from the ext files without mapping them for
    write. Returns (resolved tags, mask of addresses whose unit is missing)."""
    is_addr = tags <= cq_ext.MAX_ADDR
    missing = np.zeros(len(tags), dtype=bool)
    if not is_addr.any():
        return tags, missing
    qid = os.path.basename(qdir)
    topic = os.path.basename(os.path.dirname(qdir))
    root = os.path.dirname(os.path.dirname(os.path.dirname(qdir)))
    edir = os.path.join(ext_root(root), topic, qid)
    files: dict[int, bytes] = {}
    size = None
    if os.path.isdir(edir):
        for n in os.listdir(edir):
            if len(n) == 20 and n.isdigit():
                with open(os.path.join(edir, n), "rb") as fh:
                    files[int(n)] = fh.read()
                size = len(files[int(n)])
    out = tags.copy()
    for k in np.flatnonzero(is_addr).tolist():
        real = undecorate(int(tags[k]))
        unit = None
        if size:
            data = files.get(real - real % size)
            unit = decode_unit(data, real % size) if data is not None else None
        if unit is None:
            missing[k] = True
        else:
            out[k] = unit.tags_code
    return out, missing


def layout_ext_stream(sizes: Sequence[int], file_size: int) -> tuple[list[int], list[int]]:
    """Where ``ConsumeQueueExt.put`` places units of these sizes in a new stream: (real offset
    of each unit, real offsets of the end marks written where a unit did not fit)."""
    offsets: list[int] = []
    marks: list[int] = []
    file_from, pos = 0, 0
    for size in sizes:
        if size > file_size - pos - cq_ext.END_BLANK_DATA_LENGTH:
            marks.append(file_from + pos)
            file_from, pos = file_from + file_size, 0
        offsets.append(file_from + pos)
        pos += size
    return offsets, marks


def write_ext_stream(directory: str, file_size: int, units: Sequence[bytes]) -> list[int]:
    """Write a queue's ext stream from scratch into plain pre-sized files (the ``rebuild``
    writer, same bytes as the dispatcher's); returns each unit's address."""
    offsets, marks = layout_ext_stream([len(u) for u in units], file_size)
    if not units:
        return []
    os.makedirs(directory, exist_ok=True)
    nfiles = offsets[-1] // file_size + 1
    files = [bytearray(file_size) for _ in range(nfiles)]
    for off, data in zip(offsets, units):
        f, pos = divmod(off, file_size)
        files[f][pos:pos + len(data)] = data
    for off in marks:
        f, pos = divmod(off, file_size)
        files[f][pos:pos + 2] = cq_ext.END_MARK
    from ..format.layouts import offset_to_name
    for i, data in enumerate(files):
        with open(os.path.join(directory, offset_to_name(i * file_size)), "wb") as fh:
            fh.write(data)
    return [decorate(o) for o in offsets]
