"""Read-only views over broker state: what the metrics endpoint and the web console show.

Theory of operation: every view is a plain function of the parts it reads — the
``MessageStore`` (offsets, timestamps, lookups), the ``TopicConfigManager``, the
``ConsumerOffsetManager`` and, when a broker runs, the ``ConsumerManager`` — and returns plain
data (dataclasses, dicts, lists) that a template or a collector turns into output. Nothing here
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

from ..format.message import MessageExt

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRANS_OP_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
                           "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest"})


def now_ms() -> int:
    return int(time.time() * 1000)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic.startswith("RMQ_SYS_")


# -- the store ------------------------------------------------------------------------------------
@dataclass
class PathUsage:
    """One store directory: the bytes of our files in it and the filesystem it lives on."""
    kind: str  # commitlog | consumequeue | index | config
    path: str
    files_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int

    @property
    def disk_used_ratio(self) -> float:
        if self.disk_total_bytes <= 0:
            return 0.0
        return (self.disk_total_bytes - self.disk_free_bytes) / self.disk_total_bytes


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
    return PathUsage(kind, path, _dir_bytes(path), total, free)


def store_paths(cfg: Any) -> list[tuple[str, str]]:
    root = cfg.store_path_root_dir
    return [("commitlog", cfg.commitlog_dir), ("consumequeue", cfg.consume_queue_dir),
            ("index", cfg.index_dir), ("config", os.path.join(root, "config"))]


def store_runtime(store: Any, cfg: Any, *, with_disk: bool = True) -> StoreRuntime:
    """Offsets, dispatch and flush lag (bytes and ms), and disk use of each store path.

    Dispatch lag in ms is the store time of the newest message minus that of the newest one
    the reput has dispatched to the ConsumeQueues; flush lag in ms likewise against the newest
    message on disk. Both are 0 whenever the byte lag is 0.
    """
    cl = store.commitlog
    max_off, min_off = store.get_max_phy_offset(), store.get_min_phy_offset()
    flushed = cl.flushed_offset()
    last_ts = cl.last_store_timestamp()
    cp = store.checkpoint
    dispatch_bytes = store.dispatch_behind_bytes()
    flush_bytes = max(0, max_off - flushed)
    dispatch_ms = max(0, last_ts - cp.logics_msg_timestamp) if dispatch_bytes else 0
    flush_ms = max(0, last_ts - cp.physic_msg_timestamp) if flush_bytes else 0
    paths = [path_usage(k, p) for k, p in store_paths(cfg)] if with_disk else []
    return StoreRuntime(min_off, max_off, flushed, dispatch_bytes, dispatch_ms, flush_bytes,
                        flush_ms, last_ts, paths)


# -- topics and queues ----------------------------------------------------------------------------
@dataclass
class QueueView:
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0  # store time of the newest message, ms; 0 = empty

    @property
    def messages(self) -> int:
        return max(0, self.max_offset - self.min_offset)


@dataclass
class TopicView:
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    system: bool
    queues: list[QueueView] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return sum(q.messages for q in self.queues)

    @property
    def max_offset_total(self) -> int:
        return sum(q.max_offset for q in self.queues)

    @property
    def last_update_timestamp(self) -> int:
        return max((q.last_update_timestamp for q in self.queues), default=0)


def topic_names(store: Any, topics: Any) -> list[str]:
    """Every topic configured or holding a ConsumeQueue, sorted."""
    names = {tc.topic_name for tc in topics.topics()} if topics is not None else set()
    names.update(store.topics())
    return sorted(names)


def queue_view(store: Any, topic: str, queue_id: int, *, timestamps: bool = True) -> QueueView:
    lo = store.get_min_offset_in_queue(topic, queue_id)
    hi = store.get_max_offset_in_queue(topic, queue_id)
    ts = 0
    if timestamps and hi > lo:
        ts = max(0, store.get_message_store_timestamp(topic, queue_id, hi - 1))
    return QueueView(queue_id, lo, hi, ts)


def topic_view(store: Any, topics: Any, topic: str, *, timestamps: bool = True) -> TopicView:
    tc = topics.get(topic) if topics is not None else None
    stored = store.topics().get(topic, [])
    n = max(tc.read_queue_nums, tc.write_queue_nums) if tc else 0
    qids = sorted(set(range(n)) | set(stored))
    return TopicView(topic, tc.read_queue_nums if tc else len(qids),
                     tc.write_queue_nums if tc else len(qids), tc.perm if tc else 6,
                     is_system_topic(topic),
                     [queue_view(store, topic, q, timestamps=timestamps) for q in qids])


def topic_views(store: Any, topics: Any, *, timestamps: bool = True) -> list[TopicView]:
    return [topic_view(store, topics, t, timestamps=timestamps) for t in topic_names(store, topics)]


# -- consumer groups ------------------------------------------------------------------------------
@dataclass
class QueueLag:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    last_consumed_timestamp: int  # store time of the last consumed message, ms; 0 = none


@dataclass
class ClientView:
    client_id: str
    address: str
    language: str
    version: int
    last_heartbeat_ms: int


@dataclass
class GroupView:
    group: str
    online: bool
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> expression
    clients: list[ClientView] = field(default_factory=list)
    queues: list[QueueLag] = field(default_factory=list)
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


def _group_offsets(offsets: Any) -> dict[str, dict[str, dict[int, int]]]:
    """group -> topic -> queue -> committed offset, from ``topic@group`` keys."""
    out: dict[str, dict[str, dict[int, int]]] = {}
    table = offsets.table() if offsets is not None else {}
    for key, queues in table.items():
        topic, sep, group = key.rpartition("@")
        if sep:
            out.setdefault(group, {})[topic] = dict(queues)
    return out


def group_names(offsets: Any, consumers: Any) -> list[str]:
    names = set(_group_offsets(offsets))
    if consumers is not None:
        names.update(_online_groups(consumers))
    return sorted(names)


def _online_groups(consumers: Any) -> dict[str, Any]:
    groups = getattr(consumers, "_groups", None)
    if groups is None:
        return {}
    for _ in range(3):  # mutated on the event loop: copy, retry if it changed under us
        try:
            return dict(groups)
        except RuntimeError:
            continue
    return {}


def group_view(store: Any, topics: Any, offsets: Any, consumers: Any, group: str,
               *, now: int | None = None) -> GroupView:
    """Committed offsets, lag per queue and the live clients of one consumer group."""
    now = now_ms() if now is None else now
    info = _online_groups(consumers).get(group) if consumers is not None else None
    gv = GroupView(group, online=bool(info and info.channels))
    if info is not None:
        gv.consume_type, gv.message_model = info.consume_type, info.message_model
        gv.consume_from_where = info.consume_from_where
        gv.subscriptions = {t: s.sub_string for t, s in list(info.subscriptions.items())}
        gv.clients = [ClientView(c.client_id, getattr(c.connection, "peer", ""), c.language,
                                 c.version, c.last_update_ms)
                      for c in list(info.channels.values())]
    committed = _group_offsets(offsets).get(group, {})
    oldest = 0
    for topic in sorted(set(committed) | set(gv.subscriptions)):
        tv = topic_view(store, topics, topic, timestamps=False)
        for q in tv.queues:
            c = committed.get(topic, {}).get(q.queue_id, -1)
            consumer = max(c, 0)
            lag = max(0, q.max_offset - max(consumer, q.min_offset)) if c >= 0 else \
                max(0, q.max_offset - q.min_offset)
            last_ts = 0
            if consumer > 0:
                last_ts = max(0, store.get_message_store_timestamp(topic, q.queue_id, consumer - 1))
            if lag > 0:
                first = store.get_message_store_timestamp(topic, q.queue_id,
                                                          max(consumer, q.min_offset))
                if first > 0 and (oldest == 0 or first < oldest):
                    oldest = first
            gv.queues.append(QueueLag(topic, q.queue_id, q.max_offset, consumer, lag, last_ts))
    gv.lag_latency_ms = max(0, now - oldest) if oldest else 0
    return gv


def group_views(store: Any, topics: Any, offsets: Any, consumers: Any) -> list[GroupView]:
    now = now_ms()
    return [group_view(store, topics, offsets, consumers, g, now=now)
            for g in group_names(offsets, consumers)]


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
    if m is not None and (not topic or m.topic == topic):
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
