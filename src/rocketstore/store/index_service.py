"""IndexService: the index files of a store, the reput hook that fills them, and key queries.

Files live in ``<root>/index/<yyyyMMddHHmmssSSS>`` (local time of creation, see
``format/index_layout.py`` for the bytes); the newest file is the only one written.

Theory of operation.

*Dispatch.* ``dispatch(recs)`` receives every decoded CommitLog batch from the reput thread. As
RocketMQ's ``buildIndex`` does per message, it first makes sure a writable last file exists
(rolling over a full one), skips records already indexed, drops rollback records, builds the keys
``topic#uniqKey`` then ``topic#key`` per KEYS piece, hashes them all at once and hands the columns
to ``IndexFile.put_batch``; when a file fills up the next one is created with the previous
file's end offset/time in its header, and the full file is flushed in the background, after
which ``checkpoint.index_msg_timestamp`` = its end time and the checkpoint is flushed.

*Idempotence.* RocketMQ skips a record when ``offset < endPhyOffset`` of the last file, which
indexes the record at ``endPhyOffset`` a second time after a re-dispatch. Here the record at
``endPhyOffset`` only gets the keys it is missing: the index already holds its first ``k`` keys,
``k`` = the trailing entries with that offset (followed back across a roll, since a record's keys
can straddle two files and a crash can destroy the second). So ``dispatch_from_offset()`` — the
last file's end offset — is a safe restart point: re-dispatching from any offset at or below it
completes the index and adds nothing twice.

*Recovery.* ``load(last_exit_ok=False)`` destroys, as RocketMQ does, every file whose end time is
newer than ``checkpoint.index_msg_timestamp`` (only full, flushed files are trusted after a
crash); the reput must then restart at ``dispatch_from_offset()`` so nothing is lost (RocketMQ
may restart later and lose keys). A file of the wrong size raises ``CorruptFileError`` naming it,
except the newest file after a crash, which is dropped (it is rebuilt from the CommitLog).
``truncate_dirty_files(offset)`` drops files pointing at or past a truncated CommitLog end.
``flush()`` (periodic) flushes full files; ``shutdown()`` flushes every file, the writable one
included (RocketMQ 4.9 did not).

*Queries.* ``query_offsets`` is RocketMQ's raw ``queryOffset``: newest file first, hash matches
only, collisions and duplicates included, capped at ``min(max_num, max_msgs_num_batch)``.
``query_message`` is exact: it walks the same chains without letting collisions use up the cap,
reads every candidate back through ``read(offset)`` and keeps a message only when its topic is
the topic and its KEYS pieces or UNIQ_KEY contain the key, and its store time is in the window;
each message once, newest first, at most ``min(max_num, max_msgs_num_batch)``. Index times are
whole seconds after the file's begin time, so the chain test is widened by 999 ms and the real
store time decides. Limit (as in RocketMQ): a store time earlier than its file's begin time (the
clock stepped back) is indexed as timeDiff 0, so only windows reaching that file's range find it.

Thread safety: one writer (the reput thread); queries from any thread. The file list is changed
under a lock and read as a snapshot; files are closed only under the same lock.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..config import StoreConfig
from ..errors import CorruptFileError
from ..format.hashing import index_key_hash
from ..format.index_layout import build_key, index_file_name, index_file_size, parse_index_file_name
from ..format.message import (KEY_SEPARATOR, TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE,
                              MessageExt)
from . import syncprobe
from .checkpoint import StoreCheckpoint
from .index_file import IndexFile, index_key_hash_columns

LONG_MAX = (1 << 63) - 1
log = logging.getLogger(__name__)


@dataclass
class QueryMessageResult:
    messages: list[MessageExt] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class IndexService:
    def __init__(self, cfg: StoreConfig, checkpoint: StoreCheckpoint, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.checkpoint = checkpoint
        self.clock = clock
        self.index_dir = cfg.index_dir
        self.hash_slot_num = cfg.max_hash_slot_num
        self.index_num = cfg.max_index_num
        self.files: list[IndexFile] = []
        self._lock = threading.RLock()
        self._flushers: list[threading.Thread] = []
        self._flush_error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def load(self, last_exit_ok: bool) -> None:
        """Open the index files sorted by name; after a crash drop the untrusted newest ones."""
        if not os.path.isdir(self.index_dir):
            return
        names = sorted(n for n in os.listdir(self.index_dir) if parse_index_file_name(n) is not None)
        loaded: list[IndexFile] = []
        try:
            for i, name in enumerate(names):
                path = os.path.join(self.index_dir, name)
                try:
                    loaded.append(IndexFile.open(path, self.hash_slot_num, self.index_num,
                                                 private=self.cfg.read_only))
                except CorruptFileError:
                    if last_exit_ok or i != len(names) - 1:
                        raise
                    # the newest file after a crash is rebuilt from the CommitLog anyway
                    log.warning("dropping damaged newest index file %s after an unclean exit", path)
                    if not self.cfg.read_only:
                        os.remove(path)
        except BaseException:
            for f in loaded:
                f.close()
            raise
        if not last_exit_ok:
            trusted = self.checkpoint.index_msg_timestamp
            keep = []
            for k, f in enumerate(loaded):
                if f.end_timestamp > trusted:
                    # newer than the checkpoint: dropped (RocketMQ's rule) — and so is every
                    # later file, else a damaged early file would leave an unindexed hole
                    # behind files that are kept (re-indexing starts after the last kept one)
                    for g in loaded[k:]:
                        g.destroy()
                    break
                keep.append(f)
            loaded = keep
        with self._lock:
            old, self.files = self.files, loaded
        for f in old:
            f.close()

    def flush(self, all_files: bool = False) -> None:
        """Flush changed full files, each advancing the checkpoint's index time; with
        ``all_files`` (shutdown) the writable last file too. The last file is not flushed
        periodically: after a crash it is rebuilt from the CommitLog whatever its state."""
        self._join_flushers()
        for f in self._snapshot():
            if f.dirty and (all_files or f.is_write_full()):
                self._flush_file(f)

    def shutdown(self) -> None:
        self.flush(all_files=True)
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []

    def destroy(self) -> None:
        self._join_flushers()
        with self._lock:
            for f in self.files:
                f.destroy()
            self.files = []

    def _flush_file(self, f: IndexFile) -> None:
        if not f.flush():  # closed meanwhile
            return
        if f.is_write_full() and f.end_timestamp > self.checkpoint.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = f.end_timestamp
            self.checkpoint.flush()

    def _flush_in_background(self, f: IndexFile) -> None:
        def run() -> None:
            try:
                self._flush_file(f)
            except BaseException as exc:  # surfaced by the next flush()/shutdown()
                self._flush_error = exc
        t = threading.Thread(target=run, name=f"FlushIndexFile-{f.name}", daemon=True)
        with self._lock:
            self._flushers = [x for x in self._flushers if x.is_alive()] + [t]
        t.start()

    def _join_flushers(self) -> None:
        with self._lock:
            pending, self._flushers = self._flushers, []
        for t in pending:
            t.join()
        if self._flush_error is not None:
            exc, self._flush_error = self._flush_error, None
            raise exc

    # -- writing ------------------------------------------------------------------------------
    def _snapshot(self) -> list[IndexFile]:
        with self._lock:
            return list(self.files)

    def _new_file_name(self) -> str:
        ms = int(self.clock() * 1000)
        last = self.files[-1].name if self.files else ""
        if index_file_name(ms) <= last:
            ms = max(ms, (parse_index_file_name(last) or ms) + 1)
        while index_file_name(ms) <= last or os.path.exists(os.path.join(self.index_dir, index_file_name(ms))):
            ms += 1
        return index_file_name(ms)

    def last_file(self) -> IndexFile:
        """``getAndCreateLastIndexFile``: the writable last file, rolling over a full one."""
        files = self.files
        if files and not files[-1].is_write_full():
            return files[-1]
        prev = files[-1] if files else None
        end_phy = prev.end_phy_offset if prev else 0
        end_ts = prev.end_timestamp if prev else 0
        if not self.cfg.read_only:
            os.makedirs(self.index_dir, exist_ok=True)
        f = IndexFile.create(os.path.join(self.index_dir, self._new_file_name()), self.hash_slot_num,
                             self.index_num, end_phy, end_ts, private=self.cfg.read_only)
        with self._lock:
            self.files = self.files + [f]
        syncprobe.crash_point("index-roll")
        if prev is not None:
            self._flush_in_background(prev)
        return f

    def _keys_indexed_at(self, phy_offset: int) -> int:
        """How many keys of the record at ``phy_offset`` (the newest indexed offset) are already
        in the index: the trailing entries with that offset, followed back across a roll."""
        n = 0
        for f in reversed(self.files):
            idx = f.index_count - 1
            while idx >= 1 and f.entry(idx)[1] == phy_offset:
                n += 1
                idx -= 1
            if idx >= 1:
                break
        return n

    tiny_batch = 24  # records; at most this many are indexed in plain Python, not numpy

    def dispatch(self, recs) -> None:
        """Index a decoded batch (``DecodedRecords``); see the module doc."""
        if not self.cfg.message_index_enable or len(recs) == 0:
            return
        f = self.last_file()
        end = f.end_phy_offset
        if len(recs) <= self.tiny_batch:
            return self._dispatch_tiny(recs, end)
        offsets = recs.offsets
        mask = offsets >= end
        if not mask.any():
            return
        hashes, owner = index_key_hash_columns(recs, mask)
        if len(owner) and offsets[owner[0]] == end:
            # the record at endPhyOffset may be indexed wholly or (cut by a crash right after a
            # roll) in part: put only the keys that are missing, in their original order
            done = min(self._keys_indexed_at(end), int(np.count_nonzero(offsets[owner] == end)))
            hashes, owner = hashes[done:], owner[done:]
        if not len(owner):
            return
        self.put_keys(hashes, offsets[owner], recs.store_timestamp[owner])

    def _dispatch_tiny(self, recs, end: int) -> None:
        """``dispatch`` key by key with ``put_hash`` (the same keys, order and bytes): hashing
        and chaining a few keys with numpy costs ~100 µs of per-call overhead."""
        uniq, kprops, topics = recs.uniq_keys(), recs.keys(), recs.topic
        keys: list[tuple[int, int, int]] = []
        for i, (off, sys_flag, ts) in enumerate(zip(recs.offsets.tolist(),
                                                    recs.sys_flag.tolist(),
                                                    recs.store_timestamp.tolist())):
            if off < end or sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK_TYPE:
                continue
            prefix = topics[i] + "#"
            u, ks = uniq[i], kprops[i]
            if u is not None:
                keys.append((index_key_hash(prefix + u), off, ts))
            if ks:
                keys += [(index_key_hash(prefix + k), off, ts) for k in ks.split(KEY_SEPARATOR) if k]
        if keys and keys[0][1] == end:  # see ``dispatch``: only the keys that are missing
            done = min(self._keys_indexed_at(end), sum(1 for k in keys if k[1] == end))
            keys = keys[done:]
        for h, off, ts in keys:
            while not self.last_file().put_hash(h, off, ts):
                pass

    def put_keys(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """Append hashed keys in order, rolling over as files fill up."""
        pos, n = 0, len(key_hashes)
        while pos < n:
            f = self.last_file()
            pos += f.put_batch(key_hashes[pos:], phy_offsets[pos:], store_timestamps[pos:])

    def put_key(self, topic: str, key: str, phy_offset: int, store_timestamp: int) -> None:
        """One key, one put (RocketMQ's path; the tests' reference writer)."""
        h = index_key_hash(build_key(topic, key))
        while not self.last_file().put_hash(h, phy_offset, store_timestamp):
            pass

    def dispatch_from_offset(self) -> int:
        """CommitLog offset from which index entries may be missing (the reput restart point)."""
        if not self.cfg.message_index_enable:
            return LONG_MAX
        files = self._snapshot()
        if not files:
            return 0
        return files[-1].end_phy_offset

    def delete_expired_file(self, min_commitlog_offset: int) -> int:
        """Destroy old files whose entries all point below the CommitLog's min offset."""
        with self._lock:
            files = self.files
            if not files or files[0].end_phy_offset >= min_commitlog_offset:
                return 0
            doomed = []
            for f in files[:-1]:
                if f.end_phy_offset < min_commitlog_offset:
                    doomed.append(f)
                else:
                    break
            for f in doomed:
                f.destroy()
            self.files = files[len(doomed):]
            return len(doomed)

    def truncate_dirty_files(self, max_phy_offset: int) -> int:
        """Destroy files (newest first) whose end offset is at or past ``max_phy_offset`` (entries,
        or an empty rolled file's carried end) — for a CommitLog truncated below what was
        indexed, so the skip rule cannot hide new records. Returns how many were destroyed."""
        with self._lock:
            files = list(self.files)
            n = 0
            while files and files[-1].end_phy_offset >= max_phy_offset:
                files.pop().destroy()
                n += 1
            self.files = files
            return n

    # -- queries ------------------------------------------------------------------------------
    def _cap(self, max_num: int) -> int:
        return max(0, min(int(max_num), self.cfg.max_msgs_num_batch))

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int | None
                      ) -> tuple[list[int], int, int]:
        """RocketMQ's ``queryOffset``: (phy offsets newest first, last update ts, last update phy)."""
        end = LONG_MAX if end is None else end
        max_num = self._cap(max_num)
        out: list[int] = []
        last_ts = last_phy = 0
        idx_key = build_key(topic, key)
        with self._lock:
            files = self.files
            for i in range(len(files) - 1, -1, -1):
                f = files[i]
                if i == len(files) - 1:
                    last_ts, last_phy = f.end_timestamp, f.end_phy_offset
                if f.is_time_matched(begin, end):
                    f.select_phy_offsets(out, idx_key, max_num, begin, end)
                if f.begin_timestamp < begin or len(out) >= max_num:
                    break
        return out, last_ts, last_phy

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int | None,
                      read: Callable[[int], MessageExt | None], *, uniq_only: bool = False
                      ) -> QueryMessageResult:
        """Exact key query (see the module doc); ``read`` looks a record up by CommitLog offset."""
        end = LONG_MAX if end is None else end
        result = QueryMessageResult()
        max_num = self._cap(max_num)
        if max_num == 0:
            return result
        key_hash = index_key_hash(build_key(topic, key))
        seen: set[int] = set()
        with self._lock:
            files = self.files
            for i in range(len(files) - 1, -1, -1):
                f = files[i]
                # RocketMQ's isTimeMatched: a window enclosing the file's range matches it even
                # when a damaged record's store time left that range inverted
                if f.index_count > 1 and f.is_time_matched(begin, end):
                    for phy in f.candidates(key_hash, begin, end):
                        if phy in seen:
                            continue
                        seen.add(phy)
                        msg = read(phy)
                        if msg is None or msg.topic != topic or not begin <= msg.store_timestamp <= end:
                            continue
                        if msg.uniq_key == key or (not uniq_only and key in msg.keys):
                            result.messages.append(msg)
                            if len(result.messages) >= max_num:
                                break
                if len(result.messages) >= max_num or f.begin_timestamp < begin:
                    break
            if seen and files:
                result.index_last_update_timestamp = files[-1].end_timestamp
                result.index_last_update_phyoffset = files[-1].end_phy_offset
        return result

    def query_by_uniq_key(self, topic: str, uniq_key: str, read: Callable[[int], MessageExt | None],
                          max_num: int | None = None, begin: int = 0, end: int | None = None
                          ) -> list[MessageExt]:
        """Messages of ``topic`` whose UNIQ_KEY is ``uniq_key``, newest first (a client id is
        normally unique; a producer retry can store it twice)."""
        n = self.cfg.default_query_max_num if max_num is None else max_num
        return self.query_message(topic, uniq_key, n, begin, end, read, uniq_only=True).messages

    def describe(self) -> list[dict]:
        return [f.describe() for f in self._snapshot()]


