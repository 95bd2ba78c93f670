"""Opening and closing a ``MessageStore``: the order its parts are loaded, recovered, wired
and started in, and the reverse order they stop in.

``open_store`` loads the CommitLog, ConsumeQueues, ext table and index, recovers (normal or
abnormal, by the ``abort`` file), re-dispatches what the queues lack, then (unless read-only)
records the file sizes, creates ``abort`` and starts the flush and reput services, the timer
wheel, HA and the clean service. ``close_store`` stops them, flushes everything, writes the
checkpoint and removes ``abort`` only if dispatch caught up. Both set and read the parts the
facade declares as typed fields (``MessageStore.commitlog``, ``.reput``, ...; ``store`` is typed
``Any`` here only because this module may not import the facade that imports it): the facade
owns the parts, this module only knows their order.
"""
from __future__ import annotations

import collections
import logging
import os
from typing import TYPE_CHECKING, Any, Callable

from .checkpoint import StoreCheckpoint, atomic_write
from .commitlog import CommitLog
from .consume_queue_ext import ConsumeQueueExtDispatcher, open_ext_table
from .dispatch import ConsumeQueueDispatcher, ConsumeQueueTable, ReputService
from .flush import FlushService
from .lazy_file import OPEN_FILES
from .put_path import PutPath
from .recovery import rebuild_queue_table, recover, repair_short_files
from .store_dir import check_saved_sizes, save_sizes

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .index_service import IndexService

log = logging.getLogger(__name__)


def _index_service_class() -> type[IndexService]:
    from .index_service import IndexService
    return IndexService


def open_store(store: Any) -> None:
    """Load, recover, wire and (unless ``store.read_only``) start the parts of ``store``."""
    cfg = store.cfg
    store.timer = None
    store.abort_path = os.path.join(store.root, "abort")
    store.last_exit_ok = not os.path.exists(store.abort_path)
    store.checkpoint = StoreCheckpoint(os.path.join(store.root, "checkpoint"), read_only=store.read_only)
    check_saved_sizes(store.root, cfg)
    padded = [] if store.read_only else repair_short_files(cfg)
    store.commitlog = CommitLog(cfg)
    store.commitlog.load()
    OPEN_FILES.limit = max(8, cfg.max_open_consume_queue_files)  # (process-wide)
    store.cq_table = ConsumeQueueTable(cfg)
    store.cq_table.load()
    store.index_service = None
    dispatchers: list[Dispatcher] = [ConsumeQueueDispatcher(store.cq_table, store._on_logics_timestamp)]
    store.cq_ext = open_ext_table(cfg)
    store.ext_dispatcher = None
    if store.cq_ext is not None and cfg.enable_consume_queue_ext:
        store.ext_dispatcher = ConsumeQueueExtDispatcher(store.cq_ext, store.cq_table)
        dispatchers.insert(0, store.ext_dispatcher)  # before the ConsumeQueue: it swaps tagsCode
    if cfg.message_index_enable:
        store.index_service = _index_service_class()(cfg, store.checkpoint)
        store.index_service.load(store.last_exit_ok)
        dispatchers.append(store.index_service)
    store.tier = None
    tcfg = cfg.tier_config()
    if tcfg is not None and not store.read_only:  # fed after the queues it reads from
        from .tier.service import TierDispatcher, TierService
        store.tier = TierService(tcfg, store.root, store.cq_table, store.commitlog)
        dispatchers.append(TierDispatcher(store.tier))
    store.reput = ReputService(cfg, store.commitlog, dispatchers, store._confirmed_offset)
    store.recovery_report = recover(
        store.commitlog, store.cq_table, store.checkpoint, store.last_exit_ok,
        cfg.check_crc_on_recover, store.index_service, padded)
    store.reput.reput_from = store.recovery_report.reput_from
    if store.cq_ext is not None:
        store.cq_ext.recover(store.cq_table)
    store.reput.run_until(store.commitlog.max_offset())
    rebuild_queue_table(store.commitlog, store.cq_table)
    if store.tier is not None:
        store.tier.load()  # cuts torn tails: the tier's own files say how far it got
    store.flush_service = FlushService(cfg, store.commitlog, store._on_physic_flushed, store._flush_logics,
                                       store.checkpoint)
    store.put_path = PutPath(cfg, store.commitlog, store.reput, store.flush_service)
    store.clean_service = None
    store.ha = None
    if store.read_only:
        store.put_path.running = False
        return
    store.commitlog.dispatch_feed = collections.deque()  # the reput skips decoding our own appends
    save_sizes(store.root, cfg)
    atomic_write(store.abort_path, str(os.getpid()).encode())  # durable before the first put
    store.flush_service.start()
    store.reput.start()
    if store.tier is not None:
        store.tier.start()
    if cfg.timer.timer_wheel_enable and not cfg.is_slave:  # a slave delivers nothing: its master does
        _start_timer(store)
    ha = cfg.ha
    if ha.controller_ha is not None:  # controller mode: RocketMQ 5's auto-switch HA
        from .ha.autoswitch import AutoSwitchHAService
        auto = AutoSwitchHAService(cfg, store.commitlog, store.reput.wakeup, ha.controller_ha)
        store.ha = auto
        store.replicated_end = lambda: auto.confirm_offset
        auto.start()
        store.put_path.replicas = store.ha
    elif ha.ha_listen_port is not None or cfg.is_slave or ha.broker_role == "SYNC_MASTER":
        from .ha import HAService
        store.ha = HAService(cfg, store.commitlog, store.reput.wakeup)
        store.ha.start()
        store.put_path.replicas = store.ha
    try:
        from .clean import CleanService
    except ImportError:
        pass
    else:
        store.clean_service = CleanService(store)
        store.clean_service.start()


