"""Read-only views over broker state: what the metrics endpoint and the web console show.

Theory of operation: every view is a plain function of the parts it reads — the
``MessageStore`` (offsets, timestamps, lookups), the ``TopicConfigManager``, the
``ConsumerOffsetManager``, the ``ConsumerManager`` — and returns plain data (dataclasses,
dicts, lists) that a template or a collector turns into output. Topic and consume statistics
are the admin requests' own (``broker.admin.views``), so the console, ``/metrics`` and
``mqadmin`` agree; this module adds what a dashboard needs on top (store lag in ms, disk use
per path, lag latency, message search with body previews). Nothing here
writes: no topic is created, no offset committed, no file touched. The functions are safe to
call from another thread than the broker's event loop (the store is thread-safe; the state
tables are copied before they are walked).

Numbers follow RocketMQ's admin views: a queue's *broker offset* is its max offset (the next
offset to be written), a group's *consumer offset* is its committed offset (0 when the group
never committed on that queue, as ``getConsumeStats`` reports), the *lag* ("diff") is their
difference, and the *lag latency* is the age of the oldest message not yet consumed.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..broker.admin import views as av
from ..broker.state.topics import DLQ_PREFIX, RETRY_PREFIX
from ..broker.state.topics import TopicConfig
from ..format.message import MessageExt


def now_ms() -> int:
    return int(time.time() * 1000)


def settled(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a view that walks the broker's live tables (which the event loop changes while we
    read from another thread); retry when a table changed size under the walk."""
    for attempt in range(3):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:
            if "changed size during iteration" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


# -- the store ------------------------------------------------------------------------------------
@dataclass
class PathUsage:
    """One store directory: the bytes of our files in it and the filesystem it lives on."""
    kind: str  # commitlog | consumequeue | index | config
    path: str
    files_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int  # usable by the broker (not counting blocks reserved for root)
    disk_used_ratio: float  # RocketMQ's: used / (used + usable), as ``df`` and mqadmin show


@dataclass
class StoreRuntime:
    min_phy_offset: int
    max_phy_offset: int
    flushed_phy_offset: int
    dispatch_behind_bytes: int
    dispatch_behind_ms: int
    flush_behind_bytes: int
    flush_behind_ms: int
    last_store_timestamp: int  # store time of the newest message, ms (0 when empty)
    paths: list[PathUsage] = field(default_factory=list)

    @property
    def files_bytes(self) -> int:
        return sum(p.files_bytes for p in self.paths)


def _dir_bytes(path: str) -> int:
    total = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:  # a file deleted by the clean service meanwhile
                        continue
        except OSError:
            continue
    return total


