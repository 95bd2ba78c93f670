"""Rebuild every ConsumeQueue and IndexFile of a store from its CommitLog (Spark or local).

    rebuild("/data/store")                       # Spark, embedded local[*]
    rebuild("/data/store", engine="local")       # the same code, in this process

Theory of operation. The CommitLog is the only source of truth; CQ and index files are derived.
The rebuild has three steps:

1. **Scan** (parallel): the CommitLog is cut into record-aligned ranges (one per segment, or
   finer for big segments) and each range is decoded by the shared vectorised decoder into two
   compact column sets — CQ units of NOT/COMMIT records (topic id, queue id, queue offset,
   physical offset, size, tagsCode) and index keys of every record but ROLLBACK, in put order
   (``store.index_file.index_key_hash_columns``, the reput's own: key hash, physical offset,
   store time). With Spark each range is one task (``sparkContext.parallelize(ranges)``); with
   ``engine="local"`` the same function runs in a loop. Ranges come back in CommitLog order,
   so concatenating them gives the global key stream: index sequence numbers are assigned
   deterministically across segments by position in that stream.
2. **Write** into a staging directory ``<root>/.rebuild-staging``: per queue, all its units in
   one call of ``store.consume_queue.write_cq_units`` (the in-process dispatcher's writer:
   positional, with RocketMQ's pre-blank filler for a queue starting above 0 — one call per
   queue keeps the filler rule race-free); the key stream is split into files by
   ``store.index_file.plan_index_files`` (RocketMQ's roll-over with the header carry) and each
   file is written by ``IndexFile.put_batch`` (numpy slot chains). The writers being the reput's
   own, the result is byte-identical to what the reput wrote (index file *names* differ: they
   are creation times).
3. **Swap**: files are fsynced, then ``consumequeue/`` and ``index/`` are exchanged with the
   staged ones (``renameat2(RENAME_EXCHANGE)`` where the kernel has it, else two renames), the
   old trees are deleted, and the checkpoint's logics/index times are set to the rebuilt state.

The whole run holds ``<root>/lock`` exclusively (``flock``, as ``MessageStore`` takes it, plus a
POSIX ``lockf`` as RocketMQ's Java store takes it): a store open in any process is refused with
``StoreLockedError``. Memory: the driver holds ~40 bytes per message and ~20 per index key.
On a cluster (``--master spark://…``) executors read the CommitLog at the same path, so the
store must be on a filesystem they all mount; every write happens on the driver.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..config import StoreConfig
from ..errors import RocketStoreError
from ..format.batch import parse_delay_levels
from ..format.index_layout import index_file_name
from ..format.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from ..store.checkpoint import StoreCheckpoint, fsync_dir
from ..store.lock import StoreLock
from ..filter.bitmap import compute_bitmaps, load_filter_specs
from ..format.cq_ext import encode_unit
from ..store.consume_queue import queue_dir, write_cq_units
from ..store.consume_queue_ext import EXT_DIR, write_ext_stream
from ..store.index_file import IndexFile, index_key_hash_columns, plan_index_files
from .segments import SegmentRange, auto_split_size, list_segments, plan_ranges, read_range

STAGING = ".rebuild-staging"
OLD = ".rebuild-old"
DERIVED = ("consumequeue", "index")


class RebuildError(RocketStoreError):
    """The rebuild could not read the CommitLog (the message says where and why)."""


@dataclass
class RangeScan:
    """What one CommitLog range contributes (plain numpy data, pickled back from tasks)."""

    start: int
    end: int
    topics: list[str]
    cq_topic: np.ndarray  # index into ``topics``
    cq_queue: np.ndarray
    cq_queue_offset: np.ndarray
    cq_phy: np.ndarray
    cq_size: np.ndarray
    cq_tags: np.ndarray
    cq_last_ts: int
    key_hash: np.ndarray
    key_phy: np.ndarray
    key_ts: np.ndarray
    records: int = 0
    cq_ts: np.ndarray | None = None  # store times of the CQ units (ConsumeQueue-ext only)
    cq_bitmaps: list | None = None  # their SQL92 bitmaps (bytes or None; ext only)


def scan_range(rng: SegmentRange, delay_levels_ms=None, check_crc: bool = False,
               ext_specs: dict | None = None) -> RangeScan:
    """Decode one range into CQ units and index keys (runs in Spark tasks or locally).

    ``ext_specs`` (``filter.bitmap.load_filter_specs``; ``{}`` for none) also collects what
    the ConsumeQueue-ext units need: store times and SQL92 bitmaps."""
    tid: dict[str, int] = {}
    parts: dict[str, list] = {k: [] for k in ("t", "q", "qo", "phy", "size", "tags", "kh", "kp", "kt",
                                              "ts", "bm")}
    last_ts, records = -1, 0
    for _buf, rec in read_range(rng, check_crc=check_crc, delay_levels_ms=delay_levels_ms):
        records += len(rec)
        tran = rec.sys_flag & TRANSACTION_MASK
        sel = np.flatnonzero((tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE))
        if len(sel):
            ids = np.fromiter(map(lambda t: tid.setdefault(t, len(tid)), rec.topic),
                              dtype=np.int32, count=len(rec))
            parts["t"].append(ids[sel])
            parts["q"].append(rec.queue_id[sel])
            parts["qo"].append(rec.queue_offset[sel])
            parts["phy"].append(rec.offsets[sel])
            parts["size"].append(rec.size[sel].astype(np.int64))
            parts["tags"].append(rec.tags_code[sel])
            if ext_specs is not None:
                parts["ts"].append(rec.store_timestamp[sel])
                order = sel.tolist()
                parts["bm"].extend(compute_bitmaps(
                    ext_specs, [rec.topic[i] for i in order],
                    lambda j, rec=rec, order=order: rec.properties[order[j]],
                    rec.store_timestamp[sel].tolist()))
            last_ts = int(rec.store_timestamp[sel[-1]])
        hashes, owner = index_key_hash_columns(rec)
        if len(owner):
            parts["kh"].append(hashes.astype(np.int32, copy=False))
            parts["kp"].append(rec.offsets[owner])
            parts["kt"].append(rec.store_timestamp[owner])

    def cat(name: str, dtype) -> np.ndarray:
        return np.concatenate(parts[name]).astype(dtype, copy=False) if parts[name] else np.zeros(0, dtype)

    return RangeScan(rng.start, rng.end, list(tid), cat("t", np.int32), cat("q", np.int32),
                     cat("qo", np.int64), cat("phy", np.int64), cat("size", np.int64),
                     cat("tags", np.int64), last_ts, cat("kh", np.int32), cat("kp", np.int64),
                     cat("kt", np.int64), records,
                     cat("ts", np.int64) if ext_specs is not None else None,
                     parts["bm"] if ext_specs is not None else None)


@dataclass
class RebuildResult:
    root: str
    engine: str
    segments: int = 0
    ranges: int = 0
    records: int = 0
    queues: int = 0
    cq_units: int = 0
    index_keys: int = 0
    index_files: int = 0
    timer_slots: int = 0  # timerwheel slots rebuilt from the timerlog
    seconds: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def store_config(root: str, cfg: StoreConfig | None = None) -> StoreConfig:
    """The config to rebuild with: the given one, else the sizes the store saved, else defaults."""
    if cfg is not None:
        return cfg.replace(store_path_root_dir=root) if cfg.store_path_root_dir != root else cfg
    from ..store.store_dir import SIZES_FILE
    saved = os.path.join(root, "config", SIZES_FILE)
    if os.path.exists(saved):
        return StoreConfig.from_properties(saved, store_path_root_dir=root)
    return StoreConfig(store_path_root_dir=root)


def _scan_spark(spark, ranges: list[SegmentRange], delay, check_crc: bool,
                on_task: Callable[[int], None] | None, ext_specs: dict | None = None) -> list[RangeScan]:
    sc = spark.sparkContext
    group = f"rocketstore-rebuild-{os.getpid()}-{time.monotonic_ns()}"
    out: dict = {}

    def run() -> None:
        try:
            sc.setJobGroup(group, "rocketstore rebuild: scan CommitLog ranges")
            rdd = sc.parallelize(ranges, max(1, len(ranges)))
            out["scans"] = rdd.map(lambda r: scan_range(r, delay, check_crc, ext_specs)).collect()
        except BaseException as exc:  # surfaced on the calling thread
            out["error"] = exc

    t = threading.Thread(target=run, name="rebuild-scan", daemon=True)
    t.start()
    done = 0
    while t.is_alive():
        t.join(0.2)
        if on_task:
            n = _completed_tasks(sc, group)
            if n > done:
                on_task(n - done)
                done = n
    if "error" in out:
        from .session import short_error
        raise RebuildError(f"rebuild failed: {short_error(out['error'])}") from out["error"]
    if on_task and len(ranges) > done:
        on_task(len(ranges) - done)
    return out["scans"]


def _completed_tasks(sc, group: str) -> int:
    tracker = sc.statusTracker()
    n = 0
    for jid in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(jid)
        for sid in (job.stageIds if job else []):
            st = tracker.getStageInfo(sid)
            n += st.numCompletedTasks if st else 0
    return n


def write_consume_queues(scans: list[RangeScan], cq_root: str, file_size: int,
                         ext_root: str | None = None,
                         ext_file_size: int = 48 << 20) -> tuple[int, int]:
    """All units of each queue in one ``write_cq_units`` call; returns (queues, units).

    With ``ext_root`` each queue also gets its ConsumeQueue-ext stream (units in queue order,
    ``write_ext_stream``) and its units carry the ext addresses in the tags slot."""
    gid: dict[str, int] = {}
    cols = {k: [] for k in ("t", "q", "qo", "phy", "size", "tags", "ts")}
    bitmaps: list = []
    for s in scans:
        remap = np.array([gid.setdefault(t, len(gid)) for t in s.topics] or [0], dtype=np.int64)
        cols["t"].append(remap[s.cq_topic] if len(s.cq_topic) else s.cq_topic.astype(np.int64))
        cols["q"].append(s.cq_queue.astype(np.int64))
        for k, a in (("qo", s.cq_queue_offset), ("phy", s.cq_phy), ("size", s.cq_size), ("tags", s.cq_tags)):
            cols[k].append(a)
        if ext_root is not None:
            cols["ts"].append(s.cq_ts if s.cq_ts is not None else np.zeros(len(s.cq_phy), np.int64))
            bitmaps.extend(s.cq_bitmaps if s.cq_bitmaps is not None else [None] * len(s.cq_phy))
    c = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    n = len(c["t"])
    if n == 0:
        return 0, 0
    key = (c["t"] << 32) | c["q"]
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    cuts = np.flatnonzero(np.diff(key_sorted)) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [n]))
    topics = {v: k for k, v in gid.items()}
    for a, b in zip(starts.tolist(), ends.tolist()):
        sel = order[a:b]
        k = int(key_sorted[a])
        d = queue_dir(cq_root, topics[k >> 32], k & 0xFFFFFFFF)
        tags = c["tags"][sel]
        if ext_root is not None:
            by_qo = sel[np.argsort(c["qo"][sel], kind="stable")]
            units = [encode_unit(t, ts, bitmaps[i]) for t, ts, i in
                     zip(c["tags"][by_qo].tolist(), c["ts"][by_qo].tolist(), by_qo.tolist())]
            addrs = write_ext_stream(queue_dir(ext_root, topics[k >> 32], k & 0xFFFFFFFF),
                                     ext_file_size, units)
            sel, tags = by_qo, np.asarray(addrs, dtype=np.int64)
        write_cq_units(d, file_size, c["qo"][sel], c["phy"][sel], c["size"][sel], tags)
    return len(starts), n


def write_index_files(scans: list[RangeScan], index_dir: str, cfg: StoreConfig,
                      now_ms: int | None = None) -> tuple[int, int, int]:
    """Split the global key stream into files and write each; returns (files, keys, last end ts)."""
    kh = np.concatenate([s.key_hash for s in scans]) if scans else np.zeros(0, np.int32)
    kp = np.concatenate([s.key_phy for s in scans]) if scans else np.zeros(0, np.int64)
    kt = np.concatenate([s.key_ts for s in scans]) if scans else np.zeros(0, np.int64)
    if not cfg.message_index_enable or len(kh) == 0:
        return 0, 0, 0
    os.makedirs(index_dir, exist_ok=True)
    plans = plan_index_files(kp, kt, cfg.max_index_num - 1)
    base_ms = int(time.time() * 1000) if now_ms is None else now_ms
    last_end = 0
    for i, p in enumerate(plans):
        path = os.path.join(index_dir, index_file_name(base_ms + i))
        f = IndexFile.create(path, cfg.max_hash_slot_num, cfg.max_index_num,
                             p.carry_end_phy_offset, p.carry_end_timestamp)
        try:
            put = f.put_batch(kh[p.start:p.stop], kp[p.start:p.stop], kt[p.start:p.stop])
            assert put == p.stop - p.start, "index plan and file capacity disagree"
            f.flush()
            last_end = f.end_timestamp
        finally:
            f.close()
    return len(plans), len(kh), last_end


def _fsync_tree(path: str) -> None:
    for r, _ds, fs in os.walk(path):
        for n in fs:
            fd = os.open(os.path.join(r, n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(r)


_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2); False if not supported here."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL):
            return False
        raise OSError(err, os.strerror(err), a)
    return True


def swap_in(root: str, staging: str, derived: tuple[str, ...] = DERIVED) -> None:
    """Replace ``consumequeue/`` and ``index/`` (and ``consumequeue_ext/``) with the staged trees."""
    old = os.path.join(root, OLD)
    shutil.rmtree(old, ignore_errors=True)
    os.makedirs(old)
    for name in derived:
        live, new = os.path.join(root, name), os.path.join(staging, name)
        os.makedirs(new, exist_ok=True)
        if os.path.exists(live) and _exchange(live, new):
            os.rename(new, os.path.join(old, name))  # ``new`` now holds the old tree
        else:
            if os.path.exists(live):
                os.rename(live, os.path.join(old, name))
            os.rename(new, live)
    fsync_dir(root)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


def rebuild(root: str, *, engine: str = "spark", cfg: StoreConfig | None = None, spark=None,
            master: str | None = None, split_size: int | str | None = "auto",
            check_crc: bool = False,
            on_progress: Callable[[str, int, int], None] | None = None) -> RebuildResult:
    """Recreate every ConsumeQueue and IndexFile of the store at ``root`` (see module doc).

    ``on_progress(phase, done, total)`` reports scanned ranges (phase "scan").
    """
    if engine not in ("spark", "local"):
        raise ValueError(f"engine must be 'spark' or 'local', not {engine!r}")
    root = os.path.abspath(root)
    cfg = store_config(root, cfg)
    if not os.path.isdir(cfg.commitlog_dir):
        raise FileNotFoundError(f"{root}: not a store (no commitlog directory)")
    res = RebuildResult(root=root, engine=engine)
    t0 = time.monotonic()
    with StoreLock(root, posix=True, why="the store is open in another process; stop it before "
                                           "rebuilding"):
        segs = list_segments(cfg.commitlog_dir)
        if engine == "spark":
            from .session import get_session
            spark = spark or get_session(master, app_name="rocketstore-rebuild")
        if split_size == "auto":  # splitting only pays when tasks run in parallel
            split_size = (auto_split_size(segs, spark.sparkContext.defaultParallelism)
                          if engine == "spark" else None)
        ranges = plan_ranges(segs, split_size=split_size)
        res.segments, res.ranges = len(segs), len(ranges)
        delay = parse_delay_levels(cfg.message_delay_level)
        ext = cfg.enable_consume_queue_ext or os.path.isdir(os.path.join(root, EXT_DIR))
        ext_specs = load_filter_specs(os.path.join(root, "config", "consumerFilter.json")) if ext else None
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if on_progress:
                on_progress("scan", done[0], len(ranges))

        if engine == "spark":
            scans = _scan_spark(spark, ranges, delay, check_crc, tick, ext_specs)
        else:
            scans = []
            for r in ranges:
                scans.append(scan_range(r, delay, check_crc, ext_specs))
                tick(1)
        scans.sort(key=lambda s: s.start)
        res.records = sum(s.records for s in scans)
        t1 = time.monotonic()
        staging = os.path.join(root, STAGING)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        res.queues, res.cq_units = write_consume_queues(
            scans, os.path.join(staging, "consumequeue"), cfg.cq_file_size,
            os.path.join(staging, EXT_DIR) if ext else None, cfg.mapped_file_size_consume_queue_ext)
        res.index_files, res.index_keys, index_end = write_index_files(
            scans, os.path.join(staging, "index"), cfg)
        _fsync_tree(staging)
        t2 = time.monotonic()
        swap_in(root, staging, DERIVED + ((EXT_DIR,) if ext else ()))
        ck = StoreCheckpoint(os.path.join(root, "checkpoint"))
        logics = max((s.cq_last_ts for s in scans), default=-1)
        if logics > 0:
            ck.logics_msg_timestamp = logics
        if index_end > 0:
            ck.index_msg_timestamp = index_end
        ck.flush()
        from ..store.timer.offline import detect_precision, rebuild_wheel  # derived from timerlog
        res.timer_slots = rebuild_wheel(root, detect_precision(root, cfg.timer_precision_ms))
        t3 = time.monotonic()
    res.seconds = {"scan": round(t1 - t0, 3), "write": round(t2 - t1, 3),
                   "swap": round(t3 - t2, 3), "total": round(t3 - t0, 3)}
    return res
