"""``MessageStore``: the facade. Wiring, lifecycle and validation only; no byte layouts here.

Opening a store takes ``<root>/lock`` (``StoreLockedError`` if another store holds it), loads
the CommitLog, ConsumeQueues, checkpoint and index, recovers (normal or abnormal, by the
``abort`` file), re-dispatches what is missing, then starts the flush and reput services and
creates ``abort``. ``shutdown`` stops them, flushes everything, writes the checkpoint and
removes ``abort`` only if dispatch caught up.

A **read-only open** (``MessageStore.open_read_only(path)`` or ``StoreConfig(read_only=True)``)
takes no lock and writes nothing: every file is mapped copy-on-write (``MappedFile(private=True)``),
recovery and the dispatch of a tail the ConsumeQueues lack run in memory only, no service is
started, and puts return ``SERVICE_NOT_AVAILABLE``. It works beside a live writer (another
process's ``rocketstore serve``) and sees the store as of the open, up to the last complete
record. A directory that holds no store is refused (``NotAStoreError``) before anything is read.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
import threading
from typing import Callable, Sequence

from ..config import StoreConfig
from ..errors import CorruptFileError, NotAStoreError, StoreClosedError, StoreError
from ..format.message import Message, MessageExt, parse_message_id
from . import read_path
from .checkpoint import StoreCheckpoint, atomic_write
from .lock import StoreLock
from .commitlog import CommitLog
from .consume_queue_ext import ConsumeQueueExtDispatcher, open_ext_table
from .dispatch import ConsumeQueueDispatcher, ConsumeQueueTable, ReputService
from .flush import FlushService
from .put_path import PutPath
from .recovery import RecoveryReport, rebuild_queue_table, recover, repair_short_files
from .results import GetMessageResult, GetStatus, PutMessageResult

log = logging.getLogger(__name__)

SIZES_FILE = "store.properties"  # <root>/config/: the file sizes, so tools reopen the store
# what a store directory holds; a directory with none of these is not a store
STORE_MARKERS = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock",
                 os.path.join("config", SIZES_FILE))


def is_store_dir(path: str, commitlog_dir: str | None = None) -> bool:
    """Whether ``path`` looks like a store root (any of its files or directories exists)."""
    if not os.path.isdir(path):
        return False
    if commitlog_dir is not None and os.path.isdir(commitlog_dir):
        return True
    return any(os.path.exists(os.path.join(path, m)) for m in STORE_MARKERS)


def detect_sizes(store_dir: str) -> dict:
    """File sizes of an existing store (``config/store.properties``, else measured from its
    files), so it opens without a config file. Reads only."""
    saved = os.path.join(store_dir, "config", SIZES_FILE)
    if os.path.exists(saved):
        cfg = StoreConfig.from_properties(saved)
        return {k: getattr(cfg, k) for k in ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
                                             "max_hash_slot_num", "max_index_num")}
    out: dict = {}
    cl = os.path.join(store_dir, "commitlog")
    if os.path.isdir(cl):
        names = sorted(n for n in os.listdir(cl) if len(n) == 20 and n.isdigit())
        if names:
            out["mapped_file_size_commitlog"] = os.path.getsize(os.path.join(cl, names[0]))
    cq = os.path.join(store_dir, "consumequeue")
    if os.path.isdir(cq):
        for topic in sorted(os.listdir(cq)):
            tdir = os.path.join(cq, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                d = os.path.join(tdir, qid)
                files = sorted(n for n in os.listdir(d) if len(n) == 20 and n.isdigit()) if os.path.isdir(d) else []
                if files:
                    out["mapped_file_size_consume_queue"] = os.path.getsize(os.path.join(d, files[0]))
                    break
            if "mapped_file_size_consume_queue" in out:
                break
    idx = os.path.join(store_dir, "index")
    if os.path.isdir(idx):
        from .index_service import _file_sizes
        names = sorted(os.listdir(idx))
        if names:
            out["max_hash_slot_num"], out["max_index_num"] = _file_sizes(
                os.path.join(idx, names[0]), None, None)
    return out


def _index_service_class():
    from .index_service import IndexService
    return IndexService


_SIZE_FIELDS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
                "max_hash_slot_num", "max_index_num")


def adopt_saved_sizes(cfg: StoreConfig) -> StoreConfig:
    """``cfg`` with the file sizes an existing store was created with (``config/
    store.properties``) wherever ``cfg`` left a size at its default: opening a store needs no
    knowledge of how it was made. A size the caller set to something else still has to match
    (``_check_saved_sizes`` refuses the open otherwise)."""
    path = os.path.join(cfg.store_path_root_dir, "config", SIZES_FILE)
    if not os.path.exists(path):
        return cfg
    try:
        saved = StoreConfig.from_properties(path)
    except (OSError, ValueError):
        return cfg  # the check that follows names the file
    defaults = {f.name: f.default for f in dataclasses.fields(StoreConfig)}
    for n in _SIZE_FIELDS:  # in place: the broker shares this config object with the store
        if getattr(cfg, n) == defaults[n] and getattr(saved, n) != defaults[n]:
            setattr(cfg, n, getattr(saved, n))
    return cfg


class MessageStore:
    def __init__(self, cfg: StoreConfig) -> None:
        cfg = adopt_saved_sizes(cfg)
        self.cfg = cfg
        self.root = cfg.store_path_root_dir
        self.read_only = cfg.read_only
        self._closed = True
        self._lock: StoreLock | None = None
        if self.read_only:
            if not is_store_dir(self.root, cfg.store_path_commit_log):
                raise NotAStoreError(f"{self.root}: not a store directory (no commitlog, "
                                     "consumequeue, index or checkpoint)")
        else:
            os.makedirs(self.root, exist_ok=True)
            self._take_lock()
        try:
            self._open()
        except BaseException:
            self._stop_started_services()
            self._release_lock()
            raise
        self._closed = False

    @classmethod
    def open_read_only(cls, path: str, cfg: StoreConfig | None = None, **overrides) -> "MessageStore":
        """Open the store at ``path`` without its lock, writing nothing (see the module doc).

        File sizes come from ``cfg`` when given, else from the store itself (``detect_sizes``).
        Raises ``NotAStoreError`` for a directory that holds no store.
        """
        path = os.fspath(path)
        if cfg is None:
            if not is_store_dir(path):
                raise NotAStoreError(f"{path}: not a store directory (no commitlog, consumequeue, "
                                     "index or checkpoint)")
            cfg = StoreConfig(store_path_root_dir=path, **detect_sizes(path))
        return cls(cfg.replace(store_path_root_dir=path, read_only=True, **overrides))

    # -- lifecycle ------------------------------------------------------------------------------
    def _stop_started_services(self) -> None:
        """After a failed open: stop whatever threads were already started."""
        for name in ("ha", "clean_service", "reput", "flush_service"):
            svc = getattr(self, name, None)
            if svc is not None:
                try:
                    svc.stop()
                except Exception:  # noqa: BLE001 - the open's own error is what the caller sees
                    log.exception("stopping %s after a failed open", name)

    def _take_lock(self) -> None:
        self._lock = StoreLock(self.root).acquire()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _open(self) -> None:
        cfg = self.cfg
        self.timer = None
        self.abort_path = os.path.join(self.root, "abort")
        self.last_exit_ok = not os.path.exists(self.abort_path)
        self.checkpoint = StoreCheckpoint(os.path.join(self.root, "checkpoint"), read_only=self.read_only)
        self._check_saved_sizes()
        padded = [] if self.read_only else repair_short_files(cfg)
        self.commitlog = CommitLog(cfg)
        self.commitlog.load()
        self.cq_table = ConsumeQueueTable(cfg)
        self.cq_table.load()
        self.index_service = None
        dispatchers: list = [ConsumeQueueDispatcher(self.cq_table, self._on_logics_timestamp)]
        self.cq_ext = open_ext_table(cfg)
        self.ext_dispatcher = None
        if self.cq_ext is not None and cfg.enable_consume_queue_ext:
            self.ext_dispatcher = ConsumeQueueExtDispatcher(self.cq_ext, self.cq_table)
            dispatchers.insert(0, self.ext_dispatcher)  # before the ConsumeQueue: it swaps tagsCode
        if cfg.message_index_enable:
            self.index_service = _index_service_class()(cfg, self.checkpoint)
            self.index_service.load(self.last_exit_ok)
            dispatchers.append(self.index_service)
        self.reput = ReputService(cfg, self.commitlog, dispatchers, self._confirmed_offset)
        self.recovery_report: RecoveryReport = recover(
            self.commitlog, self.cq_table, self.checkpoint, self.last_exit_ok,
            cfg.check_crc_on_recover, self.index_service, padded)
        self.reput.reput_from = self.recovery_report.reput_from
        if self.cq_ext is not None:
            self.cq_ext.recover(self.cq_table)
        self.reput.run_until(self.commitlog.max_offset())
        rebuild_queue_table(self.commitlog, self.cq_table)
        self.flush_service = FlushService(cfg, self.commitlog, self._on_physic_flushed, self._flush_logics,
                                          self.checkpoint)
        self.put_path = PutPath(cfg, self.commitlog, self.reput, self.flush_service)
        self.clean_service = None
        self.ha = None
        if self.read_only:
            self.put_path.running = False
            return
        self.commitlog.dispatch_feed = collections.deque()  # the reput skips decoding our own appends
        self._save_sizes()
        atomic_write(self.abort_path, str(os.getpid()).encode())  # durable before the first put
        self.flush_service.start()
        self.reput.start()
        if cfg.timer_wheel_enable and not cfg.is_slave:  # a slave delivers nothing: its master does
            self._start_timer()
        if cfg.ha_listen_port is not None or cfg.is_slave or cfg.broker_role == "SYNC_MASTER":
            from .ha import HAService
            self.ha = HAService(cfg, self.commitlog, self.reput.wakeup)
            self.ha.start()
            self.put_path.replicas = self.ha
        try:
            from .clean import CleanService
        except ImportError:
            pass
        else:
            self.clean_service = CleanService(self)
            self.clean_service.start()

    def _start_timer(self) -> None:
        from .timer import TimerMessageStore, TimerStoreAccess
        from ..format.timer_layout import TIMER_TOPIC

        def read_units(index: int, count: int):
            return self.read_consume_queue(TIMER_TOPIC, 0, index, count)

        def bounds() -> tuple[int, int]:
            return self.get_min_offset_in_queue(TIMER_TOPIC, 0), self.get_max_offset_in_queue(TIMER_TOPIC, 0)

        access = TimerStoreAccess(read_units=read_units, look_message=self.commitlog.look_message,
                                  put=self.put_message, put_batch=self.put_messages,
                                  read_records=self.commitlog.read_record_views,
                                  commitlog_max_offset=self.commitlog.max_offset,
                                  commitlog_min_offset=self.commitlog.min_offset, queue_bounds=bounds)
        self.timer = TimerMessageStore(self.cfg, access)
        self.timer.load()
        self.put_path.timer = self.timer
        timer = self.timer

        def on_arrival(topic: str, *_: object) -> None:
            if topic == TIMER_TOPIC:
                timer.wakeup()
        self.reput.listeners.append(on_arrival)
        self.timer.start()

    def _check_saved_sizes(self) -> None:
        """A store opened with other file sizes than it was created with is refused up front
        (before anything could pad or truncate a file to the wrong size)."""
        path = os.path.join(self.root, "config", SIZES_FILE)
        if not os.path.exists(path):
            return
        saved = StoreConfig.from_properties(path)
        for name in ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
                     "max_hash_slot_num", "max_index_num"):
            want, have = getattr(saved, name), getattr(self.cfg, name)
            if want != have:
                raise CorruptFileError(path, f"store was created with {name}={want}, opened with {have}")

    def _save_sizes(self) -> None:
        path = os.path.join(self.root, "config", SIZES_FILE)
        if os.path.exists(path):
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        c = self.cfg
        text = (f"mappedFileSizeCommitLog={c.mapped_file_size_commitlog}\n"
                f"mappedFileSizeConsumeQueue={c.mapped_file_size_consume_queue}\n"
                f"maxHashSlotNum={c.max_hash_slot_num}\nmaxIndexNum={c.max_index_num}\n")
        atomic_write(path, text.encode())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.timer is not None:  # first: its last re-put still goes through the put path
            self.timer.shutdown()
        self.put_path.running = False
        if self.read_only:
            self.commitlog.close()
            for cq in self.cq_table:
                cq.close()
            if self.index_service is not None:
                for f in self.index_service.files:
                    f.close()
            return
        if self.ha is not None:
            self.ha.stop()
        if self.clean_service is not None:
            self.clean_service.stop()
        self.reput.wait_dispatched(timeout=10.0)
        self.reput.stop()
        try:
            try:
                self.flush_service.stop()  # CommitLog, then ConsumeQueues + index, checkpoint
            finally:
                if self.index_service is not None:
                    self.index_service.shutdown()
            # RocketMQ: keep the abort file unless writeable and fully dispatched; we also keep
            # it after a flush error, so the next open takes the abnormal (re-dispatching) path
            if (self.reput.behind_bytes() == 0 and self.reput.last_error is None
                    and self.flush_service.last_error is None and self.put_path.writeable):
                try:
                    os.unlink(self.abort_path)
                except FileNotFoundError:
                    pass
        finally:
            self.commitlog.close()
            for cq in self.cq_table:
                cq.close()
            if self.cq_ext is not None:
                self.cq_ext.close()
            self._release_lock()

    close = shutdown

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.root}: store is shut down")

    # -- service callbacks ----------------------------------------------------------------------
    def _confirmed_offset(self) -> int:
        return self.commitlog.flushed_offset() if self.cfg.sync_flush else self.commitlog.max_offset()

    def _on_logics_timestamp(self, ts: int) -> None:
        self.checkpoint.logics_msg_timestamp = ts

    def _on_physic_flushed(self, ts: int) -> None:
        self.checkpoint.physic_msg_timestamp = ts

    def _flush_logics(self, least_pages: int = 0) -> None:
        """Payload only: the flush service writes the checkpoint after this returns."""
        if self.cq_ext is not None:
            self.cq_ext.flush()  # before the units that point at it
        for cq in self.cq_table:
            cq.flush(least_pages)
        if self.index_service is not None:
            self.index_service.flush()

    # -- write ----------------------------------------------------------------------------------
    def put_message(self, msg: Message, *, nowait: bool = False,
                    defer_sync: bool = False) -> PutMessageResult:
        """``nowait=True`` (for event loops): None instead of blocking, nothing written.
        ``defer_sync=True`` (SYNC_FLUSH): return once appended, with ``sync_offset`` set; the
        caller waits for durability itself (``flush_service.add_listener``)."""
        return self.put_path.put([msg], batch=False, nowait=nowait,  # type: ignore[return-value]
                                 defer_sync=defer_sync)

    def put_messages(self, msgs: Sequence[Message], *, nowait: bool = False,
                     defer_sync: bool = False) -> PutMessageResult:
        return self.put_path.put(list(msgs), batch=True, nowait=nowait,  # type: ignore[return-value]
                                 defer_sync=defer_sync)

    # -- read -----------------------------------------------------------------------------------
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                    subscription: str | None = None, *, decode: bool = True,
                    message_filter=None) -> GetMessageResult:
        """``message_filter``: a SQL92 filter (``broker.state.filters.ExpressionMessageFilter``)
        used instead of the tag ``subscription``."""
        self._check_open()
        if not isinstance(queue_id, int) or queue_id < 0 or not isinstance(offset, int) or offset < 0:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        ext = self.cq_ext.find(topic, queue_id) if self.cq_ext is not None else None
        return read_path.get_message(self.cfg, self.commitlog, self.cq_table.find(topic, queue_id),
                                     offset, max_msgs, subscription, decode, ext=ext,
                                     message_filter=message_filter)

    def set_filter_bitmap_source(self, source) -> None:
        """Compute a SQL92 bitmap per message from now on (``enableCalcFilterBitMap``); the
        source is ``(topics, props_of(i), store_timestamps) -> [bytes | None]``."""
        if self.ext_dispatcher is not None:
            self.ext_dispatcher.bitmap_source = source

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        return self.commitlog.look_message(offset)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        try:
            _, offset = parse_message_id(msg_id)
        except ValueError:
            return None
        return self.commitlog.look_message(offset)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None):
        self._check_open()
        if self.index_service is None:
            raise StoreError("message index is disabled (message_index_enable=False)")
        return self.index_service.query_message(topic, key, max_num, begin,
                                                (1 << 63) - 1 if end is None else end,
                                                self.commitlog.look_message)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.max_offset_in_queue() if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.min_offset_in_queue() if cq else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.offset_by_time(timestamp, self.commitlog.store_timestamp_at) if cq else 0

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        u = cq.unit(offset) if cq and offset >= 0 else None
        return self.commitlog.store_timestamp_at(u[0], u[1]) if u else -1

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue()) if cq else -1

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        u = cq.unit(offset) if cq else None
        return u[0] if u else 0

    def get_max_phy_offset(self) -> int:
        return self.commitlog.max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commitlog.min_offset()

    def ha_status(self) -> dict | None:
        """Replication as operators see it (``store.ha.HAService.status``); None: no HA."""
        return self.ha.status() if self.ha is not None else None

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind_bytes()

    def dispatch_health(self):
        """``DispatchHealth``: ``ok`` False while dispatch (ConsumeQueue / index building) is
        failing — it retries on its own, and puts are refused until it recovers."""
        return self.reput.health()

    @property
    def dispatch_error(self) -> str | None:
        """The current dispatch failure, None while dispatch is healthy."""
        return self.reput.health().error

    def wait_dispatched(self, timeout: float | None = 5.0) -> bool:
        return self.reput.wait_dispatched(timeout)

    def add_arrival_listener(self, fn: Callable[[str, int, int], None]) -> None:
        self.reput.listeners.append(fn)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for (topic, qid) in sorted(self.cq_table.queues):
            out.setdefault(topic, []).append(qid)
        return out

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the message at ``offset`` of a queue has probably left the page cache
        (RocketMQ's ``checkInDiskByConsumeOffset``); False when there is no such message."""
        cq = self.cq_table.find(topic, queue_id)
        u = cq.unit(offset) if cq is not None and offset >= 0 else None
        if u is None:
            return False
        return read_path.in_disk(self.cfg, u[0], self.commitlog.max_offset())

    def read_consume_queue(self, topic: str, queue_id: int, index: int,
                           count: int) -> list[tuple[int, int, int]] | None:
        """Up to ``count`` ConsumeQueue units ``(physical_offset, size, tags_code)`` from queue
        offset ``index`` (within one file, as RocketMQ's ``getIndexBuffer``); None when the
        queue does not exist, [] when ``index`` holds no unit."""
        cq = self.cq_table.find(topic, queue_id)
        if cq is None:
            return None
        units = cq.read_units(index, max(0, count))
        if units is None:
            return []
        return [(int(u["offset"]), int(u["size"]), int(u["tags_code"])) for u in units]

    def delete_topic(self, topic: str) -> int:
        """Drop a topic's ConsumeQueues and queue-offset counters (RocketMQ's
        ``cleanUnusedTopic`` for one topic): its messages stay in the CommitLog until they
        expire, and a topic created again under the name starts its queues at offset 0.
        Returns the number of queues removed."""
        self._check_open()
        self.wait_dispatched(5.0)  # its appended records first reach their queues, then go
        with self.commitlog.lock:
            for key in [k for k in self.commitlog.topic_queue_table if k[0] == topic]:
                del self.commitlog.topic_queue_table[key]
            doomed = [k for k in list(self.cq_table.queues) if k[0] == topic]
            for key in doomed:
                cq = self.cq_table.queues.pop(key)
                cq.destroy()
        tdir = os.path.join(self.cfg.consume_queue_dir, topic)
        if os.path.isdir(tdir):
            shutil.rmtree(tdir, ignore_errors=True)
        return len(doomed)

    def clean_expired_files(self, force: bool = False) -> int:
        """Delete expired CommitLog segments (and follow with ConsumeQueues and index)."""
        self._check_open()
        if self.clean_service is None:
            return 0
        return self.clean_service.run_once(manual=force)