def path_usage(kind: str, path: str) -> PathUsage:
    try:
        st = os.statvfs(path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    except OSError:
        total = free = 0
    return PathUsage(kind, path, _dir_bytes(path), total, free, max(0.0, av.disk_ratio(path)))


def store_paths(cfg: Any) -> list[tuple[str, str]]:
    root = cfg.store_path_root_dir
    return [("commitlog", cfg.commitlog_dir), ("consumequeue", cfg.consume_queue_dir),
            ("index", cfg.index_dir), ("config", os.path.join(root, "config"))]


def store_runtime(store: Any, cfg: Any, *, with_disk: bool = True) -> StoreRuntime:
    """Offsets, dispatch and flush lag (bytes and ms), and disk use of each store path.

    A lag in ms is the store-time span of the data behind: the newest message's store time
    minus that of the oldest message not yet dispatched (to the ConsumeQueues and index) or
    not yet flushed (to disk). Both are 0 whenever the byte lag is 0.
    """
    cl = store.commitlog
    max_off, min_off = store.get_max_phy_offset(), store.get_min_phy_offset()
    flushed = cl.flushed_offset()
    last_ts = cl.last_store_timestamp()
    cp = store.checkpoint
    dispatch_bytes = store.dispatch_behind_bytes()
    flush_bytes = max(0, max_off - flushed)
    dispatch_ms = flush_ms = 0
    if dispatch_bytes:
        reput_from = getattr(getattr(store, "reput", None), "reput_from", max_off - dispatch_bytes)
        dispatch_ms = _span_ms(store, reput_from, last_ts, cp.logics_msg_timestamp)
    if flush_bytes:
        flush_ms = _span_ms(store, flushed, last_ts, cp.physic_msg_timestamp)
    paths = [path_usage(k, p) for k, p in store_paths(cfg)] if with_disk else []
    return StoreRuntime(min_off, max_off, flushed, dispatch_bytes, dispatch_ms, flush_bytes,
                        flush_ms, last_ts, paths)


def _span_ms(store: Any, first_behind: int, last_ts: int, done_ts: int) -> int:
    """Store time of the newest message minus that of the record at ``first_behind`` (or,
    when that is the blank tail of a segment, of the newest message already done)."""
    m = store.look_message_by_offset(first_behind)
    first = m.store_timestamp if m is not None else done_ts
    return max(0, last_ts - first) if first > 0 and last_ts > 0 else 0


# -- topics and queues ----------------------------------------------------------------------------
@dataclass
class TopicView:
    """A topic and its write queues (``admin.views.topic_stats``: RocketMQ's topic stats)."""
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    system: bool
    queues: list[av.QueueStats] = field(default_factory=list)
    put_tps: float | None = None  # messages/s over the last minute, when a broker knows it

    @property
    def messages(self) -> int:
        return sum(max(0, q.max_offset - q.min_offset) for q in self.queues)

    @property
    def max_offset_total(self) -> int:
        return sum(q.max_offset for q in self.queues)

    @property
    def last_update_timestamp(self) -> int:
        return max((q.last_update_timestamp for q in self.queues), default=0)


def is_system_topic(topic: str) -> bool:
    return av.is_system_topic(topic) or topic.startswith("RMQ_SYS_")


def topic_config(store: Any, topics: Any, topic: str) -> Any:
    """The topic's config; for a topic that has queues on disk but no entry in ``topics.json``
    (a store directory copied without its config), one that covers the queues found."""
    tc = topics.get(topic)
    if tc is None:
        qids = store.topics().get(topic)
        if qids:
            n = max(qids) + 1
            tc = TopicConfig(topic, n, n)
    return tc


def topic_names(store: Any, topics: Any) -> list[str]:
    """Every topic configured or holding a ConsumeQueue, sorted."""
    return sorted(set(av.topic_names(topics)) | set(store.topics()))


def topic_view(store: Any, topics: Any, topic: str, broker_name: str = "") -> TopicView | None:
    tc = topic_config(store, topics, topic)
    if tc is None:
        return None
    return TopicView(topic, tc.read_queue_nums, tc.write_queue_nums, tc.perm,
                     is_system_topic(topic), av.topic_stats(store, tc, broker_name))


def topic_views(store: Any, topics: Any, broker_name: str = "") -> list[TopicView]:
    out = (topic_view(store, topics, t, broker_name) for t in topic_names(store, topics))
    return [tv for tv in out if tv is not None]


# -- consumer groups ------------------------------------------------------------------------------
@dataclass
class GroupView:
    """A consumer group: its live clients (``consumer_connection``) and, per read queue, the
    broker offset, committed offset and lag (``consume_stats``: RocketMQ's consume stats)."""
    group: str
    online: bool
    system: bool = False
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> expression
    clients: list[dict] = field(default_factory=list)  # clientId, clientAddr, language, version
    queues: list[av.ConsumeQueueStats] = field(default_factory=list)
    consume_tps: float = 0.0
    lag_latency_ms: int = 0  # age of the oldest message not yet consumed

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def topics(self) -> list[str]:
        return sorted({q.topic for q in self.queues} | set(self.subscriptions))

    def topic_lag(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.topic] = out.get(q.topic, 0) + q.lag
        return out


SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                           "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                           "CID_ONSAPI_OWNER", "SCHEDULE_CONSUMER", "rocketstore_cli"})


def is_system_group(group: str) -> bool:
    """RocketMQ's built-in groups (``MixAll``), which its dashboard files under "system"."""
    return group in SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")


def group_names(offsets: Any, consumers: Any, subgroups: Any = None) -> list[str]:
    """Groups with live clients, committed offsets or a subscription-group config."""
    return [g for g in av.all_group_names(offsets, consumers, subgroups)
            if not g.startswith(RETRY_PREFIX) and not g.startswith(DLQ_PREFIX)]


def group_view(store: Any, topics: Any, offsets: Any, consumers: Any, group: str, *,
               broker_name: str = "", stats: Any = None, now: int | None = None) -> GroupView:
    """Committed offsets, lag per queue and the live clients of one consumer group."""
    now = now_ms() if now is None else now
    conn = av.consumer_connection(consumers, group)
    gv = GroupView(group, online=bool(conn and conn["connectionSet"]),
                   system=is_system_group(group))
    if conn is not None:
        gv.consume_type, gv.message_model = conn["consumeType"], conn["messageModel"]
        gv.consume_from_where = conn["consumeFromWhere"]
        gv.subscriptions = {t: s["subString"] for t, s in conn["subscriptionTable"].items()}
        gv.clients = conn["connectionSet"]
    for topic in sorted(set(av.topics_of_group(offsets, group)) | set(gv.subscriptions)):
        cs = av.consume_stats(store, topics, offsets, consumers, broker_name, group, topic,
                              stats)
        gv.queues.extend(cs.queues)
        gv.consume_tps += cs.consume_tps
    oldest = 0
    for q in gv.queues:
        if q.lag > 0:
            first = max(q.consumer_offset, store.get_min_offset_in_queue(q.topic, q.queue_id))
            ts = store.get_message_store_timestamp(q.topic, q.queue_id, first)
            if ts > 0 and (oldest == 0 or ts < oldest):
                oldest = ts
    gv.lag_latency_ms = max(0, now - oldest) if oldest else 0
    return gv


def group_views(store: Any, topics: Any, offsets: Any, consumers: Any, subgroups: Any = None,
                *, broker_name: str = "", stats: Any = None) -> list[GroupView]:
    now = now_ms()
    return [group_view(store, topics, offsets, consumers, g, broker_name=broker_name,
                       stats=stats, now=now)
            for g in group_names(offsets, consumers, subgroups)]


# -- messages -------------------------------------------------------------------------------------
@dataclass
class MessageView:
    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    tags: str
    keys: list[str]
    store_timestamp: int
    born_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    store_size: int
    body_size: int
    body_preview: str
    body_is_text: bool
    properties: dict[str, str]


PREVIEW_BYTES = 512


def body_preview(body: bytes, limit: int = PREVIEW_BYTES) -> tuple[str, bool]:
    """The first ``limit`` bytes as text when they are UTF-8 text, else as hex."""
    head = body[:limit]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(head) == limit and exc.start >= limit - 3:  # a character cut at the limit
            text = head[:exc.start].decode("utf-8")
        else:
            return head.hex(" "), False
    if any(ord(ch) < 32 and ch not in "\t\r\n" for ch in text):
        return head.hex(" "), False
    return text + ("…" if len(body) > limit else ""), True


def message_view(m: MessageExt) -> MessageView:
    preview, is_text = body_preview(m.body or b"")
    return MessageView(m.msg_id, m.uniq_key or "", m.topic, m.queue_id, m.queue_offset,
                       m.commitlog_offset, m.tags or "", list(m.keys or []), m.store_timestamp,
                       m.born_timestamp, m.born_host, m.store_host, m.reconsume_times,
                       m.store_size, len(m.body or b""), preview, is_text, dict(m.properties))


def find_by_key(store: Any, topic: str, key: str, max_num: int = 64, begin: int = 0,
                end: int | None = None) -> list[MessageView]:
    q = store.query_message(topic, key, max_num=max_num, begin=begin, end=end)
    return [message_view(m) for m in q.messages]


def find_by_id(store: Any, msg_id: str, topic: str | None = None) -> list[MessageView]:
    """An offset message id (32 hex digits with the store address), or a unique key (client
    id) looked up in the index — which needs the topic."""
    msg_id = msg_id.strip()
    m = store.view_message_by_id(msg_id)
    # the id names a host and an offset: the record there must carry exactly this id
    if m is not None and m.msg_id.upper() == msg_id.upper() and (not topic or m.topic == topic):
        return [message_view(m)]
    if topic:
        return [message_view(x) for x in store.query_message(topic, msg_id, max_num=32).messages
                if x.uniq_key == msg_id]
    return []


def find_by_offset(store: Any, commitlog_offset: int) -> list[MessageView]:
    m = store.look_message_by_offset(commitlog_offset)
    return [message_view(m)] if m is not None else []


def find_by_time(store: Any, topic: str, begin: int, end: int, max_num: int = 64,
                 queue_ids: Iterable[int] | None = None) -> list[MessageView]:
    """Messages of ``topic`` stored in [begin, end] ms, oldest first, at most ``max_num``."""
    qids = list(queue_ids) if queue_ids is not None else store.topics().get(topic, [])
    found: list[MessageExt] = []
    for qid in qids:
        off = store.get_offset_in_queue_by_time(topic, qid, begin)
        hi = store.get_max_offset_in_queue(topic, qid)
        taken = 0
        while off < hi and taken < max_num:
            g = store.get_message("", topic, qid, off, min(32, max_num - taken))
            if not g.messages:
                break
            stop = False
            for m in g.messages:
                if m.store_timestamp > end:
                    stop = True
                    break
                if m.store_timestamp >= begin:
                    found.append(m)
                    taken += 1
            if stop or g.next_begin_offset <= off:
                break
            off = g.next_begin_offset
    found.sort(key=lambda m: (m.store_timestamp, m.commitlog_offset))
    return [message_view(m) for m in found[:max_num]]


def tier_view(store: Any) -> dict | None:
    """The tiered store as the console shows it (``store.tier``, store/tier/service.py): per
    queue the local offsets beside the tier's and what waits for upload; upload lag in
    messages, bytes and seconds; counters and errors; records kept aside beyond repair. None
    without a tier. Where the tier is, never its credentials."""
    tier = getattr(store, "tier", None)
    if tier is None:
        return None
    from ..store.tier.service import tiered_topic
    m, st = tier.metrics(), tier.status()
    held = {(q["topic"], q["queueId"]): q for q in st["queues"]}
    queues = []
    for cq in sorted(store.cq_table, key=lambda c: (c.topic, c.queue_id)):
        if not tiered_topic(cq.topic):
            continue
        q = held.pop((cq.topic, cq.queue_id), None)
        lmin, lmax = cq.min_offset_in_queue(), cq.max_offset_in_queue()
        tmax = q["maxOffset"] if q is not None and q["maxOffset"] >= 0 else None
        queues.append({"topic": cq.topic, "queue_id": cq.queue_id, "local_min": lmin,
                       "local_max": lmax, "tier_min": q["minOffset"] if tmax is not None else None,
                       "tier_max": tmax, "tier_bytes": q["commitLogBytes"] if q else 0,
                       "pending": max(0, lmax - (tmax if tmax is not None else lmin))})
    for (topic, qid), q in sorted(held.items()):  # in the tier only (e.g. the topic was deleted)
        queues.append({"topic": topic, "queue_id": qid, "local_min": None, "local_max": None,
                       "tier_min": q["minOffset"], "tier_max": q["maxOffset"],
                       "tier_bytes": q["commitLogBytes"], "pending": 0})
    return {"backend": st["backend"], "where": tier._where(), "storage_level": st["storageLevel"],
            "lag_messages": m["lag_messages"], "lag_bytes": m["lag_bytes"],
            "lag_seconds": m["lag_seconds"], "uploaded_messages": m["uploaded_messages"],
            "uploaded_bytes": m["uploaded_bytes"], "upload_errors": m["upload_errors"],
            "read_errors": m["read_errors"], "retries": m["retries"], "reads": m["reads"],
            "repaired_records": m["repaired_records"], "error": st["error"],
            "missing": st["missing"], "damaged": st["damaged"], "queues": queues}
