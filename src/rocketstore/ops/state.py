"""``OpsState``: the parts of a broker (or of a store directory) that metrics and console read.

Theory of operation: ``ops`` never holds the ``Broker``; it gets this small bundle of the
managers it reads, built either from a running broker (``from_broker``) or from a store
directory opened for reading (``rocketstore console --store``, no broker, no live clients).
The store is reached through a callable because a broker opens its store in ``start()`` and
drops it in ``stop()``: a scrape during shutdown sees ``None`` and reports what it can.
"""
from __future__ import annotations

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
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_addr: str = ""
    namesrv_addr: str = ""
    servers: Callable[[], list] = field(default=lambda: [])  # RemotingServer objects
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    stats: Any = None  # ops.stats.RequestStats when the handlers are instrumented
    tps: Any = None  # ops.stats.TpsSampler
    read_only: bool = False  # a store directory, not a broker

    @classmethod
    def from_broker(cls, broker: Any) -> "OpsState":
        cfg = broker.config
        return cls(store=lambda: broker.store, store_config=broker.store_config,
                   topics=broker.topics, offsets=broker.offsets, consumers=broker.consumers,
                   broker_name=cfg.broker_name, cluster_name=cfg.cluster_name,
                   broker_addr=f"{cfg.host}:{cfg.port}",
                   namesrv_addr=(f"{cfg.host}:{cfg.namesrv_port}"
                                 if cfg.namesrv_port is not None else ""),
                   servers=lambda: list(broker.servers))

    def refresh_addresses(self, broker: Any) -> None:
        """After ``Broker.start``: ports given as 0 are known now."""
        cfg = broker.config
        self.broker_addr = f"{cfg.host}:{cfg.port}"
        if cfg.namesrv_port is not None:
            self.namesrv_addr = f"{cfg.host}:{cfg.namesrv_port}"

    def connections(self) -> dict[str, int]:
        return {getattr(s, "name", "server"): len(getattr(s, "channels", ()))
                for s in self.servers()}
