"""``Broker``: wires the store, the state managers, the services and the two servers.

Theory of operation: everything protocol-facing runs on one asyncio event loop; every call
into the ``MessageStore`` (which may touch files, fsync or wait for a group commit) runs on a
small thread pool through ``Broker.run``. The store's reput thread reports new messages through
``add_arrival_listener``, which feeds the long-polling ``PullHoldService``. Background work —
delay-level delivery, persisting consumer offsets, expiring silent consumers — are asyncio tasks.

Lifecycle: ``start()`` opens the store (recovery included), loads ``config/*.json`` and starts
both listeners; ``stop()`` closes the listeners (no new connections), releases held pulls, lets
in-flight requests finish for ``shutdown_grace_s``, closes connections, persists state and shuts
the store down cleanly (flush, checkpoint, abort file removed).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..format.message import Message
from ..remoting.codes import RequestCode
from ..remoting.command import RemotingCommand
from .config import BrokerConfig
from .consumers import ConsumerManager
from .filters import ConsumerFilterRegistry
from .producers import ProducerManager
from .stats import BrokerStats
from .subgroups import SubscriptionGroupManager
from .longpoll import PullHoldService
from ..format.batch import parse_delay_levels
from .schedule import ScheduleMessageService
from .writer import PutWriter
from .state import ConsumerOffsetManager, DelayOffsetStore, TopicConfigManager

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, store_config: Any, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self.store_config = store_config
        self.store: Any = None
        self.delay_levels_ms = parse_delay_levels(store_config.message_delay_level)
        config_dir = os.path.join(store_config.store_path_root_dir, "config")
        self.topics = TopicConfigManager(config_dir, self.config.default_topic_queue_nums)
        self.offsets = ConsumerOffsetManager(config_dir)
        self.delay_offsets = DelayOffsetStore(config_dir)
        self.consumers = ConsumerManager(self.config.channel_expired_timeout_ms)
        self.filters = ConsumerFilterRegistry(
            config_dir, max_error_rate=self.config.max_error_rate_of_bloom_filter,
            expect_consumer_num=self.config.expect_consumer_num_use_filter,
            clean_time_span_ms=self.config.filter_data_clean_time_span_ms)
        self.filters.load()
        self.producers = ProducerManager(self.config.channel_expired_timeout_ms)
        self.subgroups = SubscriptionGroupManager(config_dir)
        self.stats = BrokerStats()
        self.executor = ThreadPoolExecutor(self.config.executor_threads,
                                           thread_name_prefix="broker-store")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.hold: PullHoldService | None = None
        self.schedule: ScheduleMessageService | None = None
        self.transactions: Any = None  # transaction.TransactionalMessageService, once started
        self.transaction_check: Any = None
        self.writer: PutWriter | None = None
        self.sync_waiter: Any = None  # syncflush.SyncFlushWaiter under SYNC_FLUSH
        self.servers: list[Any] = []
        self.proxy: Any = None  # rocketstore.proxy.GrpcProxy when config.grpc_port is set
        self.registration: Any = None  # NameServerRegistration when --namesrv is given
        self.route_perms: Any = None  # namesrv.LocalRoutePerms of the in-process name server
        self.handler_wrappers: list[Callable[[dict], dict]] = []  # e.g. ops.stats.instrument
        self.acl: Any = None  # acl_service.PlainPermissionManager when aclEnable
        self._tasks: list[asyncio.Task] = []

    # -- helpers used by processors -------------------------------------------------------------
    @property
    def store_host(self) -> str:
        return self.store_config.store_host

    async def run(self, fn: Callable, *args: Any) -> Any:
        """Run a blocking store call on the executor."""
        assert self.loop is not None
        return await self.loop.run_in_executor(self.executor, fn, *args)

    async def put(self, fn: Callable, *args: Any) -> Any:
        """Run a put (``put_blocking``, ``put_batch``): inline or on the put thread
        (``PutWriter``); under SYNC_FLUSH then wait, on the loop, for its group commit
        (``syncflush``)."""
        if self.writer is not None:
            if self.sync_waiter is None:
                return await self.writer.submit(fn, *args)
            if fn == self.put_blocking:
                fn = self._put_deferred
            elif fn == self.put_batch:
                fn = self._put_batch_deferred
            result = await self.writer.submit(fn, *args)
            return await self.sync_waiter.wait(result)
        return await self.run(fn, *args)

    def put_blocking(self, msg: Message, nowait: bool = False) -> Any:
        """Put one message (blocking; ``nowait``: None rather than block, see ``PutWriter``).
        The store itself reroutes a ``DELAY`` level through ``SCHEDULE_TOPIC_XXXX``, as
        RocketMQ's CommitLog does."""
        if msg.store_host is None:
            msg.store_host = self.store_host
        return self.store.put_message(msg, nowait=nowait)

    def put_batch(self, msgs: list[Message], nowait: bool = False) -> Any:
        """Put a batch (as ``put_blocking``)."""
        return self.store.put_messages(msgs, nowait=nowait)

    def _put_deferred(self, msg: Message, nowait: bool = False) -> Any:
        """SYNC_FLUSH through ``put``: appended, not yet durable (``sync_offset``)."""
        if msg.store_host is None:
            msg.store_host = self.store_host
        return self.store.put_message(msg, nowait=nowait, defer_sync=True)

    def _put_batch_deferred(self, msgs: list[Message], nowait: bool = False) -> Any:
        return self.store.put_messages(msgs, nowait=nowait, defer_sync=True)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every live consumer of ``group`` to rebalance now (oneway, code 40)."""
        for conn in self.consumers.connections(group):
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": group}, oneway=True, language="JAVA")
            try:
                conn.notify(cmd)
            except Exception:  # a closing connection: it is dropped by its own close
                pass

    def connection_closed(self, conn: Any) -> None:
        self.producers.connection_closed(conn)
        for group in self.consumers.connection_closed(conn):
            self.notify_consumer_ids_changed(group)
            self.consumer_group_changed(group)

    def _consumer_ids_changed(self, group: str) -> None:
        self.notify_consumer_ids_changed(group)
        self.consumer_group_changed(group)

    def consumer_group_changed(self, group: str) -> None:
        """A group lost clients: when none is left its SQL92 filters die (RocketMQ's UNREGISTER)."""
        if self.consumers.group(group) is None:
            self.filters.unregister(group)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        from .. import MessageStore  # the facade; imported late so the codec stays importable

        self.loop = asyncio.get_running_loop()
        self.hold = PullHoldService(self.loop)
        self.store = await self.run(_open_store, MessageStore, self.store_config)
        self.store.add_arrival_listener(self.hold.arrival)
        if self.config.enable_calc_filter_bit_map:
            self.store.set_filter_bitmap_source(self.filters.bitmaps)
        if getattr(self.store_config, "sync_flush", False):
            from .syncflush import SyncFlushWaiter
            self.sync_waiter = SyncFlushWaiter(self.loop, self.store.commitlog.flushed_offset,
                                               self.store_config.sync_flush_timeout)
            self.store.flush_service.add_listener(self.sync_waiter.on_flush)
        self.writer = PutWriter(self.loop, inline=(self.put_blocking, self.put_batch,
                                                   self._put_deferred, self._put_batch_deferred))
        try:
            await self._start_servers()
        except BaseException:
            await self.stop()  # close the store cleanly: no abort file, lock released
            raise

    async def _start_servers(self) -> None:
        from .server import RemotingServer
        from . import admin, locks, namesrv, pull, send, transaction
        from . import admin_consumers, admin_groups, admin_runtime, admin_topics

        self.topics.persist()
        self._start_transactions()
        handlers: dict[int, Any] = {}
        from . import acl_service, reply, sql92
        for mod in (send, pull, admin, locks, admin_topics, admin_groups, admin_runtime,
                    transaction, sql92, reply, admin_consumers, acl_service):
            handlers.update(mod.handlers(self))
        if self.config.acl_enable:  # every request checked first (RocketMQ's ACL RPC hook)
            self.acl = acl_service.start_acl(self)
            handlers = acl_service.guard(self.acl, handlers)
        for wrap in self.handler_wrappers:
            handlers = wrap(handlers)
        broker_srv = RemotingServer(self, handlers, "broker")
        await broker_srv.start(self.config.host, self.config.port)
        self.config.port = broker_srv.port
        if self.store_host.rsplit(":", 1)[-1] == "0":
            self.store_config.store_host = f"{self.config.host}:{broker_srv.port}"
        self.servers.append(broker_srv)
        if self.config.namesrv_port is not None:
            self.route_perms = namesrv.LocalRoutePerms()
            ns = RemotingServer(self, namesrv.handlers(self, perms=self.route_perms), "namesrv")
            await ns.start(self.config.host, self.config.namesrv_port)
            self.config.namesrv_port = ns.port
            self.servers.append(ns)
        if self.config.namesrv_addr:
            await self._register_at_name_servers()
        self.schedule = ScheduleMessageService(self)
        self.schedule.start()
        self.transaction_check.start()
        if self.config.grpc_port is not None:
            await self._start_grpc()
        self._tasks.append(self.loop.create_task(self._housekeeping(), name="housekeeping"))
        log.info("broker %s listening on %s:%s, name server on %s", self.config.broker_name,
                 self.config.host, self.config.port, self.config.namesrv_port)

    def _start_transactions(self) -> None:
        from .transaction import (TransactionalMessageCheckService, TransactionalMessageService,
                                  TransactionConfig)

        c = self.config
        tcfg = TransactionConfig(c.transaction_timeout_ms, c.transaction_check_interval_ms,
                                 c.transaction_check_max,
                                 int(getattr(self.store_config, "file_reserved_time", 72)))
        self.transactions = TransactionalMessageService(self.store, self.topics, self.offsets,
                                                        self.put_blocking, tcfg)
        self.transaction_check = TransactionalMessageCheckService(
            self.transactions, self.run, self.producers.available_connection)

    async def _start_grpc(self) -> None:
        from ..proxy import BrokerPieces, GrpcProxy

        pieces = BrokerPieces(store=self.store, topics=self.topics, offsets=self.offsets,
                              config=self.config, run=self.run, put=self.put,
                              put_message=self.put_blocking, hold=self.hold,
                              delay_levels_ms=self.delay_levels_ms,
                              transactions=self.transactions, producers=self.producers,
                              subgroups=self.subgroups, consumers=self.consumers,
                              filters=self.filters,
                              consumer_ids_changed=self._consumer_ids_changed,
                              route_perm=self._route_perm, acl=self.acl)
        self.proxy = GrpcProxy(pieces, self.config.host, self.config.grpc_port)
        await self.proxy.start()
        self.config.grpc_port = self.proxy.port

    def _route_perm(self, tc: Any) -> int:
        perms = self.route_perms
        return perms.perm(self.topics, tc.topic_name, tc.perm) if perms is not None else tc.perm

    async def _register_at_name_servers(self) -> None:
        from .registration import NameServerRegistration, parse_namesrv_addrs

        cfg = self.config
        self.registration = NameServerRegistration(
            parse_namesrv_addrs(cfg.namesrv_addr or ""), cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name, broker_addr=lambda: cfg.broker_addr,
            topic_table=lambda: {t.topic_name: t.to_json() for t in self.topics.topics()},
            period_s=cfg.register_name_server_period_ms / 1000.0,
            order_topics=self.topics.update_order_topics)
        await self.registration.start()

    async def _housekeeping(self) -> None:
        interval = self.config.flush_consumer_offset_interval_ms / 1000.0
        def expire_consumers() -> None:
            for group in self.consumers.scan_expired():
                self.notify_consumer_ids_changed(group)
                self.consumer_group_changed(group)

        # each step on its own (RocketMQ schedules them apart): a state file that cannot be
        # written (a full disk) must not stop consumer and producer expiry
        steps = [(self.offsets.persist, True), (self.delay_offsets.persist, True),
                 (self.subgroups.persist, True), (expire_consumers, False),
                 (self.filters.persist, True), (self.producers.scan_expired, False)]
        while True:
            await asyncio.sleep(interval)
            for fn, blocking in steps:
                try:
                    if blocking:
                        await self.run(fn)
                    else:
                        fn()
                except Exception:
                    log.exception("housekeeping: %s failed", getattr(fn, "__qualname__", fn))

    async def stop(self) -> None:
        if self.registration is not None:  # clients stop routing here before we go
            await self.registration.stop()
            self.registration = None
        for srv in self.servers:
            srv.stop_accepting()
        if self.hold is not None:
            self.hold.wake_all()
        if self.proxy is not None:
            await self.proxy.stop()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for srv in self.servers:
            await srv.drain(max(0.0, deadline - time.monotonic()))
        for srv in self.servers:
            await srv.close()
        for t in self._tasks:
            t.cancel()
        if self.acl is not None:
            self.acl.watcher.stop()
        if self.schedule is not None:
            await self.schedule.stop()
        if self.transaction_check is not None:
            await self.transaction_check.stop()
        if self.writer is not None:
            await self.run(self.writer.stop)
        if self.sync_waiter is not None:
            self.sync_waiter.close()
        await self.run(self.offsets.persist, True)
        await self.run(self.topics.persist)
        await self.run(self.delay_offsets.persist)
        await self.run(self.subgroups.persist)
        await self.run(self.filters.persist)
        if self.store is not None:
            store, self.store = self.store, None
            await self.run(_close_store, store)
        self.executor.shutdown(wait=True)


def _open_store(factory: Any, cfg: Any) -> Any:
    store = factory(cfg)
    if hasattr(store, "__enter__"):
        store = store.__enter__()
    return store


def _close_store(store: Any) -> None:
    if hasattr(store, "__exit__"):
        store.__exit__(None, None, None)
    elif hasattr(store, "shutdown"):
        store.shutdown()
    else:
        store.close()
