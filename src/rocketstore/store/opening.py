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


def valid_end_from(commitlog: CommitLog, start: int) -> int:
    """The end of the last whole valid record at or after ``start`` (a record boundary), by
    the recovery's one rule (``recovery_scan.segment_end``, CRC checked): the tail a slave's
    HA appends may end inside a record (a transfer frame is cut at any byte)."""
    from .recovery_scan import segment_end

    size = commitlog.file_size
    end = start
    for mf in list(commitlog.queue.files):
        base = mf.file_from_offset
        if base + size <= start:
            continue
        rel = start - base if base <= start else 0
        seg = segment_end(mf.mm, base, size, rel, check_crc=True)
        end = seg.end
        if not seg.rolled:
            break
    return min(end, commitlog.max_offset())


def lap_timer(timings: dict[str, float] | None) -> Callable[[str], None]:
    """``lap(name)`` records the seconds since the previous lap (or this call) under ``name``
    in ``timings``; nothing when ``timings`` is None."""
    import time
    clock = time.perf_counter
    t = clock()

    def lap(name: str) -> None:
        nonlocal t
        if timings is not None:
            now = clock()
            timings[name] = round(now - t, 4)
            t = now
    return lap


def promote_store(store: Any, master_epoch: int, sync_state_set: set[int],
                  timings: dict[str, float] | None = None) -> int:
    """A controller-mode slave's open store becomes the master's in place (RocketMQ 5's
    ``changeToMaster``): the HA client stops; the CommitLog is cut to its last whole record
    (the cut bytes set aside in ``<store>/quarantine/`` first, as a recovery would); the new
    epoch opens at that end, which is also the confirm offset; dispatch catches up to it and
    the queue offset table is rebuilt from the ConsumeQueues (the next put takes the next
    offsets); the put path takes puts as a SYNC_MASTER's. Returns the cut point. The timer
    wheel is ``start_timer``'s, apart: it is no part of taking sends."""
    from .ha.autoswitch import AutoSwitchHAService

    lap = lap_timer(timings)
    ha = store.ha
    if not isinstance(ha, AutoSwitchHAService):
        raise RuntimeError("promote_store: not a controller-mode store")
    ha.stop_client()
    lap("ha_client_stop")
    cl = store.commitlog
    top = cl.max_offset()
    end = valid_end_from(cl, min(store.reput.reput_from, top))
    if end < top:
        from . import quarantine
        ev = quarantine.set_aside(store.root, cl.queue.files, end,
                                  f"a torn tail at promotion to master (epoch {master_epoch})")
        cl.truncate(end)
        log.warning("promotion: CommitLog cut at %d (it ended at %d)%s", end, top,
                    f", {ev.bytes} byte(s) kept in {ev.path}" if ev is not None else "")
    lap("cut_tail")
    ha.change_to_master(master_epoch, sync_state_set)
    lap("epoch")
    store.reput.wakeup()
    if not store.reput.wait_dispatched(timeout=30.0):
        raise RuntimeError(f"promotion: dispatch did not reach {end} "
                           f"({store.reput.behind_bytes()} bytes behind)")
    lap("dispatch")
    rebuild_queue_table(cl, store.cq_table)
    lap("queue_table")
    store.cfg.broker_role = "SYNC_MASTER"
    store.cfg.ha_master_address = None
    store.put_path.sync_master = True
    return end


def start_timer(store: Any) -> None:
    """The timer wheel of a store promoted in place (``promote_store``), when enabled."""
    if store.timer is None and store.cfg.timer.timer_wheel_enable and not store.cfg.is_slave:
        _start_timer(store)


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
                              commitlog_min_offset=store.commitlog.min_offset, queue_bounds=bounds,
                              read_data=store.commitlog.get_data)
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