def describe_index_files(index_dir: str, hash_slot_num: int | None = None,
                         index_num: int | None = None) -> list[dict]:
    """Fill, slot use and time range of every index file in ``index_dir`` (for ``inspect``).

    The slot and entry counts are not stored in the file; pass the store's
    ``max_hash_slot_num``/``max_index_num``. Without them RocketMQ's defaults are tried, then
    ``index_num = 4 * hash_slot_num`` (RocketMQ's default ratio); a file that fits neither raises
    ``CorruptFileError`` naming it.
    """
    out: list[dict] = []
    if not os.path.isdir(index_dir):
        return out
    for name in sorted(os.listdir(index_dir)):
        if parse_index_file_name(name) is None:
            continue
        path = os.path.join(index_dir, name)
        slots, num = _file_sizes(path, hash_slot_num, index_num)
        f = IndexFile.open(path, slots, num)
        try:
            d = f.describe()
        finally:
            f.close()
        d["created_ms"] = parse_index_file_name(name)
        out.append(d)
    return out


def _file_sizes(path: str, slots: int | None, num: int | None) -> tuple[int, int]:
    size = os.path.getsize(path)
    d = StoreConfig.__dataclass_fields__
    if slots is not None and num is not None:
        return slots, num
    if slots is not None:
        rest = size - 40 - 4 * slots
        if rest > 0 and rest % 20 == 0:
            return slots, rest // 20
    elif num is not None:
        rest = size - 40 - 20 * num
        if rest > 0 and rest % 4 == 0:
            return rest // 4, num
    else:
        s0, n0 = d["max_hash_slot_num"].default, d["max_index_num"].default
        if index_file_size(s0, n0) == size:
            return s0, n0
        if (size - 40) % 84 == 0 and size > 40:
            return (size - 40) // 84, 4 * ((size - 40) // 84)
    raise CorruptFileError(path, f"index file of {size} bytes matches no known slot/entry counts; "
                                 "pass hash_slot_num and index_num")


def summarize_index_file(d: dict) -> str:
    """One line for ``inspect``: fill, slot use, time and offset range of a ``describe`` dict."""
    from datetime import datetime

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds") if ms > 0 else "-"
    return (f"{d['name']}: {d['entries']:,}/{d['capacity']:,} entries ({d['fill']:.1%})"
            f"{' full' if d['full'] else ''}, slots {d['used_slots']:,}/{d['hash_slot_num']:,} "
            f"({d['slot_use']:.1%}), {iso(d['begin_timestamp'])} .. {iso(d['end_timestamp'])}, "
            f"phy {d['begin_phy_offset']}..{d['end_phy_offset']}")