def _start_timer(store: Any) -> None:
    from .timer import TimerMessageStore, TimerStoreAccess
    from ..format.timer_layout import TIMER_TOPIC

    def read_units(index: int, count: int) -> list[tuple[int, int, int]] | None:
        return store.read_consume_queue(TIMER_TOPIC, 0, index, count)

    def bounds() -> tuple[int, int]:
        return store.get_min_offset_in_queue(TIMER_TOPIC, 0), store.get_max_offset_in_queue(TIMER_TOPIC, 0)

    access = TimerStoreAccess(read_units=read_units, look_message=store.commitlog.look_message,
                              put=store.put_message, put_batch=store.put_messages,
                              read_records=store.commitlog.read_record_views,
                              commitlog_max_offset=store.commitlog.max_offset,
                              commitlog_min_offset=store.commitlog.min_offset, queue_bounds=bounds)
    timer = store.timer = TimerMessageStore(store.cfg, access)
    timer.load()
    store.put_path.timer = timer

    def on_arrival(topic: str, *_: object) -> None:
        if topic == TIMER_TOPIC:
            timer.wakeup()
    store.reput.listeners.append(on_arrival)
    timer.start()


def stop_started_services(store: Any) -> None:
    """After a failed open: stop whatever threads were already started."""
    for name in ("ha", "clean_service", "tier", "reput", "flush_service"):
        svc = getattr(store, name, None)
        if svc is not None:
            try:
                svc.stop()
            except Exception:  # noqa: BLE001 - the open's own error is what the caller sees
                log.exception("stopping %s after a failed open", name)


def close_store(store: Any, release_lock: Callable[[], None]) -> None:
    """Stop the services, flush, checkpoint and close every file of an open ``store``;
    ``release_lock()`` runs last (a read-only store holds none)."""
    if store.timer is not None:  # first: its last re-put still goes through the put path
        store.timer.shutdown()
    store.put_path.running = False
    if store.read_only:
        store.commitlog.close()
        for cq in store.cq_table:
            cq.close()
        if store.index_service is not None:
            for f in store.index_service.files:
                f.close()
        return
    if store.ha is not None:
        store.ha.stop()
    if store.clean_service is not None:
        store.clean_service.stop()
    store.reput.wait_dispatched(timeout=10.0)
    store.reput.stop()
    if store.tier is not None:
        store.tier.stop()
    try:
        try:
            store.flush_service.stop()  # CommitLog, then ConsumeQueues + index, checkpoint
        finally:
            if store.index_service is not None:
                store.index_service.shutdown()
        # RocketMQ: keep the abort file unless writeable and fully dispatched; we also keep
        # it after a flush error, so the next open takes the abnormal (re-dispatching) path
        if (store.reput.behind_bytes() == 0 and store.reput.last_error is None
                and store.flush_service.last_error is None and store.put_path.writeable):
            try:
                os.unlink(store.abort_path)
            except FileNotFoundError:
                pass
    finally:
        store.commitlog.close()
        for cq in store.cq_table:
            cq.close()
        if store.cq_ext is not None:
            store.cq_ext.close()
        release_lock()
