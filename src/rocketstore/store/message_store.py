"""``MessageStore``: the facade. Wiring, lifecycle and validation only; no byte layouts here.

Opening a store takes ``<root>/lock`` (``StoreLockedError`` if another store holds it), loads
the CommitLog, ConsumeQueues, checkpoint and index, recovers (normal or abnormal, by the
``abort`` file), re-dispatches what is missing, then starts the flush and reput services and
creates ``abort``. ``shutdown`` stops them, flushes everything, writes the checkpoint and
removes ``abort`` only if dispatch caught up. That order lives in ``opening``; what a store
directory is and the file sizes it was made with, in ``store_dir``.

A **read-only open** (``MessageStore.open_read_only(path)`` or ``StoreConfig(read_only=True)``)
takes no lock and writes nothing: every file is mapped copy-on-write (``MappedFile(private=True)``),
recovery and the dispatch of a tail the ConsumeQueues lack run in memory only, no service is
started, and puts return ``SERVICE_NOT_AVAILABLE``. It works beside a live writer (another
process's ``rocketstore serve``) and sees the store as of the open, up to the last complete
record. A directory that holds no store is refused (``NotAStoreError``) before anything is read.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING, Callable, Sequence

from ..config import StoreConfig
from ..errors import NotAStoreError, StoreClosedError, StoreError
from ..format.message import Message, MessageExt, parse_message_id
from . import read_path
from .lock import StoreLock
from .opening import close_store, open_store, promote_store, start_timer, stop_started_services
from .results import GetMessageResult, GetStatus, PutMessageResult
from .store_dir import adopt_saved_sizes, detect_sizes, is_store_dir

if TYPE_CHECKING:
    from ..format.message import EncodedMessage
    from .checkpoint import StoreCheckpoint
    from .clean import CleanService
    from .commitlog import CommitLog
    from .consume_queue_ext import ConsumeQueueExtDispatcher, ConsumeQueueExtTable
    from .dispatch import ConsumeQueueTable, ReputService
    from .flush import FlushService
    from .ha import HAService
    from .index_service import IndexService
    from .put_path import PutPath
    from .recovery import RecoveryReport
    from .tier.service import TierService
    from .timer import TimerMessageStore


log = logging.getLogger(__name__)

# local answers a tier (store.tier) may do better on: the record left the local CommitLog
# (NO_MATCHED_LOGIC_QUEUE: no local queue at all, as on a broker opened on a tier alone)
_TIER_FALLS = (GetStatus.OFFSET_TOO_SMALL, GetStatus.MESSAGE_WAS_REMOVING,
               GetStatus.OFFSET_FOUND_NULL, GetStatus.NO_MESSAGE_IN_QUEUE,
               GetStatus.NO_MATCHED_LOGIC_QUEUE)


class MessageStore:
    # the parts, made and wired in this order by ``opening.open_store``
    cfg: StoreConfig
    root: str
    read_only: bool
    abort_path: str  # present while the store runs: the next open recovers abnormally
    last_exit_ok: bool
    checkpoint: StoreCheckpoint
    commitlog: CommitLog
    cq_table: ConsumeQueueTable
    cq_ext: ConsumeQueueExtTable | None
    ext_dispatcher: ConsumeQueueExtDispatcher | None
    index_service: IndexService | None
    tier: TierService | None
    reput: ReputService
    recovery_report: RecoveryReport
    flush_service: FlushService
    put_path: PutPath
    timer: TimerMessageStore | None
    ha: HAService | None
    clean_service: CleanService | None
    # controller mode: the highest offset every SyncStateSet member holds (RocketMQ 5's confirm
    # offset); consumers are served nothing above it (None: no such limit)
    replicated_end: Callable[[], int] | None = None

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
            open_store(self)
        except BaseException:
            stop_started_services(self)
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

    # -- lifecycle (the order lives in ``opening``) ----------------------------------------------
    def _take_lock(self) -> None:
        self._lock = StoreLock(self.root).acquire()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        close_store(self, self._release_lock)

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
        """Where dispatch (and so what consumers can be served) ends: flushed bytes under
        SYNC_FLUSH, else every appended byte; in controller mode also no further than the
        replicas' confirm offset, as RocketMQ 5's reput ends at ``getConfirmOffset()`` (with
        readUnCommitted=false): a message the group could still lose in a failover is never
        served, so no reader sees a (queue, offset) later taken by another message."""
        end = self.commitlog.flushed_offset() if self.cfg.sync_flush else self.commitlog.max_offset()
        if self.replicated_end is not None:
            end = min(end, self.replicated_end())
        return end

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

    def append(self, recs: list[EncodedMessage], *, nowait: bool = False,
               defer_sync: bool = False, detail: bool = True) -> list[PutMessageResult] | None:
        """Put independent records encoded already (the broker's send rule) in one append, a
        result each (``PutPath.append``; ``detail=False``: a status each, no msgId or
        offsets); None: ``nowait`` and the append would block."""
        return self.put_path.append(recs, nowait=nowait, defer_sync=defer_sync, detail=detail)

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
        cq = self.cq_table.find(topic, queue_id)
        # the tier answers as tieredStorageLevel says (RocketMQ's fetchFromCurrentStore)
        level = self.tier.level if self.tier is not None and message_filter is None else "DISABLE"
        if level == "FORCE" or (level == "NOT_IN_MEM" and not self._in_mem(cq, offset)):
            try:
                tiered = self.tier.get_message(topic, queue_id, offset, max_msgs, subscription,
                                               decode, cq.max_offset_in_queue() if cq is not None else 0)
            except OSError as e:  # the object store is down or a record is bad: local answers
                log.warning("tier read of %s-%d at %d failed (%s); reading the local store",
                            topic, queue_id, offset, e)
                tiered = None
            if tiered is not None:
                return tiered
        result = read_path.get_message(self.cfg, self.commitlog, cq, offset, max_msgs,
                                       subscription, decode, ext=ext, message_filter=message_filter)
        if level != "DISABLE" and result.status in _TIER_FALLS:
            # the local CommitLog no longer holds it: the tier may (store.tier.service)
            tiered = self.tier.get_message(topic, queue_id, offset, max_msgs, subscription, decode,
                                           cq.max_offset_in_queue() if cq is not None else 0)
            if tiered is not None:
                return tiered
        return result

    def _in_mem(self, cq, offset: int) -> bool:
        """RocketMQ's ``checkInMemByConsumeOffset``, as our read path judges memory: the
        record is local and within the share of RAM the page cache keeps."""
        u = cq.unit(offset) if cq is not None else None
        if u is None or u[0] < self.commitlog.min_offset():
            return False
        return not read_path.in_disk(self.cfg, u[0], self.commitlog.max_offset())

    def set_filter_bitmap_source(self, source) -> None:
        """Compute a SQL92 bitmap per message from now on (``enableCalcFilterBitMap``); the
        source is ``(topics, props_of(i), store_timestamps) -> [bytes | None]``."""
        if self.ext_dispatcher is not None:
            self.ext_dispatcher.bitmap_source = source

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        return self.commitlog.look_message(offset)

    def records_at(self, offsets: Sequence[int]) -> list[memoryview | None]:
        """The raw record at each CommitLog offset (zero-copy views; None where none starts
        there): ``CommitLog.records_at``."""
        return self.commitlog.records_at(offsets)

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
        end = (1 << 63) - 1 if end is None else end
        result = self.index_service.query_message(topic, key, max_num, begin, end,
                                                  self.commitlog.look_message)
        if self.tier is not None and self.tier.level != "DISABLE" and len(result.messages) < max_num:
            # the tier's INDEX flat file: keys whose local copy is gone (one per queue offset)
            have = {(m.queue_id, m.queue_offset) for m in result.messages}
            try:
                tiered = self.tier.query_message(topic, key, max_num, begin, end)
            except OSError as e:  # the object store is down: the local answer stands
                log.warning("tier query of %s key %r failed (%s)", topic, key, e)
                tiered = []
            for m in tiered:
                if (m.queue_id, m.queue_offset) not in have and len(result.messages) < max_num:
                    have.add((m.queue_id, m.queue_offset))
                    result.messages.append(m)
        return result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.cq_table.find(topic, queue_id)
        return cq.max_offset_in_queue() if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The first offset a pull can read: the tier's when it reaches further back."""
        cq = self.cq_table.find(topic, queue_id)
        local = cq.min_offset_in_queue() if cq else 0
        held = self.tier.bounds(topic, queue_id) \
            if self.tier is not None and self.tier.level != "DISABLE" else None
        return min(local, held[0]) if held is not None else local

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

    def promote_to_master(self, master_epoch: int, sync_state_set: set[int],
                          timings: dict[str, float] | None = None) -> int:
        """Controller mode: this slave's store becomes the master's without closing
        (``opening.promote_store``); returns where the CommitLog now ends."""
        self._check_open()
        return promote_store(self, master_epoch, sync_state_set, timings)

    def start_timer(self) -> None:
        """The timer wheel after ``promote_to_master`` (when timerWheelEnable)."""
        self._check_open()
        start_timer(self)

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
