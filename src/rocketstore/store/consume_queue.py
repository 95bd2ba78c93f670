"""ConsumeQueue: per (topic, queue id), 20-byte units ``(phy offset, size, tagsCode)``.

Unit ``n`` lives at logical byte ``n * 20``; files are pre-sized (size rounded up to a multiple
of 20) and named by their first logical byte. Theory of operation:

* **Positional, idempotent writes.** ``put_units`` takes columns for many units and copies their
  encoded bytes to ``queue_offset * 20``. A unit whose ``phy + size`` is at or below what the
  queue already holds was dispatched before and is skipped (re-dispatch after recovery is
  harmless). ``write_cq_units`` is the same writer over plain files, for ``rebuild``.
* **Pre-blank fill.** When a queue's first file is created for a unit above 0, the file is filled
  from its start with ``(0, 0x7FFFFFFF, 0)`` filler units and ``min_logic_offset`` starts there.
* **Recovery** scans the last three files for the first invalid unit (``offset < 0`` or
  ``size <= 0``); ``truncate_dirty_logic`` drops units pointing at or beyond a CommitLog end;
  ``correct_min_offset`` moves the minimum past units whose messages were deleted.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Iterator

import numpy as np

from ..format.layouts import CQ_DTYPE, CQ_FILLER, CQ_UNIT, CQ_UNIT_SIZE, name_to_offset, offset_to_name
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)
UNIT_DTYPE = np.dtype(CQ_DTYPE)
FILLER_SIZE = 0x7FFFFFFF
GAP_FILL_MAX = 1024  # units of filler a queue-offset gap may get (further: a damaged field)


def encode_units(phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> bytes:
    """Big-endian 20-byte units for the given columns."""
    arr = np.empty(len(phys), dtype=UNIT_DTYPE)
    arr["offset"] = phys
    arr["size"] = sizes
    arr["tags_code"] = tags
    return arr.tobytes()


def _valid_prefix(mf) -> tuple[int, tuple[int, int] | None]:
    """How many units from the start of ``mf`` are valid (RocketMQ's rule: ``offset >= 0`` and
    ``size > 0``), and the last of them as ``(offset, size)``. Reads only up to the file's first
    hole (past it every unit reads as zeros: invalid)."""
    size = mf.file_size
    ranges = mf.data_ranges(0)
    limit = ranges[0][1] if ranges and ranges[0][0] == 0 else 0
    count = min(size, -(-limit // CQ_UNIT_SIZE) * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
    if count == 0:
        return 0, None
    arr = np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=count)
    valid = (arr["offset"] >= 0) & (arr["size"] > 0)
    n = count if valid.all() else int(np.argmin(valid))
    last = (int(arr[n - 1]["offset"]), int(arr[n - 1]["size"])) if n else None
    del arr, valid
    return n, last


def _filler(count: int) -> bytes:
    return CQ_FILLER * count


def queue_dir(root_cq_dir: str, topic: str, queue_id: int) -> str:
    return os.path.join(root_cq_dir, topic, str(queue_id))


def queue_dirs(root: str) -> Iterator[tuple[str, int, str]]:
    """(topic, queue id, directory) of every ``<root>/<topic>/<queueId>`` in name order;
    entries that are not directories, and queue dirs whose name is not an int, are skipped as
    RocketMQ skips them."""
    if not os.path.isdir(root):
        return
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for qid in sorted(os.listdir(tdir)):
            if qid.isdigit():
                yield topic, int(qid), os.path.join(tdir, qid)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: str, file_size: int, *,
                 private: bool = False) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, private=private,
                                     crash_point="consumequeue-roll", sparse=True, lazy=True)
        self.min_logic_offset = 0  # bytes
        self.max_physic_offset = -1  # phy offset + size of the last unit
        self.lock = threading.Lock()

    # -- load / recover ---------------------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    def recover(self) -> int:
        """Find the first invalid unit in the last three files; drop what follows it. Returns
        how many valid-looking units after that point were dropped (0 for a clean tail; more
        means damage inside the queue, which dispatch must rebuild).

        Only the parts of a file that may hold data are read (``MappedFile.data_ranges``: a
        hole or an allocated but unwritten block reads as zeros, an invalid unit), so a queue
        of one unit costs one page, not its file's 5.7 MiB."""
        files = self.queue.files
        if not files:
            return 0
        idx = max(0, len(files) - 3)
        process = files[idx].file_from_offset
        for mf in files[idx:]:
            n_valid, last = _valid_prefix(mf)
            if last is not None and last[1] != FILLER_SIZE:
                self.max_physic_offset = last[0] + last[1]
            process = mf.file_from_offset + n_valid * CQ_UNIT_SIZE
            if n_valid * CQ_UNIT_SIZE < self.file_size:
                break
        dropped = 0
        for mf in files:
            if mf.file_from_offset + self.file_size <= process:
                continue
            start = max(0, process - mf.file_from_offset)
            for lo, hi in mf.data_ranges(start):
                lo -= (lo - start) % CQ_UNIT_SIZE  # unit boundaries, counted from the cut
                hi = min(self.file_size, -(-hi // CQ_UNIT_SIZE) * CQ_UNIT_SIZE)
                tail = np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=(hi - lo) // CQ_UNIT_SIZE,
                                     offset=lo)
                dropped += int(np.count_nonzero((tail["offset"] >= 0) & (tail["size"] > 0)
                                                & (tail["size"] != FILLER_SIZE)))
                del tail
        self.queue.truncate_dirty(process)
        first = self.queue.first()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset
        self._skip_leading_filler()
        return dropped

    def _skip_leading_filler(self) -> None:
        """Filler units below the first real unit are not readable: min starts after them."""
        first = self.queue.first()
        if first is None or first.wrote_position == 0:
            return
        if CQ_UNIT.unpack_from(first.mm, 0)[1] != FILLER_SIZE:
            return  # (the usual case: nothing to skip, and nothing more to read)
        arr = np.frombuffer(first.mm, dtype=UNIT_DTYPE, count=first.wrote_position // CQ_UNIT_SIZE)
        real = arr["size"] != FILLER_SIZE
        n = len(arr) if not real.any() else int(np.argmax(real))
        self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset + n * CQ_UNIT_SIZE)

    # -- write ------------------------------------------------------------------------------------
    def put_units(self, queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray,
                  tags: np.ndarray) -> int:
        """Write units positionally; returns how many were new."""
        with self.lock:
            keep = (phys + sizes) > self.max_physic_offset
            if not keep.all():
                queue_offsets, phys, sizes, tags = (queue_offsets[keep], phys[keep], sizes[keep],
                                                    tags[keep])
            if len(queue_offsets) == 0:
                return 0
            current = self.queue.max_offset()
            logic = queue_offsets.astype(np.int64) * CQ_UNIT_SIZE
            in_order = (len(logic) < 2 or bool((np.diff(logic) == CQ_UNIT_SIZE).all()))
            if not (in_order and (int(logic[0]) == current or not self.queue.files)):
                logic, phys, sizes, tags = self._place(current, logic, phys, sizes, tags)
                if len(logic) == 0:
                    return 0
            data = encode_units(phys, sizes, tags)
            i = 0
            n = len(logic)
            starts = logic.tolist()
            # where a run of consecutive units breaks (n: the end)
            breaks = (np.flatnonzero(np.diff(logic) != CQ_UNIT_SIZE) + 1).tolist() + [n]
            b = 0
            while i < n:
                start = starts[i]
                mf = self._file_for(start)
                file_end = mf.file_from_offset + self.file_size
                # run of consecutive units inside this file: to the next break or the file end
                while breaks[b] <= i:
                    b += 1
                j = min(breaks[b], i - (start - file_end) // CQ_UNIT_SIZE)
                pos = start - mf.file_from_offset
                mf.ensure_allocated(pos + (j - i) * CQ_UNIT_SIZE)
                mf.write_at(pos, data[i * CQ_UNIT_SIZE:j * CQ_UNIT_SIZE])
                mf.wrote_position = max(mf.wrote_position, pos + (j - i) * CQ_UNIT_SIZE)
                i = j
            real = sizes != FILLER_SIZE
            if real.any():
                self.max_physic_offset = max(self.max_physic_offset,
                                             int((phys[real] + sizes[real]).max()))
            return n

    def put_unit(self, queue_offset: int, phy: int, size: int, tags_code: int) -> int:
        """One unit, plain Python (``put_units``'s rules and bytes without numpy's per-call
        cost, for the reput's tiny batches); returns 1 if it was new."""
        with self.lock:
            if phy + size <= self.max_physic_offset:
                return 0
            logic = queue_offset * CQ_UNIT_SIZE
            if logic == self.queue.max_offset() or not self.queue.files:
                mf = self._file_for(logic)
                pos = logic - mf.file_from_offset
                if pos + CQ_UNIT_SIZE > mf.allocated:
                    mf.ensure_allocated(pos + CQ_UNIT_SIZE)
                mf.write_at(pos, CQ_UNIT.pack(phy, size, tags_code))
                mf.wrote_position = max(mf.wrote_position, pos + CQ_UNIT_SIZE)
                self.max_physic_offset = phy + size
                return 1
        # not at the queue's end (a hole, a re-dispatch, a gap): the general rules, ``_place``
        i64 = np.int64
        return self.put_units(np.array([queue_offset], dtype=i64), np.array([phy], dtype=i64),
                              np.array([size], dtype=i64), np.array([tags_code], dtype=i64))


    def _place(self, current: int, logic, phys, sizes, tags):
        """Units that do not simply continue the queue (a record missing from it, or one whose
        queue offset field is damaged in a way RocketMQ's layout check cannot see):

        * at the queue's end: written; below it: written only over a filler unit (a hole),
          else skipped as dispatched before;
        * ahead of the end by at most ``GAP_FILL_MAX`` units: the hole gets filler units
          (consumers skip them) and the unit its own position, so later records still land at
          theirs; further ahead (a damaged field): no unit — the record stays in the CommitLog,
          readable by offset and key.
        """
        out_l, out_p, out_s, out_t = [], [], [], []
        placed_filler: dict[int, int] = {}  # fillers of this call: position -> index in out_*
        cur = current if self.queue.files else int(logic[0])  # a new queue starts at its first
        for lo, ph, sz, tg in zip(logic.tolist(), phys.tolist(), sizes.tolist(), tags.tolist()):
            if lo == cur:
                cur += CQ_UNIT_SIZE
            elif lo < cur:
                k = placed_filler.pop(lo, None)
                if k is not None:  # fills a hole this call made
                    out_p[k], out_s[k], out_t[k] = ph, sz, tg
                    continue
                if lo >= current or not self._is_filler(lo):
                    continue  # dispatched before
            elif lo - cur <= GAP_FILL_MAX * CQ_UNIT_SIZE:
                log.warning("ConsumeQueue %s/%d: record at CommitLog offset %d has queue offset "
                            "%d, the queue is at %d: filler units in between", self.topic,
                            self.queue_id, ph, lo // CQ_UNIT_SIZE, cur // CQ_UNIT_SIZE)
                for f in range(cur, lo, CQ_UNIT_SIZE):
                    placed_filler[f] = len(out_l)
                    out_l.append(f)
                    out_p.append(0)
                    out_s.append(FILLER_SIZE)
                    out_t.append(0)
                cur = lo + CQ_UNIT_SIZE
            else:
                log.error("ConsumeQueue %s/%d: record at CommitLog offset %d has queue offset %d, "
                          "far ahead of the queue's %d: no unit written", self.topic, self.queue_id,
                          ph, lo // CQ_UNIT_SIZE, cur // CQ_UNIT_SIZE)
                continue
            out_l.append(lo)
            out_p.append(ph)
            out_s.append(sz)
            out_t.append(tg)
        i64 = np.int64
        return (np.asarray(out_l, dtype=i64), np.asarray(out_p, dtype=i64),
                np.asarray(out_s, dtype=i64), np.asarray(out_t, dtype=i64))

    def _is_filler(self, logic_offset: int) -> bool:
        mf = self.queue.find(logic_offset)
        if mf is None:
            return False
        pos = logic_offset - mf.file_from_offset
        if pos + CQ_UNIT_SIZE > mf.wrote_position:
            return False
        return int(np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=1, offset=pos)[0]["size"]) == FILLER_SIZE

    def _file_for(self, logic_offset: int):
        q = self.queue
        while True:
            last = q.last()
            if last is not None and logic_offset < last.file_from_offset + self.file_size:
                mf = q.find(logic_offset)
                if mf is None:  # below the first file: cannot happen for fresh units
                    raise ValueError(f"unit at {logic_offset} below the queue's first file")
                return mf
            if last is not None and not last.is_full():
                raise ValueError(f"{self.topic}-{self.queue_id}: unit at {logic_offset} leaves a gap "
                                 f"after {last.file_from_offset + last.wrote_position}")
            first_file = last is None
            mf = q.get_last_mapped_file(logic_offset)
            assert mf is not None
            if first_file and logic_offset != 0 and mf.wrote_position == 0:
                fill = (logic_offset - mf.file_from_offset) // CQ_UNIT_SIZE
                if fill:
                    mf.ensure_allocated(fill * CQ_UNIT_SIZE)
                    mf.write_at(0, _filler(fill))
                mf.set_positions(fill * CQ_UNIT_SIZE)
                mf.flushed_position = 0
                self.min_logic_offset = logic_offset

    # -- read -------------------------------------------------------------------------------------
    def max_offset_in_queue(self) -> int:
        return self.queue.max_offset() // CQ_UNIT_SIZE

    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_UNIT_SIZE

    def read_units(self, index: int, max_count: int) -> np.ndarray | None:
        """Units from queue offset ``index`` up to the end of its file (at most ``max_count``).

        None when ``index`` is below the minimum or not in a file.
        """
        logic = index * CQ_UNIT_SIZE
        if logic < self.min_logic_offset:
            return None
        mf = self.queue.find(logic)
        if mf is None:
            return None
        pos = logic - mf.file_from_offset
        wrote = mf.wrote_position
        if pos >= wrote:
            return np.zeros(0, dtype=UNIT_DTYPE)
        count = min(max_count, (wrote - pos) // CQ_UNIT_SIZE)
        return np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=count, offset=pos).copy()

    def unit(self, index: int) -> tuple[int, int, int] | None:
        u = self.read_units(index, 1)
        if u is None or len(u) == 0:
            return None
        return int(u[0]["offset"]), int(u[0]["size"]), int(u[0]["tags_code"])

    def offset_by_time(self, timestamp: int, store_time: Callable[[int, int], int]) -> int:
        """First queue offset stored at or after ``timestamp`` (RocketMQ 5 LOWER boundary)."""
        lo, hi = self.min_offset_in_queue(), self.max_offset_in_queue()
        if lo >= hi:
            return hi
        first, last = lo, hi
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.unit(mid)
            ts = store_time(u[0], u[1]) if u else -1
            if ts < 0:  # unreadable (removed): treat as older
                lo = mid + 1
            elif ts >= timestamp:
                hi = mid
            else:
                lo = mid + 1
        return max(first, min(lo, last))

    # -- maintenance --------------------------------------------------------------------------------
    def truncate_dirty_logic(self, phy_offset: int) -> None:
        """Drop units whose message starts at or beyond ``phy_offset``."""
        with self.lock:
            files = self.queue.files
            cut = None
            for mf in reversed(files):
                if mf.wrote_position == 0:
                    # an empty last file (a queue cut at a file boundary): nothing to keep in
                    # it, the earlier files decide
                    cut = mf.file_from_offset
                    continue
                arr = np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=mf.wrote_position // CQ_UNIT_SIZE)
                real = (arr["size"] != FILLER_SIZE)
                bad = (arr["offset"] >= phy_offset) & real
                if not bad.any():
                    cut = mf.file_from_offset + mf.wrote_position
                    break
                k = int(np.argmax(bad))
                cut = mf.file_from_offset + k * CQ_UNIT_SIZE
                if k > 0:
                    break
            if cut is None:
                return
            self.queue.truncate_dirty(cut)
            self.max_physic_offset = -1
            last = self.queue.last()
            if last is not None and last.wrote_position:
                arr = np.frombuffer(last.mm, dtype=UNIT_DTYPE, count=last.wrote_position // CQ_UNIT_SIZE)
                u = arr[-1]
                if int(u["size"]) != FILLER_SIZE:
                    self.max_physic_offset = int(u["offset"]) + int(u["size"])
            if self.queue.max_offset() < self.min_logic_offset:
                self.min_logic_offset = self.queue.max_offset()

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move ``min_logic_offset`` to the first unit whose message is at/after the CommitLog min."""
        with self.lock:
            max_logic = self.queue.max_offset()
            if self.min_logic_offset >= max_logic:
                return
            last = self.queue.last()
            assert last is not None
            lu = np.frombuffer(last.mm, dtype=UNIT_DTYPE, count=1,
                               offset=last.wrote_position - CQ_UNIT_SIZE)[0] if last.wrote_position else None
            if lu is not None and int(lu["offset"]) < min_commitlog_offset:
                self.min_logic_offset = max_logic
                return
            at = self.unit(self.min_logic_offset // CQ_UNIT_SIZE)
            if at is not None and at[0] >= min_commitlog_offset and at[1] != FILLER_SIZE:
                return  # (the usual case: the minimum is right; nothing more to read)
            for mf in self.queue.files:
                if mf.file_from_offset + mf.wrote_position <= self.min_logic_offset:
                    continue
                arr = np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=mf.wrote_position // CQ_UNIT_SIZE)
                start = max(0, (self.min_logic_offset - mf.file_from_offset) // CQ_UNIT_SIZE)
                offs = arr["offset"][start:].astype(np.int64)
                real = arr["size"][start:] != FILLER_SIZE
                ok = (offs >= min_commitlog_offset) & real
                if ok.any():
                    self.min_logic_offset = mf.file_from_offset + (start + int(np.argmax(ok))) * CQ_UNIT_SIZE
                    return
            self.min_logic_offset = max_logic

    def delete_expired_files(self, min_commitlog_offset: int) -> int:
        """Delete non-last files whose last unit points below the CommitLog min; then correct."""
        deleted = 0
        files = self.queue.files
        count = 0
        for mf in files[:-1]:
            if mf.wrote_position < CQ_UNIT_SIZE:
                break
            u = np.frombuffer(mf.mm, dtype=UNIT_DTYPE, count=1, offset=mf.wrote_position - CQ_UNIT_SIZE)[0]
            if int(u["offset"]) < min_commitlog_offset:
                count += 1
            else:
                break
        if count:
            deleted = len(self.queue.delete_first_files(count))
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    def destroy(self) -> None:
        self.queue.destroy_all()
        self.min_logic_offset = 0
        self.max_physic_offset = -1

    def close(self) -> None:
        self.queue.close()


def write_cq_units(directory: str, file_size: int, queue_offsets: np.ndarray, phys: np.ndarray,
                   sizes: np.ndarray, tags: np.ndarray) -> None:
    """Write units positionally into pre-sized plain files (the rebuild writer).

    Produces the same bytes as ``ConsumeQueue.put_units`` for the same units: the queue's first
    file gets filler units below its first unit when the queue starts above 0. Units may come in
    any order and from several calls (positional writes need no coordination).
    """
    if len(queue_offsets) == 0:
        return
    file_size = -(-file_size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
    os.makedirs(directory, exist_ok=True)
    order = np.argsort(queue_offsets, kind="stable")
    q = queue_offsets[order].astype(np.int64)
    data = encode_units(phys[order], sizes[order], tags[order])
    logic = q * CQ_UNIT_SIZE
    existing = sorted(o for o in (name_to_offset(n) for n in os.listdir(directory)) if o is not None)
    first_logic = int(logic[0])
    first_file_from = first_logic - first_logic % file_size
    if not existing or first_file_from < existing[0]:
        fill = (first_logic - first_file_from) // CQ_UNIT_SIZE
        if fill:
            _pwrite_file(directory, first_file_from, file_size, 0, _filler(fill))
    file_idx = logic // file_size
    bounds = np.flatnonzero(np.diff(file_idx)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(q)]))
    for s, e in zip(starts.tolist(), ends.tolist()):
        ffrom = int(file_idx[s]) * file_size
        # consecutive runs inside the file become one write each
        seg = logic[s:e]
        breaks = np.flatnonzero(np.diff(seg) != CQ_UNIT_SIZE) + 1
        rs = np.concatenate(([0], breaks))
        re_ = np.concatenate((breaks, [e - s]))
        for a, b in zip(rs.tolist(), re_.tolist()):
            pos = int(seg[a]) - ffrom
            _pwrite_file(directory, ffrom, file_size, pos,
                         data[(s + a) * CQ_UNIT_SIZE:(s + b) * CQ_UNIT_SIZE])


def _pwrite_file(directory: str, file_from: int, file_size: int, pos: int, data: bytes) -> None:
    path = os.path.join(directory, offset_to_name(file_from))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != file_size:
            os.ftruncate(fd, file_size)
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)
