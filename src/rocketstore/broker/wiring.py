"""``Broker``: wires the store, the state managers, the services and the two servers.

It handles no request itself: at start it builds one context per kind of processor
(``contexts``) and binds the request table (``requests``) to them; extensions (the gRPC proxy,
attached by ``rocketstore serve``) start after the servers from those same contexts.

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
from typing import TYPE_CHECKING, Any, Callable

from ..format.batch import parse_delay_levels
from ..remoting.codes import PERM_READ, RequestCode
from ..remoting.command import RemotingCommand
from ..store.opening import lap_timer
from . import requests
from .admin import runtime
from .config import BrokerConfig
from .contexts import (AclContext, AdminContext, AssignmentContext, ClientContext,
                       ClientEvents, PopContext, PullContext, SendContext)
from .processors import reply
from .services.longpoll import PullHoldService
from .services.pop import PopService
from .services.puts import Puts
from .services.schedule import ScheduleMessageService
from .services.writer import PutWriter
from .state.consumers import ConsumerManager
from .state.filters import ConsumerFilterRegistry
from .state.locks import RebalanceLockManager
from .state.offsets import ConsumerOffsetManager, DelayOffsetStore
from .state.producers import ProducerManager
from .state.request_modes import MessageRequestModes
from .state.stats import BrokerStats
from .state.subgroups import SubscriptionGroupManager
from .state.topics import TopicConfigManager, create_cluster_topics, learn_topic

if TYPE_CHECKING:
    from ..config import StoreConfig
    from ..store.message_store import MessageStore
    from .acl.service import PlainPermissionManager
    from .namesrv.registration import NameServerRegistration
    from .namesrv.routes import LocalRoutePerms, RouteTable
    from .server import RemotingServer
    from .services.slave_sync import SlaveSynchronize
    from .services.transaction import (TransactionalMessageCheckService,
                                       TransactionalMessageService)
    from .workers.pool import FastPuts, WorkerPool

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, store_config: StoreConfig, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self.store_config = store_config
        self.store: MessageStore | None = None  # opened by start()
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
        self.transactions: TransactionalMessageService | None = None  # once started
        self.transaction_check: TransactionalMessageCheckService | None = None
        self.writer: PutWriter | None = None
        self.puts: Puts | None = None  # the one way a message goes into the store
        self.locks = RebalanceLockManager()
        self.servers: list[RemotingServer] = []
        self.contexts: dict[str, Any] = {}  # kind -> the context its processors take
        self.extensions: list[Any] = []  # started after the servers, stopped first (gRPC)
        self.registration: NameServerRegistration | None = None  # when --namesrv is given
        self.route_perms: LocalRoutePerms | None = None  # of the in-process name server
        self.handler_wrappers: list[Callable[[dict[int, Any]], dict[int, Any]]] = []  # e.g. ops.stats.instrument
        self.put_observers: list[Callable[[float], None]] = []  # put seconds (workers' fast path)
        self.workers: WorkerPool | None = None  # when serverWorkerProcesses > 1
        self.fast_puts: FastPuts | None = None  # the plain sends' fast path
        self.acl: PlainPermissionManager | None = None  # when aclEnable
        self.route_table: RouteTable | None = None  # of the in-process name server
        self.slave_sync: SlaveSynchronize | None = None  # on a SLAVE
        self.fast_port: int | None = None  # the VIP remoting port (listenPort - 2) when it listens
        self.pop_service: PopService | None = None  # RocketMQ 5 pop: both doors' one state
        self._tasks: list[asyncio.Task[None]] = []

    # -- what the wiring hands on ---------------------------------------------------------------
    @property
    def store_host(self) -> str:
        return self.store_config.store_host

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking store call on the executor."""
        assert self.loop is not None
        return await self.loop.run_in_executor(self.executor, fn, *args)

    @property
    def is_slave(self) -> bool:
        return getattr(self.store_config, "broker_role", "ASYNC_MASTER") == "SLAVE"

    @property
    def ha_server_addr(self) -> str | None:
        """brokerIP2:haListenPort, as registered at the name server (None: no HA socket)."""
        ha = getattr(self.store, "ha", None)
        if ha is None or ha.port is None:
            return None
        return f"{self.config.broker_ip2 or self.config.host}:{ha.port}"

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
        if self.route_table is not None:
            self.route_table.channel_closed(conn)
        self.producers.connection_closed(conn)
        for group in self.consumers.connection_closed(conn):
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
        for topic, qids in self.store.topics().items():  # written offline, or replicated
            if learn_topic(self.topics, self.config, topic, max(qids)):
                log.info("topic %s has messages in the store but no config: created", topic)
        self.store.add_arrival_listener(self._learn_replicated_topic)
        if self.config.enable_calc_filter_bit_map:
            self.store.set_filter_bitmap_source(self.filters.bitmaps)
        if getattr(self.store, "ha", None) is not None and \
                self.store_config.broker_role == "SYNC_MASTER":
            self.store.put_path.defer_replica_wait = True  # ``put`` awaits the replicas
        self.puts = Puts(self.store, self.run)
        if getattr(self.store_config, "sync_flush", False):
            from .services.syncflush import SyncFlushWaiter
            self.puts.sync_waiter = SyncFlushWaiter(self.loop, self.store.commitlog.flushed_offset,
                                                    self.store_config.sync_flush_timeout)
            self.store.flush_service.add_listener(self.puts.sync_waiter.on_flush)
        self.writer = self.puts.writer = PutWriter(self.loop, inline=self.puts.inline())
        try:
            await self._start_servers()
        except BaseException:
            await self.stop()  # close the store cleanly: no abort file, lock released
            raise

    def _learn_replicated_topic(self, topic: str, queue_id: int, max_offset: int) -> None:
        """A slave learns a topic from the replicated CommitLog itself, not only from the
        master's topic config copied every 10 s: a promoted slave then serves every message
        it holds (the reput thread calls this)."""
        if self.is_slave and self.topics.get(topic) is None and \
                learn_topic(self.topics, self.config, topic, queue_id):
            log.info("slave learnt topic %s from the replicated CommitLog", topic)

    def build_contexts(self) -> dict[str, Any]:
        """One context per kind of processor (see ``contexts``), built once at start."""
        assert self.store is not None and self.puts is not None and self.hold is not None
        events = ClientEvents(ids_changed=self.notify_consumer_ids_changed,
                              group_changed=self.consumer_group_changed,
                              topics_changed=self.register_now)
        contexts: dict[str, Any] = {
            "send": SendContext(self.store, self.store_config, self.config, self.topics,
                                self.puts, self.stats, self.producers, self.transactions,
                                self.run),
            "pull": PullContext(self.store, self.config, self.topics, self.offsets,
                                self.consumers, self.filters, self.hold, self.stats, self.run,
                                subgroups=self.subgroups, is_slave=self.is_slave),
            "client": ClientContext(self.store, self.config, self.topics, self.offsets,
                                    self.consumers, self.producers, self.filters,
                                    self.subgroups, self.locks, events, self.run),
            "admin": AdminContext(self.store, self.store_config, self.config, self.topics,
                                  self.offsets, self.delay_offsets, self.consumers,
                                  self.producers, self.subgroups, self.stats, self.run,
                                  runtime.ConfigVersion()),
            "acl": AclContext(self.store_config, self.config, self.run),
            "assignment": AssignmentContext(
                self.topics, self.subgroups, self.consumers,
                MessageRequestModes(os.path.join(self.store_config.store_path_root_dir, "config")),
                self.route_queues, self.run),
        }
        if not self.is_slave:  # pops move offsets and write the revive log: masters only
            self.pop_service = PopService(
                store=self.store, topics=self.topics, offsets=self.offsets, config=self.config,
                put_message=self.puts.put_blocking, run=self.run, subgroups=self.subgroups,
                filters=self.filters)
            contexts["pop"] = PopContext(self.store, self.config, self.topics, self.offsets,
                                         self.subgroups, self.filters, self.hold,
                                         self.pop_service, self.run)
        return contexts

    async def _start_servers(self) -> None:
        from .acl import service as acl_service
        from .namesrv import context as namesrv_context
        from .namesrv import routes as namesrv_routes
        from .server import RemotingServer

        self.topics.persist()
        self._start_transactions()
        reply.create_reply_topic(self.topics, self.config)
        create_cluster_topics(self.topics, self.config)
        self.contexts = self.build_contexts()
        if self.pop_service is not None:  # the checkpoints in flight before a stop or a crash
            await self.run(self.pop_service.open)
        if self.config.acl_enable:  # every request checked first (RocketMQ's ACL RPC hook)
            self.acl = self.contexts["acl"].acl = acl_service.start_acl(self.config,
                                                                        self.store_config)
        handlers = self._handlers()
        broker_srv = RemotingServer(self, handlers, "broker")
        if self.config.worker_processes > 1:
            await self._start_workers(broker_srv)
        else:
            await broker_srv.start(self.config.host, self.config.port)
        self.config.port = broker_srv.port
        if self.store_host.rsplit(":", 1)[-1] == "0":
            self.store_config.store_host = f"{self.config.host}:{broker_srv.port}"
        if self.workers is not None:
            await self.workers.start_workers(self._worker_settings())
            settings = self.workers.settings
            self.fast_puts = self.workers.fast if settings is not None and settings.fast_sends \
                else None
        else:
            settings = self._worker_settings(acl_checked_here=True)
            if settings.fast_sends:  # the workers' fast path on our own connections
                from .workers.local import LocalSends
                from .workers.pool import FastPuts

                observe = self.put_observers[0] if self.put_observers else None
                self.fast_puts = FastPuts(self.contexts["send"], observe)
                broker_srv.local_sends = LocalSends(
                    self.fast_puts, settings, None if self.acl is None else self.acl.check)
        self.servers.append(broker_srv)
        await self._start_fast_port(handlers)
        if self.config.namesrv_port is not None:
            local = namesrv_routes.LocalBroker(self.config, self.store_config, self.topics,
                                                lambda: self.ha_server_addr)
            ns_ctx = namesrv_context.build(local)
            self.route_perms = ns_ctx.perms
            self.route_table = ns_ctx.table
            ns_handlers = requests.namesrv_handlers(ns_ctx)
            if self.config.namesrv_acl_enable:  # write codes need an admin account
                from .namesrv import acl as namesrv_acl
                self._namesrv_acl = self.acl or acl_service.start_acl(self.config,
                                                                      self.store_config)
                ns_handlers = namesrv_acl.guard(self._namesrv_acl, ns_handlers)
            ns = RemotingServer(self, ns_handlers, "namesrv")
            await ns.start(self.config.host, self.config.namesrv_port)
            self.config.namesrv_port = ns.port
            self.servers.append(ns)
        if self.config.namesrv_addr:
            await self._register_at_name_servers()
        if self.is_slave:  # as RocketMQ: no delayed delivery nor transaction checks on a slave
            from .services.slave_sync import SlaveSynchronize
            self.slave_sync = SlaveSynchronize(
                own_addr=lambda: self.config.broker_addr, master_addr=self._master_addr,
                topics=self.topics, offsets=self.offsets, delay_offsets=self.delay_offsets,
                subgroups=self.subgroups, run=self.run)
            self.slave_sync.start()
        else:
            self._start_master_services()
        if self.pop_service is not None:
            self.pop_service.start()
        for ext in self.extensions:
            await ext.start()
        assert self.loop is not None
        self._tasks.append(self.loop.create_task(self._housekeeping(), name="housekeeping"))
        log.info("broker %s listening on %s:%s, name server on %s", self.config.broker_name,
                 self.config.host, self.config.port, self.config.namesrv_port)

    def _handlers(self) -> dict[int, Any]:
        """The request table of listenPort (and the VIP port) for the current role."""
        from .acl import service as acl_service

        handlers = requests.broker_handlers(self.contexts)
        if self.is_slave:  # RocketMQ's slave refusals (replication.py)
            from .replication import slave_handlers
            handlers = slave_handlers(handlers)
        if self.acl is not None:
            handlers = acl_service.guard(self.acl, handlers)
        for wrap in self.handler_wrappers:
            handlers = wrap(handlers)
        return handlers

    async def promote(self, master_epoch: int, sync_state_set: set[int],
                      timings: dict[str, float] | None = None) -> None:
        """Controller mode: this running SLAVE becomes the SYNC_MASTER in place, its store and
        listeners kept (RocketMQ 5's ``changeToMaster``). In the order sends need them:
        SlaveSynchronize stops; the store is promoted (``MessageStore.promote_to_master``: HA
        client stopped, torn tail cut, epoch opened, dispatch caught up, queue offsets
        rebuilt); the slave refusals are swapped for the master's handlers on the open
        listeners (pop included); the broker registers at the name servers as brokerId 0 at
        once. Then, off the send path: the timer wheel, delayed delivery, transaction checks,
        pop revive and the gRPC extension (restarted on the master's contexts).
        ``timings`` gets each step's seconds."""
        assert self.store is not None and self.is_slave
        lap = lap_timer(timings)
        if self.slave_sync is not None:
            await self.slave_sync.stop()
            self.slave_sync = None
        self.store_config.broker_role = "SYNC_MASTER"
        self.store_config.ha_master_address = None
        self._ha_master_remoting = None
        lap("slave_sync_stop")
        store_steps: dict[str, float] = {}
        await self.run(self.store.promote_to_master, master_epoch, sync_state_set, store_steps)
        if timings is not None:
            timings.update({f"store.{k}": v for k, v in store_steps.items()})
        lap("store")
        self.store.put_path.defer_replica_wait = True  # ``put`` awaits the replicas
        self.config.broker_id = 0
        acl = self.acl
        self.contexts = self.build_contexts()  # a master's: pop service, pulls not slave's
        self.contexts["acl"].acl = acl
        if self.pop_service is not None:
            await self.run(self.pop_service.open)
        handlers = self._handlers()
        for srv in self.servers:
            if srv.name in ("broker", "fast"):
                srv.handlers = handlers
        settings = self._worker_settings(acl_checked_here=True)
        if settings.fast_sends and self.workers is None and self.servers:
            from .workers.local import LocalSends
            from .workers.pool import FastPuts

            observe = self.put_observers[0] if self.put_observers else None
            self.fast_puts = FastPuts(self.contexts["send"], observe)
            self.servers[0].local_sends = LocalSends(
                self.fast_puts, settings, None if acl is None else acl.check)
        lap("handlers")
        if self.registration is not None:
            self.registration.broker_id = 0
            await self.registration.register_all()
        lap("register")
        await self.run(self.store.start_timer)
        lap("timer")
        if self.transactions is not None:  # replicated decisions: not in its memory
            self.transactions.promoted()
        self._start_master_services()
        if self.pop_service is not None:
            self.pop_service.start()
        for ext in self.extensions:
            await ext.stop()
            await ext.start()
        lap("services")

    def _start_master_services(self) -> None:
        """What only a master runs: delayed delivery and the transaction check-back."""
        assert self.puts is not None and self.transaction_check is not None
        self.schedule = ScheduleMessageService(
            self.store, self.delay_offsets, self.delay_levels_ms, self.puts.put_blocking,
            self.run, self.config.schedule_poll_interval_ms / 1000.0)
        self.schedule.start()
        self.transaction_check.start()

    async def _start_workers(self, broker_srv: Any) -> None:
        """listenPort served by worker processes (``workers.pool``): bind it here."""
        from .workers.pool import WorkerPool

        observe = self.put_observers[0] if self.put_observers else None
        # N broker processes: this one (the writer) and N - 1 protocol workers
        self.workers = WorkerPool(broker_srv, self.contexts["send"],
                                  self.config.worker_processes - 1,
                                  self.config.server_frame_read_timeout_s, observe)
        port = self.workers.bind(self.config.host, self.config.port)
        broker_srv.start_without_socket(port)

    def _worker_settings(self, acl_checked_here: bool = False) -> Any:
        """What the fast paths need; with ACL on only the one-process path takes sends (it
        checks each as the send processor would: ``acl_checked_here``), workers forward all."""
        from .send_rule import SendRules

        return SendRules(cluster_name=self.config.cluster_name,
                         store_host=self.store_config.store_host,
                         generate_uniq_key=self.store_config.generate_uniq_key,
                         max_message_size=self.store_config.max_message_size,
                         fast_sends=self.config.fast_sends and not self.is_slave
                         and (self.acl is None or acl_checked_here))

    async def _start_fast_port(self, handlers: dict[int, Any]) -> None:
        """RocketMQ's VIP channel on listenPort - 2 (a Java slave's SlaveSynchronize reads the
        topic config there). A port that cannot be had is logged, not fatal."""
        from .server import RemotingServer

        port = self.config.port - 2
        if self.config.port == 0 or port <= 0:
            return
        srv = RemotingServer(self, handlers, "fast")
        try:
            await srv.start(self.config.host, port)
        except OSError as exc:
            log.warning("fast remoting port %d not available: %s", port, exc)
            return
        self.fast_port = srv.port
        self.servers.append(srv)

    _ha_master_remoting: str | None = None

    def _on_master(self, ha_addr: str | None, master_addr: str | None) -> None:
        """A slave's register answer: the master's HA address (for the next connect) and its
        remoting address (for SlaveSynchronize), as RocketMQ's BrokerController takes them."""
        ha = getattr(self.store, "ha", None)
        if ha is not None and ha_addr:
            ha.set_master_address(ha_addr)
        self._ha_master_remoting = master_addr

    def _master_addr(self) -> str | None:
        if self._ha_master_remoting:
            return self._ha_master_remoting
        fixed = getattr(self.store_config, "ha_master_address", None)
        if fixed and ":" in fixed:  # no name server answer: the HA port is listenPort + 1
            host, _, port = fixed.rpartition(":")
            if port.isdigit():
                return f"{host}:{int(port) - 1}"
        return None

    def _start_transactions(self) -> None:
        from .services.transaction import (TransactionalMessageCheckService,
                                           TransactionalMessageService, TransactionConfig)

        c = self.config
        tcfg = TransactionConfig(c.transaction_timeout_ms, c.transaction_check_interval_ms,
                                 c.transaction_check_max,
                                 int(getattr(self.store_config, "file_reserved_time", 72)))
        assert self.puts is not None
        self.transactions = TransactionalMessageService(self.store, self.topics, self.offsets,
                                                        self.puts.put_blocking, tcfg)
        self.transaction_check = TransactionalMessageCheckService(
            self.transactions, self.run, self.producers.available_connection)

    def route_perm(self, tc: Any) -> int:
        """The perm a topic's route carries (the topic's own, or what wipeWritePerm /
        addWritePerm set at the name server beside this broker)."""
        perms = self.route_perms
        return perms.perm(self.topics, tc.topic_name, tc.perm) if perms is not None else tc.perm

    async def route_queues(self, topic: str) -> list[tuple[str, int]] | None:
        """(broker name, readable queues) of ``topic`` across the cluster: the outside name
        servers' route, else the name server beside us (this broker and those registered there);
        None when no broker has it readable (QUERY_ASSIGNMENT's ``getTopicSubscribeInfo``)."""
        if self.registration is not None:
            qds = await self.registration.route_queue_datas(topic)
        else:
            qds = []
            tc = self.topics.get(topic)
            if tc is not None:
                qds.append({"brokerName": self.config.broker_name,
                            "readQueueNums": tc.read_queue_nums, "perm": self.route_perm(tc)})
            if self.route_table is not None:
                qds.extend(q for q in self.route_table.route(topic)[1]
                           if q.get("brokerName") != self.config.broker_name)
        out = [(str(q["brokerName"]), int(q.get("readQueueNums") or 0)) for q in qds or []
               if int(q.get("perm") or 0) & PERM_READ]
        return out or None

    async def register_now(self) -> None:
        """Register the topic table at the outside name servers now (RocketMQ's
        ``registerIncrementBrokerData`` after an admin created a topic); the embedded name
        server reads it directly."""
        if self.registration is not None:
            await self.registration.register_all()

    async def _register_at_name_servers(self) -> None:
        from .namesrv.registration import (NameServerRegistration, other_name_servers,
                                           parse_namesrv_addrs)

        cfg = self.config
        addrs = other_name_servers(parse_namesrv_addrs(cfg.namesrv_addr or ""), cfg.host,
                                   cfg.namesrv_port)  # our own name server knows us already
        if not addrs:
            return
        self.registration = NameServerRegistration(
            addrs, cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name, broker_addr=lambda: cfg.broker_addr,
            topic_table=lambda: {t.topic_name: t.to_json() for t in self.topics.topics()},
            period_s=cfg.register_name_server_period_ms / 1000.0,
            order_topics=self.topics.update_order_topics, broker_id=cfg.broker_id,
            ha_server_addr=lambda: self.ha_server_addr or "", on_master=self._on_master)
        await self.registration.start()

    async def _housekeeping(self) -> None:
        interval = self.config.flush_consumer_offset_interval_ms / 1000.0
        def expire_consumers() -> None:
            for group in self.consumers.scan_expired():
                self.notify_consumer_ids_changed(group)
                self.consumer_group_changed(group)

        # each step on its own (RocketMQ schedules them apart): a state file that cannot be
        # written (a full disk) must not stop consumer and producer expiry
        steps: list[tuple[Callable[[], object], bool]] = [
            (self.offsets.persist, True), (self.delay_offsets.persist, True),
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
        if self.workers is not None:
            self.workers.stop_accepting()
        if self.hold is not None:
            self.hold.wake_all()
        for ext in self.extensions:
            await ext.stop()
        if self.pop_service is not None:
            await self.pop_service.stop()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for srv in self.servers:
            await srv.drain(max(0.0, deadline - time.monotonic()))
        if self.workers is not None:
            await self.workers.drain(max(0.0, deadline - time.monotonic()))
            await self.workers.close()
        for srv in self.servers:
            await srv.close()
        for t in self._tasks:
            t.cancel()
        if self.slave_sync is not None:
            await self.slave_sync.stop()
        if self.acl is not None and self.acl.watcher is not None:
            self.acl.watcher.stop()
        ns_acl = getattr(self, "_namesrv_acl", None)
        if ns_acl is not None and ns_acl is not self.acl:
            ns_acl.watcher.stop()
        if self.schedule is not None:
            await self.schedule.stop()
        if self.transaction_check is not None:
            await self.transaction_check.stop()
        if self.writer is not None:
            await self.run(self.writer.stop)
        if self.puts is not None and self.puts.sync_waiter is not None:
            self.puts.sync_waiter.close()
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
