"""Prometheus ``/metrics`` for ``rocketstore serve --metrics-port``.

Theory of operation: one ``CollectorRegistry`` per broker holds three kinds of collectors —
the latency histograms of ``ops.stats`` (observed as requests are answered), a
``BrokerCollector`` that reads the broker's state *at scrape time* (the message counters of
``BrokerStats``, store offsets, dispatch and flush lag, disk use per store path, queue offsets,
consumer lag, connections), and prometheus-client's own process and platform collectors.
``MetricsServer`` serves the registry with prometheus-client's HTTP server in a daemon thread,
so a scrape never runs on the broker's event loop; the views it calls are thread-safe and
read-only.

Names follow RocketMQ 5's broker metrics (``rocketmq_messages_in_total``,
``rocketmq_storage_dispatch_behind_bytes``, ``rocketmq_consumer_lag_messages`` …) where one
exists, and start with ``rocketstore_`` otherwise. Durations are seconds, sizes bytes.
"""
from __future__ import annotations

import logging
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import views
from .state import OpsState

log = logging.getLogger(__name__)


def new_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels or [])


class BrokerCollector(Collector):
    """Scrape-time metrics of one broker (or one store directory)."""

    def __init__(self, state: OpsState) -> None:
        self.state = state
        self.errors = 0

    def describe(self) -> list[Metric]:
        return []  # names depend on the state; collect() is the description

    def collect(self) -> Iterator[Metric]:
        st = self.state
        info = _gauge("rocketstore_broker_info", "The broker this endpoint describes (always 1).",
                      ["cluster", "broker", "addr"])
        info.add_metric([st.cluster_name, st.broker_name, st.broker_addr], 1)
        yield info
        conns = _gauge("rocketstore_connections", "Open TCP connections per server.", ["server"])
        for name, n in sorted(st.connections().items()):
            conns.add_metric([name], n)
        yield conns
        workers = st.workers()
        if workers is not None:
            yield GaugeMetricFamily("rocketstore_worker_processes", "Live protocol worker "
                                    "processes (serverWorkerProcesses).", value=workers["live"])
            yield CounterMetricFamily("rocketstore_worker_restarts", "Worker processes that "
                                      "exited and were started again.", value=workers["restarts"])
        fast = st.fast_sends()
        if fast is not None:
            yield CounterMetricFamily("rocketstore_fast_sends", "Plain sends put by the fast "
                                      "path (serverFastSends), not the send processor.",
                                      value=fast)
        if st.broker_stats is not None:
            yield from self._traffic(st.broker_stats)
        if st.producers is not None:
            yield from self._producers(st.producers)
        store = st.store()
        if store is not None:
            for part in (self._store, self._replication, self._queues, self._groups, self._timer,
                         self._tier):
                try:
                    yield from part(store)
                except Exception:  # a partial scrape beats none; the error is logged and counted
                    self.errors += 1
                    log.exception("metrics: collecting %s failed", part.__name__)
        yield CounterMetricFamily("rocketstore_collector_errors", "Scrape-time collection "
                                  "errors (see the broker log).", value=self.errors)

    def _traffic(self, stats: Any) -> Iterator[Metric]:
        """The broker's own message counters (``BrokerStats``, what ``mqadmin`` reports)."""
        by_topic = _copy(stats.put_by_topic)
        by_group = _copy(stats.get_by_group)
        m_in = CounterMetricFamily("rocketmq_messages_in", "Messages stored by send requests.",
                                   labels=["topic"])
        for topic, c in sorted(by_topic.items()):
            m_in.add_metric([topic], c.total)
        m_out = CounterMetricFamily("rocketmq_messages_out", "Messages delivered by pull "
                                    "requests.", labels=["topic", "consumer_group"])
        for (group, topic), c in sorted(by_group.items()):
            m_out.add_metric([topic, group], c.total)
        yield from (m_in, m_out)
        for name, doc, value in (
                ("rocketmq_throughput_in", "Message body bytes stored by send requests.",
                 stats.put_bytes.total),
                ("rocketmq_throughput_out", "Record bytes delivered by pull requests.",
                 stats.get_transferred.total),
                ("rocketstore_put_failed", "Send requests whose put failed.", stats.put_failed),
                ("rocketstore_pull_empty", "Pull requests that found no message.",
                 stats.get_miss.total)):
            yield CounterMetricFamily(name, doc, value=value)

    def _timer(self, store: Any) -> Iterator[Metric]:
        """RocketMQ 5's timer metrics (``DefaultStoreMetricsConstant``) plus the wheel's load per
        hour ahead and its busiest slot."""
        timer = getattr(store, "timer", None)
        if timer is None:
            return
        st = timer.stats()
        yield CounterMetricFamily("rocketmq_timer_enqueue", "Timer messages put into the wheel.",
                                  value=st["enqueued"])
        yield CounterMetricFamily("rocketmq_timer_dequeue", "Timer messages re-put when due.",
                                  value=st["dequeued"])
        for name, doc, value in (
                ("rocketmq_timer_enqueue_lag", "Timer messages stored but not yet in the wheel.",
                 st["enqueue_behind_messages"]),
                ("rocketmq_timer_dequeue_latency", "Seconds the wheel's read time is behind the "
                 "clock.", st["dequeue_behind_ms"] / 1000.0),
                ("rocketmq_timer_dequeue_lag", "Timer messages waiting in the wheel.",
                 sum(v for v in st["topics"].values() if v > 0)),
                ("rocketstore_timerlog_bytes", "Bytes of the timerlog.", st["timerlog_bytes"])):
            yield GaugeMetricFamily(name, doc, value=value)
        timing = _gauge("rocketmq_timing_messages", "Timer messages waiting, per real topic.",
                        ["topic"])
        for topic, n in sorted(st["topics"].items()):
            timing.add_metric([topic], n)
        yield timing
        dist = timer.distribution()
        snap = _gauge("rocketmq_timer_message_snapshot", "Timer messages due within each bound "
                      "from now (RocketMQ's timerDist).", ["timer_bound_s"])
        for bound, n in dist["per_period"].items():
            snap.add_metric([bound], n)
        yield snap
        hour = _gauge("rocketstore_timer_due_per_hour", "Timer messages due in each hour ahead.",
                      ["hour"])
        for h, n in enumerate(dist["per_hour"]):
            hour.add_metric([str(h)], n)
        yield hour
        yield GaugeMetricFamily("rocketstore_timer_busiest_slot_messages", "Timer messages in "
                                "the fullest wheel slot of the next 24 hours.",
                                value=dist["busiest_slot_num"])

    def _producers(self, producers: Any) -> Iterator[Metric]:
        conns = _gauge("rocketmq_producer_connections", "Live connections of each producer "
                       "group.", ["producer_group"])
        for group in producers.groups():
            conns.add_metric([group], len(producers.channels(group)))
        yield conns

    def _store(self, store: Any) -> Iterator[Metric]:
        rt = views.store_runtime(store, self.state.store_config)
        for name, doc, value in (
                ("rocketmq_storage_dispatch_behind_bytes",
                 "CommitLog bytes not yet dispatched to ConsumeQueues and index.",
                 rt.dispatch_behind_bytes),
                ("rocketstore_storage_dispatch_behind_seconds",
                 "Store-time gap between the newest message and the newest dispatched one.",
                 rt.dispatch_behind_ms / 1000.0),
                ("rocketmq_storage_flush_behind_bytes", "CommitLog bytes not yet on disk.",
                 rt.flush_behind_bytes),
                ("rocketstore_storage_flush_behind_seconds",
                 "Store-time gap between the newest message and the newest flushed one.",
                 rt.flush_behind_ms / 1000.0),
                ("rocketmq_storage_size", "Bytes of all store files.", rt.files_bytes),
                ("rocketstore_commitlog_max_offset", "CommitLog max physical offset.",
                 rt.max_phy_offset),
                ("rocketstore_commitlog_min_offset", "CommitLog min physical offset.",
                 rt.min_phy_offset),
                ("rocketstore_commitlog_flushed_offset", "CommitLog offset known on disk.",
                 rt.flushed_phy_offset)):
            yield GaugeMetricFamily(name, doc, value=value)
        files = _gauge("rocketstore_storage_path_bytes", "Bytes of the files under each store "
                       "path.", ["path_type", "path"])
        total = _gauge("rocketstore_disk_total_bytes", "Size of the filesystem holding each "
                       "store path.", ["path_type", "path"])
        free = _gauge("rocketstore_disk_free_bytes", "Free bytes (for unprivileged users) on "
                      "the filesystem holding each store path.", ["path_type", "path"])
        ratio = _gauge("rocketstore_disk_used_ratio", "Used fraction of the filesystem holding "
                       "each store path (RocketMQ's commitLogDiskRatio).", ["path_type", "path"])
        for p in rt.paths:
            labels = [p.kind, p.path]
            files.add_metric(labels, p.files_bytes)
            total.add_metric(labels, p.disk_total_bytes)
            free.add_metric(labels, p.disk_free_bytes)
            ratio.add_metric(labels, p.disk_used_ratio)
        yield from (files, total, free, ratio)

    def _replication(self, store: Any) -> Iterator[Metric]:
        """Master/slave replication (``store.ha``): each slave's lag and whether it stalled."""
        fn = getattr(store, "ha_status", None)
        st = fn() if fn is not None else None
        if st is None:
            return
        role = _gauge("rocketstore_ha_role", "This broker's brokerRole (always 1).", ["role"])
        role.add_metric([st["role"]], 1)
        yield role
        if st.get("controller_mode"):  # RocketMQ 5's auto-switch HA: the epoch, the confirm offset
            yield GaugeMetricFamily("rocketstore_ha_master_epoch", "The last epoch of this "
                                    "broker's epoch file (controller mode).", value=st["epoch"])
            yield GaugeMetricFamily("rocketstore_ha_confirm_offset", "The CommitLog offset every "
                                    "SyncStateSet member holds (controller mode).",
                                    value=st["confirm_offset"])
        yield GaugeMetricFamily("rocketstore_ha_slave_connections", "Slaves connected to the "
                                "HA port.", value=len(st["slaves"]))
        yield GaugeMetricFamily("rocketstore_ha_slave_acked_offset", "Highest CommitLog offset "
                                "a slave acknowledged (what SYNC_MASTER puts wait for).",
                                value=st["slave_acked_offset"])
        lag_b = _gauge("rocketstore_ha_slave_lag_bytes", "CommitLog bytes the slave does not "
                       "hold yet.", ["slave"])
        lag_s = _gauge("rocketstore_ha_slave_lag_seconds", "Store-time age of the oldest "
                       "message the slave does not hold yet.", ["slave"])
        stalled = _gauge("rocketstore_ha_slave_stalled", "1 when the slave is behind and has "
                         "not caught up for a while (or is behind the master's oldest file).",
                         ["slave"])
        for x in st["slaves"]:
            lag_b.add_metric([x["address"]], x["lag_bytes"])
            lag_s.add_metric([x["address"]], x["lag_seconds"])
            stalled.add_metric([x["address"]], 1 if x["stalled"] else 0)
        yield from (lag_b, lag_s, stalled)
        master = st.get("master")
        if master is not None:
            yield GaugeMetricFamily("rocketstore_ha_master_connected", "A slave's connection to "
                                    "its master's HA port (1 up).", value=1 if master["connected"] else 0)

    def _tier(self, store: Any) -> Iterator[Metric]:
        """The tiered store (``store.tier``, store/tier/service.py): upload lag and counters."""
        tier = getattr(store, "tier", None)
        if tier is None:
            return
        m = tier.metrics()
        for name, key, doc in (
                ("rocketstore_tier_upload_lag_messages", "lag_messages",
                 "Messages in local queues not in the tier yet."),
                ("rocketstore_tier_upload_lag_bytes", "lag_bytes",
                 "CommitLog bytes since the oldest message not in the tier yet."),
                ("rocketstore_tier_upload_lag_seconds", "lag_seconds",
                 "Store-time age of the oldest message not in the tier yet."),
                ("rocketstore_tier_index_pending_keys", "index_pending_keys",
                 "Keys waiting for the next INDEX segment."),
                ("rocketstore_tier_index_segments", "index_segments", "INDEX segments in the tier."),
                ("rocketstore_tier_quarantined_segments", "quarantined_segments",
                 "Copies of damaged tier segments kept under quarantine/ (records beyond repair).")):
            yield GaugeMetricFamily(name, doc, value=m[key])
        for name, key, doc in (
                ("rocketstore_tier_uploaded_messages", "uploaded_messages",
                 "Messages uploaded to the tier since start."),
                ("rocketstore_tier_uploaded_bytes", "uploaded_bytes",
                 "Record bytes uploaded to the tier since start."),
                ("rocketstore_tier_upload_errors", "upload_errors",
                 "Upload rounds that failed (retried with backoff)."),
                ("rocketstore_tier_object_store_retries", "retries",
                 "Object store calls that failed and were tried again."),
                ("rocketstore_tier_reads", "reads", "Pulls the tier answered (fall-throughs "
                 "and tieredStorageLevel reads)."),
                ("rocketstore_tier_read_errors", "read_errors",
                 "Records the tier should hold that were missing or failed their checks."),
                ("rocketstore_tier_repaired_records", "repaired_records",
                 "Damaged tier records rewritten from the local CommitLog."),
                ("rocketstore_tier_repaired_segments", "repaired_segments",
                 "Tier segments rewritten by a repair.")):
            yield CounterMetricFamily(name, doc, value=m[key])
        expired = CounterMetricFamily("rocketstore_tier_expired_segments", "Segments "
                                      "tieredStoreFileReservedTime deleted.", labels=["type"])
        for t, n in sorted(m["expired_segments"].items()):
            expired.add_metric([t], n)
        yield expired

    def _queues(self, store: Any) -> Iterator[Metric]:
        tvs = views.topic_views(store, self.state.topics, self.state.broker_name)
        hi = _gauge("rocketstore_queue_max_offset", "Max offset (next to write) of each "
                    "ConsumeQueue.", ["topic", "queue_id"])
        lo = _gauge("rocketstore_queue_min_offset", "Min offset (oldest kept) of each "
                    "ConsumeQueue.", ["topic", "queue_id"])
        for tv in tvs:
            for q in tv.queues:
                hi.add_metric([tv.topic, str(q.queue_id)], q.max_offset)
                lo.add_metric([tv.topic, str(q.queue_id)], q.min_offset)
        yield GaugeMetricFamily("rocketmq_topic_number", "Topics on this broker.",
                                value=len(tvs))
        yield from (hi, lo)

    def _groups(self, store: Any) -> Iterator[Metric]:
        st = self.state
        gvs = views.settled(views.group_views, store, st.topics, st.offsets, st.consumers,
                            st.subgroups, broker_name=st.broker_name)
        lag = _gauge("rocketmq_consumer_lag_messages", "Messages not yet consumed, per group "
                     "and topic (broker offset - committed offset).", ["consumer_group", "topic"])
        qlag = _gauge("rocketstore_consumer_queue_lag_messages", "Messages not yet consumed, "
                      "per group and queue.", ["consumer_group", "topic", "queue_id"])
        off = _gauge("rocketstore_consumer_offset", "Committed offset, per group and queue.",
                     ["consumer_group", "topic", "queue_id"])
        latency = _gauge("rocketmq_consumer_lag_latency_seconds", "Age of the oldest message "
                         "not yet consumed by the group.", ["consumer_group"])
        conns = _gauge("rocketmq_consumer_connections", "Live clients of each consumer group.",
                       ["consumer_group"])
        for g in gvs:
            for topic, n in sorted(g.topic_lag().items()):
                lag.add_metric([g.group, topic], n)
            for q in g.queues:
                labels = [g.group, q.topic, str(q.queue_id)]
                qlag.add_metric(labels, q.lag)
                off.add_metric(labels, q.consumer_offset)
            latency.add_metric([g.group], g.lag_latency_ms / 1000.0)
            conns.add_metric([g.group], len(g.clients))
        yield GaugeMetricFamily("rocketmq_consumer_group_number", "Consumer groups known to "
                                "this broker (committed offsets or live clients).",
                                value=len(gvs))
        yield from (lag, qlag, off, latency, conns)


def _copy(table: dict) -> dict:
    """A copy of a table another thread may grow (retry when it changed under us)."""
    for _ in range(5):
        try:
            return dict(table)
        except RuntimeError:
            continue
    return {}


class MetricsServer:
    """prometheus-client's HTTP server for one registry, in a daemon thread."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *,
                 limits: Any = None, allowed_hosts: Any = None) -> None:
        from ..netlimits import ConnectionLimiter, Limits
        from .httpguard import allowed_hosts as default_hosts

        self.registry = registry
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self.limiter = ConnectionLimiter(self.limits, "metrics")
        self.allowed = allowed_hosts or default_hosts(host)
        self._httpd: Any = None
        self._thread: Any = None

    def start(self) -> None:
        """Serve on a thread: the Host allow-list and connection limits of ``httpguard``."""
        import threading

        from prometheus_client import make_wsgi_app

        from .httpguard import host_check_wsgi, limited_wsgi_server

        app = host_check_wsgi(make_wsgi_app(self.registry), self.allowed)
        self._httpd = limited_wsgi_server(app, self.host, self.port, self.limiter, self.limits)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="MetricsServer",
                                        daemon=True)
        self._thread.start()
        self.port = self._httpd.server_port

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = self._thread = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"
