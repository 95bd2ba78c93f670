"""Read-only views of broker state: topic stats, consume stats, connections, runtime info.

These are the numbers RocketMQ's admin requests report (``TopicStatsTable``, ``ConsumeStats``,
``ConsumerConnection``, ``ProducerConnection``, the broker runtime ``KVTable``, ``ClusterInfo``),
computed from the store and the broker's state managers. The admin request handlers turn them
into RocketMQ's JSON bodies (``admin_bodies``); the web console, the metrics exporter and the
``rocketstore topics|status|consumers`` command use them as they are.

Theory of operation: every function takes exactly the objects it reads (the ``MessageStore``,
``TopicConfigManager``, ``ConsumerOffsetManager``, ``ConsumerManager``, ``ProducerManager``,
``BrokerConfig``, ``BrokerStats``) and returns plain dataclasses or dicts; none writes anything.
They call the store directly, so from the event loop run them on the store executor
(``await broker.run(topic_stats, ...)``). The rules are RocketMQ 4.9.7's
(``AdminBrokerProcessor``): topic stats walk the write queues, consume stats the read queues;
a negative offset reads as 0; a queue's last-update time is the store time of its last message.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from ...format.hashing import java_hash
from ..state.topics import DLQ_PREFIX, RETRY_PREFIX

SYSTEM_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "TBW102", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                           "SELF_TEST_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC"})


def is_system_topic(topic: str, config: Any = None) -> bool:
    """RocketMQ's ``TopicValidator.isSystemTopic`` (plus the cluster and broker name topics)."""
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.endswith("_REPLY_TOPIC"):
        return True
    if config is not None and topic in (getattr(config, "cluster_name", None),
                                        getattr(config, "broker_name", None)):
        return True
    return False


@dataclass(frozen=True)
class QueueStats:
    """One queue of ``TopicStatsTable``: ``TopicOffset`` plus the queue it belongs to."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int  # store time of the last message, 0 if the queue is empty


@dataclass(frozen=True)
class ConsumeQueueStats:
    """One queue of ``ConsumeStats``: ``OffsetWrapper`` plus the queue it belongs to."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int  # the queue's max offset
    consumer_offset: int  # the group's committed offset (0 when none)
    last_timestamp: int  # store time of the last consumed message, 0 if unknown

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass
class ConsumeStatsView:
    group: str
    queues: list[ConsumeQueueStats] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def total_lag(self) -> int:
        """RocketMQ's ``computeTotalDiff``."""
        return sum(q.broker_offset - q.consumer_offset for q in self.queues)

    def to_dict(self) -> dict:
        return {"group": self.group, "consumeTps": self.consume_tps, "totalLag": self.total_lag,
                "queues": [dict(asdict(q), lag=q.lag) for q in self.queues]}


