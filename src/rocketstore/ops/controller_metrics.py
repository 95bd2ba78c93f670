"""Prometheus ``/metrics`` for ``rocketstore controller --metrics-port``: per broker group the
master, epochs, SyncStateSet, live replicas and the last failover (when, why, how long), and
whether this controller leads its group. Read at scrape time from the controller's state, on
the metrics server's thread (plain reads of dicts the event loop replaces whole)."""
from __future__ import annotations

from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_G = ["cluster", "broker_name"]


class ControllerCollector(Collector):
    def __init__(self, service: Any) -> None:
        self.svc = service

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        svc = self.svc
        lead = GaugeMetricFamily("rocketstore_controller_leader",
                                 "1 when this controller leads its group (decides), else 0")
        lead.add_metric([], 1 if svc.leading else 0)
        yield lead
        elections = CounterMetricFamily("rocketstore_controller_elections",
                                        "Masters elected by this controller since it started")
        elections.add_metric([], svc.elections)
        yield elections
        if not svc.leading:
            return  # a follower's copy of the state is not current
        master = GaugeMetricFamily("rocketstore_controller_master_broker_id",
                                   "The group's master (-1: none)", labels=_G)
        epoch = GaugeMetricFamily("rocketstore_controller_master_epoch", "The master epoch", labels=_G)
        sse = GaugeMetricFamily("rocketstore_controller_sync_state_set_epoch",
                                "The SyncStateSet epoch", labels=_G)
        in_sync = GaugeMetricFamily("rocketstore_controller_sync_state_set_replicas",
                                    "Replicas in the SyncStateSet", labels=_G)
        replicas = GaugeMetricFamily("rocketstore_controller_replicas",
                                     "Replicas the controller knows", labels=_G)
        alive = GaugeMetricFamily("rocketstore_controller_replicas_alive",
                                  "Replicas whose heartbeats are current", labels=_G)
        last_at = GaugeMetricFamily("rocketstore_controller_last_failover_timestamp_seconds",
                                    "When the group's master last changed", labels=_G)
        last_took = GaugeMetricFamily("rocketstore_controller_last_failover_seconds",
                                      "From noticing the master gone to electing the next",
                                      labels=_G)
        last_info = GaugeMetricFamily("rocketstore_controller_last_failover_info",
                                      "The last master change: from, to, why",
                                      labels=_G + ["from_id", "to_id", "epoch", "reason"])
        for name, g in list(svc.state.groups.items()):
            lv = [g.cluster, name]
            master.add_metric(lv, -1 if g.master is None else g.master)
            epoch.add_metric(lv, g.master_epoch)
            sse.add_metric(lv, g.sync_state_set_epoch)
            in_sync.add_metric(lv, len(g.sync_state_set))
            replicas.add_metric(lv, len(g.brokers))
            alive.add_metric(lv, sum(1 for bid in list(g.brokers) if svc.alive(g.cluster, name, bid)))
            f = svc.failovers.get(name)
            if f is not None:
                last_at.add_metric(lv, f.at)
                if f.took_s is not None:
                    last_took.add_metric(lv, f.took_s)
                last_info.add_metric(lv + ["" if f.from_id is None else str(f.from_id),
                                           "" if f.to_id is None else str(f.to_id),
                                           str(f.epoch), f.why], 1)
        yield from (master, epoch, sse, in_sync, replicas, alive, last_at, last_took, last_info)

