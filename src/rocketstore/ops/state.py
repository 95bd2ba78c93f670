"""``OpsState``: the parts of a broker (or of a store directory) that metrics and console read.

Theory of operation: ``ops`` never holds the ``Broker``; it gets this small bundle of the
managers it reads, built either from a running broker (``from_broker``) or from a store
directory opened for reading (``rocketstore console --store``, no broker, no live clients).
The store is reached through a callable because a broker opens its store in ``start()`` and
drops it in ``stop()``: a scrape during shutdown sees ``None`` and reports what it can.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class OpsState:
    store: Callable[[], Any]  # -> MessageStore | None
    store_config: Any
    topics: Any  # TopicConfigManager
    offsets: Any  # ConsumerOffsetManager
    consumers: Any = None  # ConsumerManager of a live broker; None for a store directory
    producers: Any = None  # ProducerManager of a live broker
    subgroups: Any = None  # SubscriptionGroupManager
    broker_config: Any = None  # BrokerConfig of a live broker
    broker_stats: Any = None  # the broker's BrokerStats (message counts and rates)
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_addr: str = ""
    namesrv_addr: str = ""
    servers: Callable[[], list] = field(default=lambda: [])  # RemotingServer objects
    workers: Callable[[], "dict | None"] = field(default=lambda: None)  # WorkerPool.describe
    fast_sends: Callable[[], "int | None"] = field(default=lambda: None)  # FastPuts.taken
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    tps: Any = None  # ops.stats.TpsSampler over ``broker_stats``
    read_only: bool = False  # a store directory, not a broker

    @classmethod
    def from_broker(cls, broker: Any) -> "OpsState":
        cfg = broker.config
        return cls(store=lambda: broker.store, store_config=broker.store_config,
                   topics=broker.topics, offsets=broker.offsets, consumers=broker.consumers,
                   producers=getattr(broker, "producers", None),
                   subgroups=getattr(broker, "subgroups", None), broker_config=cfg,
                   broker_stats=getattr(broker, "stats", None),
                   broker_name=cfg.broker_name, cluster_name=cfg.cluster_name,
                   broker_addr=f"{cfg.host}:{cfg.port}",
                   namesrv_addr=(f"{cfg.host}:{cfg.namesrv_port}"
                                 if cfg.namesrv_port is not None else ""),
                   servers=lambda: list(broker.servers),
                   workers=lambda: (broker.workers.describe()
                                    if getattr(broker, "workers", None) is not None else None),
                   fast_sends=lambda: (broker.fast_puts.taken
                                       if getattr(broker, "fast_puts", None) is not None
                                       else None))

    def refresh_addresses(self, broker: Any) -> None:
        """After ``Broker.start``: ports given as 0 are known now."""
        cfg = broker.config
        self.broker_addr = f"{cfg.host}:{cfg.port}"
        if cfg.namesrv_port is not None:
            self.namesrv_addr = f"{cfg.host}:{cfg.namesrv_port}"

    def connections(self) -> dict[str, int]:
        return {getattr(s, "name", "server"): len(getattr(s, "channels", ()))
                for s in self.servers()}


class StoreDirectorySource:
    """A store directory read beside (or without) its broker: a read-only open, renewed.

    A read-only open sees the store as of the moment it was made, so the source reopens it —
    and re-reads ``config/*.json`` — when the last open is older than ``refresh_s``. The
    previous open stays usable until the next renewal (a request that started on it finishes
    on it), then it is closed. Nothing is ever written: no lock, no abort file, no config.
    """

    def __init__(self, path: str, refresh_s: float = 5.0) -> None:
        import threading

        from ..store.message_store import MessageStore

        self.path = os.path.abspath(path)
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._open_fn = MessageStore.open_read_only
        self.store = self._open_fn(self.path)  # NotAStoreError for a directory that is not one
        self._previous: Any = None
        self._opened = time.monotonic()
        self.state = OpsState(store=self.current, store_config=self.store.cfg,
                              topics=None, offsets=None, read_only=True,
                              broker_name=os.path.basename(self.path.rstrip(os.sep)) or "store")
        self._load_config()

    def _load_config(self) -> None:
        from ..broker.state.consumers import ConsumerManager
        from ..broker.state.producers import ProducerManager
        from ..broker.state.offsets import ConsumerOffsetManager
        from ..broker.state.topics import TopicConfigManager
        from ..broker.state.subgroups import SubscriptionGroupManager

        config_dir = os.path.join(self.path, "config")
        st = self.state
        st.topics = TopicConfigManager(config_dir)
        st.offsets = ConsumerOffsetManager(config_dir)
        st.subgroups = SubscriptionGroupManager(config_dir, auto_create=False)
        st.consumers, st.producers = ConsumerManager(), ProducerManager()  # nobody is online

    def current(self) -> Any:
        if self.refresh_s > 0 and time.monotonic() - self._opened >= self.refresh_s:
            with self._lock:
                if time.monotonic() - self._opened >= self.refresh_s:
                    self._renew()
        return self.store

    def _renew(self) -> None:
        fresh = self._open_fn(self.path)
        old_previous, self._previous, self.store = self._previous, self.store, fresh
        self._opened = time.monotonic()
        self._load_config()
        if old_previous is not None:
            old_previous.shutdown()

    def close(self) -> None:
        for s in (self._previous, self.store):
            if s is not None:
                s.shutdown()
        self._previous = None