# -- topics -------------------------------------------------------------------------------------
def topic_names(topics: Any) -> list[str]:
    """Every topic the broker knows, sorted (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
    return sorted(tc.topic_name for tc in topics.topics())


def topic_stats(store: Any, topic_config: Any, broker_name: str) -> list[QueueStats]:
    """Min/max offsets and last store time of each write queue of a topic (code 202)."""
    out = []
    topic = topic_config.topic_name
    for qid in range(topic_config.write_queue_nums):
        lo = max(0, store.get_min_offset_in_queue(topic, qid))
        hi = max(0, store.get_max_offset_in_queue(topic, qid))
        ts = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
        out.append(QueueStats(topic, broker_name, qid, lo, hi, max(0, ts)))
    return out


def topic_summary(store: Any, topics: Any, broker_name: str, *,
                  include_system: bool = False, config: Any = None) -> list[dict]:
    """One row per topic: queues, total messages now in the store, last store time."""
    rows = []
    for tc in sorted(topics.topics(), key=lambda t: t.topic_name):
        if not include_system and is_system_topic(tc.topic_name, config):
            continue
        qs = topic_stats(store, tc, broker_name)
        rows.append({"topic": tc.topic_name, "readQueueNums": tc.read_queue_nums,
                     "writeQueueNums": tc.write_queue_nums, "perm": tc.perm, "order": tc.order,
                     "messages": sum(q.max_offset - q.min_offset for q in qs),
                     "maxOffset": sum(q.max_offset for q in qs),
                     "lastUpdateTimestamp": max((q.last_update_timestamp for q in qs), default=0)})
    return rows


# -- consumer groups ----------------------------------------------------------------------------
def topics_of_group(offsets: Any, group: str) -> list[str]:
    """Topics a group has committed offsets on (``whichTopicByConsumer``)."""
    out = set()
    for key in offsets.table():
        topic, _, g = key.rpartition("@")
        if g == group:
            out.add(topic)
    return sorted(out)


def groups_of_topic(offsets: Any, consumers: Any, topic: str) -> list[str]:
    """Groups consuming a topic: online subscribers and groups with committed offsets
    (``queryTopicConsumeByWho``, code 300)."""
    out = set()
    for key in offsets.table():
        t, _, g = key.rpartition("@")
        if t == topic:
            out.add(g)
    for name in consumer_group_names(consumers):
        info = consumers.group(name)
        if info is not None and topic in info.subscriptions:
            out.add(name)
    return sorted(out)


def consumer_group_names(consumers: Any) -> list[str]:
    return consumers.group_names()


def all_group_names(offsets: Any, consumers: Any, subgroups: Any = None) -> list[str]:
    """Every group the broker knows: online, with committed offsets, or configured."""
    names = set(consumer_group_names(consumers))
    for key in offsets.table():
        names.add(key.rpartition("@")[2])
    if subgroups is not None:
        names.update(subgroups.names())
    return sorted(n for n in names if n)


def consume_stats(store: Any, topics: Any, offsets: Any, consumers: Any, broker_name: str,
                  group: str, topic: str | None = None, stats: Any = None) -> ConsumeStatsView:
    """Broker offset, committed offset and lag per read queue (GET_CONSUME_STATS, code 208)."""
    view = ConsumeStatsView(group)
    names = [topic] if topic else topics_of_group(offsets, group)
    info = consumers.group(group)
    for t in names:
        tc = topics.get(t)
        if tc is None:
            continue
        if info is not None and info.subscriptions and t not in info.subscriptions:
            continue  # RocketMQ: an online group that does not subscribe to t
        for qid in range(tc.read_queue_nums):
            broker_off = max(0, store.get_max_offset_in_queue(t, qid))
            consumer_off = max(0, offsets.query(group, t, qid))
            last = 0
            if consumer_off - 1 >= 0:
                ts = store.get_message_store_timestamp(t, qid, consumer_off - 1)
                last = ts if ts > 0 else 0
            view.queues.append(ConsumeQueueStats(t, broker_name, qid, broker_off, consumer_off,
                                                 last))
        if stats is not None:
            view.consume_tps += stats.group_get_tps(group, t)
    return view


def group_summary(store: Any, topics: Any, offsets: Any, consumers: Any, broker_name: str,
                  subgroups: Any = None, stats: Any = None) -> list[dict]:
    """One row per consumer group: online clients, model, topics, total lag, consume TPS."""
    rows = []
    for g in all_group_names(offsets, consumers, subgroups):
        if g.startswith(RETRY_PREFIX) or g.startswith(DLQ_PREFIX):
            continue
        cs = consume_stats(store, topics, offsets, consumers, broker_name, g, stats=stats)
        info = consumers.group(g)
        rows.append({"group": g, "online": len(info.channels) if info else 0,
                     "consumeType": info.consume_type if info else None,
                     "messageModel": info.message_model if info else None,
                     "topics": sorted({q.topic for q in cs.queues}),
                     "totalLag": cs.total_lag, "consumeTps": cs.consume_tps})
    return rows


# -- connections --------------------------------------------------------------------------------
def consumer_connection(consumers: Any, group: str) -> dict | None:
    """Who is online in a consumer group and what it subscribes (``ConsumerConnection``)."""
    info = consumers.group(group)
    if info is None:
        return None
    return {
        "connectionSet": [{"clientId": ch.client_id,
                           "clientAddr": str(getattr(ch.connection, "peer", "") or ""),
                           "language": ch.language, "version": ch.version}
                          for ch in info.channels.values()],
        "subscriptionTable": {t: subscription_data(s) for t, s in info.subscriptions.items()},
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "consumeFromWhere": info.consume_from_where,
    }


def subscription_data(sub: Any) -> dict:
    """RocketMQ's ``SubscriptionData`` for one subscription of a consumer group: as the client
    sent it in its heartbeat (as RocketMQ keeps it), tag sets filled in where it sent none."""
    expr = sub.sub_string or "*"
    raw = getattr(sub, "raw", None) or {}
    expression_type = str(getattr(sub, "expression_type", None) or raw.get("expressionType")
                          or "TAG")
    tags = [str(t) for t in raw["tagsSet"]] if isinstance(raw.get("tagsSet"), list) else None
    if tags is None:
        tags = [t.strip() for t in expr.split("||") if t.strip()] \
            if expression_type == "TAG" and expr.strip() not in ("*", "") else []
    codes = raw.get("codeSet") if isinstance(raw.get("codeSet"), list) else None
    if codes is None:
        codes = [java_hash(t) for t in tags]
    return {"classFilterMode": bool(raw.get("classFilterMode", False)),
            "codeSet": [int(c) for c in codes if str(c).lstrip("-").isdigit()],
            "expressionType": expression_type, "subString": expr,
            "subVersion": int(sub.sub_version), "tagsSet": tags, "topic": sub.topic}




def producer_connection(producers: Any, group: str) -> dict | None:
    """The live connections of a producer group (``ProducerConnection``); None if unknown."""
    chans = producers.channels(group)
    if not chans:
        return None
    return {"connectionSet": [{"clientId": c.client_id, "clientAddr": c.client_addr,
                               "language": c.language, "version": c.version} for c in chans]}


# -- broker -------------------------------------------------------------------------------------
def cluster_info(config: Any) -> dict:
    """``ClusterInfo``: this broker (id 0, master) in its cluster."""
    return {"brokerAddrTable": {config.broker_name: {
                "brokerAddrs": {0: config.broker_addr}, "brokerName": config.broker_name,
                "cluster": config.cluster_name}},
            "clusterAddrTable": {config.cluster_name: [config.broker_name]}}


def human_bytes(n: float) -> str:
    """``MixAll.humanReadableByteCount(n, false)``: 1.8 KiB, 252.0 GiB, 0 B."""
    if n < 1024:
        return f"{int(n)} B"
    exp = 0
    while n >= 1024 and exp < 6:
        n /= 1024.0
        exp += 1
    return f"{n:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_ratio(path: str) -> float:
    """Used fraction of the file system holding ``path`` (-1 if it does not exist)."""
    p = path
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        st = os.statvfs(p or ".")
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    used = total - st.f_bfree * st.f_frsize
    entire = used + st.f_bavail * st.f_frsize  # UtilAll: used + usable, rounded up to 1 %
    return -(-used * 100 // entire) / 100.0 if entire else -1.0


def runtime_info(store: Any, store_config: Any, broker_config: Any, stats: Any,
                 version_desc: str = "V4_9_7", version: int = 407) -> dict[str, str]:
    """The broker runtime ``KVTable`` (GET_BROKER_RUNTIME_INFO, code 28); every value a string."""
    now = int(time.time() * 1000)
    boot = stats.boot_ms if stats is not None else now
    up_s = max(0, (now - boot) // 1000)
    info: dict[str, Any] = {
        "brokerVersionDesc": version_desc, "brokerVersion": version,
        # RocketMQ 5: whether the broker serves as a master (clusterList's #ACTIVATED)
        "brokerActive": str(getattr(store_config, "broker_role", "") != "SLAVE").lower(),
        "bootTimestamp": boot,
        "runtime": f"[ {up_s // 86400} days, {up_s // 3600 % 24} hours, "
                   f"{up_s // 60 % 60} minutes, {up_s % 60} seconds ]",
        "commitLogMinOffset": store.get_min_phy_offset(),
        "commitLogMaxOffset": store.get_max_phy_offset(),
        "dispatchBehindBytes": store.dispatch_behind_bytes(),
        "pageCacheLockTimeMills": 0,
        "earliestMessageTimeStamp": earliest_message_time(store),
        "startAcceptSendRequestTimeStamp": 0,
        "sendThreadPoolQueueSize": 0, "sendThreadPoolQueueCapacity": 10000,
        "pullThreadPoolQueueSize": 0, "pullThreadPoolQueueCapacity": 100000,
        "queryThreadPoolQueueSize": 0, "queryThreadPoolQueueCapacity": 20000,
        "EndTransactionQueueSize": 0, "EndTransactionThreadPoolQueueCapacity": 100000,
        "sendThreadPoolQueueHeadWaitTimeMills": 0, "pullThreadPoolQueueHeadWaitTimeMills": 0,
        "queryThreadPoolQueueHeadWaitTimeMills": 0,
        # RocketMQ 5's pop acks and lite pulls have queues of their own (clusterList prints
        # the ack queue's size and wait; "N" when a broker has none)
        "ackThreadPoolQueueSize": 0, "ackThreadPoolQueueCapacity": 100000,
        "ackThreadPoolQueueHeadWaitTimeMills": 0,
        "litePullThreadPoolQueueSize": 0, "litePullThreadPoolQueueCapacity": 100000,
        "litePullThreadPoolQueueHeadWaitTimeMills": 0,
        "remainTransientStoreBufferNumbs": 2147483647,
        "remainHowManyDataToFlush": human_bytes(max(0, _unflushed(store))),
        "putMessageEntireTimeMax": 0, "getMessageEntireTimeMax": 0,
        "putMessageDistributeTime": "null", "dispatchMaxBuffer": 0,
        "putLatency99": "0.00", "putLatency999": "0.00",
    }
    from ...store.timer.service import runtime_info as timer_runtime_info
    info.update(timer_runtime_info(getattr(store, "timer", None)))  # RocketMQ 5's timer keys
    if getattr(store, "timer", None) is None:  # a read-only open: the same keys from the files
        from ...store.timer.offline import file_runtime_info
        info.update(file_runtime_info(store_config.store_path_root_dir, store_config.timer_precision_ms,
                                      store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0), now))
    root = store_config.store_path_root_dir
    cl_ratio = disk_ratio(store_config.commitlog_dir)
    info["commitLogDiskRatio"] = str(cl_ratio)
    info[f"commitLogDiskRatio_{store_config.commitlog_dir}"] = str(cl_ratio)
    info["consumeQueueDiskRatio"] = str(disk_ratio(store_config.consume_queue_dir))
    try:
        du = shutil.disk_usage(root)
        info["commitLogDirCapacity"] = (f"Total : {human_bytes(du.total)}, "
                                        f"Free : {human_bytes(du.free)}.")
    except OSError:
        pass
    if stats is not None:
        info.update(stats.totals())
        info["putTps"] = stats.tps_string(stats.put_msgs)
        info["getFoundTps"] = stats.tps_string(stats.get_found)
        info["getMissTps"] = stats.tps_string(stats.get_miss)
        info["getTransferedTps"] = stats.tps_string(stats.get_transferred)
        info["getTransferredTps"] = info["getTransferedTps"]  # RocketMQ 5's spelling
        found, miss = stats.get_found, stats.get_miss
        info["getTotalTps"] = " ".join(f"{found.rate(w) + miss.rate(w):.1f}" for w in (10, 60, 600))
        n = stats.put_msgs.total
        info["putMessageAverageSize"] = str(stats.put_bytes.total / n if n else 0.0)
    from ..replication import ha_runtime_fields  # master/slave replication (store/ha)
    info.update(ha_runtime_fields(store))
    health = getattr(store, "dispatch_error", None)
    info["dispatchHealthy"] = "false" if health else "true"
    if health:
        info["dispatchError"] = str(health)
    return {k: str(v) for k, v in info.items()}


def earliest_message_time(store: Any) -> int:
    """Store time of the oldest message in the CommitLog, -1 if it is empty."""
    lo = store.get_min_phy_offset()
    if lo < 0 or lo >= store.get_max_phy_offset():
        return -1
    m = store.look_message_by_offset(lo)
    return m.store_timestamp if m is not None else -1


def _unflushed(store: Any) -> int:
    cl = getattr(store, "commitlog", None)
    q = getattr(cl, "queue", None)
    flushed = getattr(q, "flushed_where", None)
    if callable(flushed):
        flushed = flushed()
    return store.get_max_phy_offset() - flushed if isinstance(flushed, int) else 0


def subscription_group_names(subgroups: Any) -> Iterable[str]:
    return subgroups.names() if subgroups is not None else ()
