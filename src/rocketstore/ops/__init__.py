"""Operations: Prometheus metrics and the web console, read-only views over broker state.

``OpsServices`` wires them to a broker: before ``Broker.start`` it registers the request
instrumentation (``ops.stats``) as a handler wrapper; after it, it starts the TPS sampler, the
metrics HTTP server (``--metrics-port``) and the console (``--console``), each on its own
thread, so nothing here runs on the broker's event loop. ``stop()`` stops them again.
"""
from __future__ import annotations

from typing import Any

from .state import OpsState

__all__ = ["OpsServices", "OpsState"]


class OpsServices:
    def __init__(self, broker: Any, *, host: str = "127.0.0.1", metrics_port: int | None = None,
                 console_port: int | None = None) -> None:
        from .metrics import BrokerCollector, new_registry
        from .stats import HandlerLatency, TpsSampler, broker_totals

        self.broker = broker
        self.host = host
        self.state = OpsState.from_broker(broker)
        self.registry = new_registry()
        self.latency = HandlerLatency(self.registry)
        if self.state.broker_stats is not None:
            self.state.tps = TpsSampler(broker_totals(self.state.broker_stats))
        self.registry.register(BrokerCollector(self.state))
        broker.handler_wrappers.append(self.latency.instrument)
        broker.put_observers.append(self.latency.put_latency.observe)  # worker fast path
        self.metrics_port = metrics_port
        self.console_port = console_port
        self.metrics: Any = None
        self.console: Any = None

    def start(self) -> dict[str, str]:
        """Start the enabled servers; their URLs (``{"metrics": ..., "console": ...}``)."""
        self.state.refresh_addresses(self.broker)
        if self.state.tps is not None:
            self.state.tps.start()
        urls: dict[str, str] = {}
        try:
            if self.metrics_port is not None:
                from .metrics import MetricsServer
                self.metrics = MetricsServer(self.registry, self.host, self.metrics_port,
                                             **self._guards())
                self.metrics.start()
                urls["metrics"] = self.metrics.url
            if self.console_port is not None:
                from .console import ConsoleServer
                from .sources import LocalSource
                self.console = ConsoleServer(LocalSource(self.state), self.host, self.console_port,
                                             registry=self.registry, **self._guards(),
                                             acl=getattr(self.broker, "acl", None))
                self.console.start()
                urls["console"] = self.console.url
        except BaseException:
            self.stop()
            raise
        return urls

    def attach(self, broker: Any) -> None:
        """Controller mode: a broker started again in this process (a role change that
        restarts it) is measured too; call before its ``start``, then ``follow``."""
        broker.handler_wrappers.append(self.latency.instrument)
        broker.put_observers.append(self.latency.put_latency.observe)

    def follow(self, broker: Any) -> None:
        """After the restarted broker's ``start``: metrics and console read it from now on
        (the servers, their registry and ``self.state`` stay; its fields are the new broker's)."""
        import dataclasses

        from .stats import TpsSampler, broker_totals

        self.broker = broker
        fresh = OpsState.from_broker(broker)
        for f in dataclasses.fields(OpsState):
            if f.name not in ("tps", "started_ms"):
                setattr(self.state, f.name, getattr(fresh, f.name))
        self.state.refresh_addresses(broker)
        old = self.state.tps
        if old is not None:
            old.stop()
            self.state.tps = None
        if self.state.broker_stats is not None:
            self.state.tps = TpsSampler(broker_totals(self.state.broker_stats))
            self.state.tps.start()

    def _guards(self) -> dict[str, Any]:
        """The broker's connection limits and Host allow-list (README "Security")."""
        from ..netlimits import Limits
        from .httpguard import allowed_hosts

        cfg = getattr(self.broker, "config", None)
        return {"limits": Limits.from_config(cfg),
                "allowed_hosts": allowed_hosts(self.host, getattr(cfg, "http_allowed_hosts", ""))}

    def stop(self) -> None:
        for svc in (self.console, self.metrics, self.state.tps):
            if svc is not None:
                svc.stop()
        self.console = self.metrics = None
