"""``topics.json``: which topics exist, with how many queues and which perm, and the rules every
path that names a topic follows (RocketMQ's ``TopicConfigManager`` and ``TopicValidator``).

Shape, as RocketMQ 4.9's ``ConfigManager`` writes it::

    topics.json          {"dataVersion":{...},"topicConfigTable":{"T":{"topicName":"T",
                          "readQueueNums":4,"writeQueueNums":4,"perm":6,
                          "topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}}}

Theory of operation: the manager keeps its table in memory behind a lock (touched from the event
loop and from executor threads); ``persist()`` writes the whole file through ``files``. A single
change (create, update, delete) does not rewrite the file: it appends one JSON line to
``topics.json.changes`` and syncs it, so creating the 20,000th topic costs what the 20th did
(a whole-file write grows with the table: 70 ms at 20,000 topics). Loading replays those lines
over ``topics.json`` (a torn last line — a crash mid-append — is ignored: that change was never
acknowledged). The file is rewritten whole and the journal emptied when the journal holds more
lines than half the table (so the rewrite's cost per change stays constant), and by every
``persist()`` (broker start and shutdown), so a stopped broker leaves RocketMQ's one file.
``ensure_topic`` is the one place a topic is auto-created: on a send, a retry, a DLQ move, a
reply and a gRPC consumer's retry topic alike.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ...remoting.codes import PERM_INHERIT, PERM_READ, PERM_RW, PERM_WRITE
from .files import load_json_lenient, write_bytes_atomic

log = logging.getLogger(__name__)
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def readable(perm: int) -> bool:
    """``PermName.isReadable``."""
    return bool(perm & PERM_READ)


def writable(perm: int) -> bool:
    """``PermName.isWriteable``."""
    return bool(perm & PERM_WRITE)


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: RocketMQ 5's topic attributes (``message.type``: NORMAL, FIFO, DELAY, TRANSACTION, MIXED;
    #: see ``topic_attributes``); written only when there are some (4.9's shape otherwise)
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        d = {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
             "writeQueueNums": self.write_queue_nums, "perm": self.perm,
             "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
             "order": self.order}
        if self.attributes:
            d["attributes"] = dict(self.attributes)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TopicConfig":
        return cls(topic_name=d["topicName"], read_queue_nums=int(d.get("readQueueNums", 4)),
                   write_queue_nums=int(d.get("writeQueueNums", 4)), perm=int(d.get("perm", 6)),
                   topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
                   topic_sys_flag=int(d.get("topicSysFlag", 0)), order=bool(d.get("order", False)),
                   attributes={str(k): str(v) for k, v in (d.get("attributes") or {}).items()})


class TopicConfigManager:
    """``topics.json``: which topics exist and how many queues each has."""

    DEFAULT_TOPIC = "TBW102"

    def __init__(self, config_dir: str, default_queue_nums: int = 4) -> None:
        self.path = os.path.join(config_dir, "topics.json")
        self.default_queue_nums = default_queue_nums
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._counter = 0
        self._json_cache: dict[str, tuple[tuple, str]] = {}  # name -> (fields, its JSON)
        data = load_json_lenient(self.path) or {}
        for name, d in (data.get("topicConfigTable") or {}).items():
            self._topics[name] = TopicConfig.from_json({"topicName": name, **d})
        self._counter = int((data.get("dataVersion") or {}).get("counter", 0))
        self.journal_path = self.path + JOURNAL_SUFFIX
        self._journal_fd = -1
        self._journal_lines = self._replay_journal()
        if self.DEFAULT_TOPIC not in self._topics:  # RocketMQ: defaultTopicQueueNums queues
            self._topics[self.DEFAULT_TOPIC] = TopicConfig(self.DEFAULT_TOPIC, default_queue_nums,
                                                           default_queue_nums, 7)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def topics(self) -> list[TopicConfig]:
        return list(self._topics.values())

    def create(self, topic: str, queue_nums: int | None = None, *, perm: int = PERM_RW,
               read_queue_nums: int | None = None, order: bool = False,
               topic_sys_flag: int = 0, persist: bool = True) -> TopicConfig:
        """Create (or, if it exists, return) a topic; ``update`` replaces an existing one."""
        validate_topic(topic)
        with self._lock:
            tc = self._topics.get(topic)
            if tc is not None:
                return tc
            n = queue_nums or self.default_queue_nums
            tc = TopicConfig(topic, read_queue_nums or n, n, perm, order=order,
                             topic_sys_flag=topic_sys_flag)
            self._topics[topic] = tc
            self._counter += 1
            if persist:
                self._log_change(topic, tc)
        self._maybe_compact()
        return tc

    def update(self, tc: TopicConfig) -> None:
        validate_topic(tc.topic_name)
        with self._lock:
            self._topics[tc.topic_name] = tc
            self._counter += 1
            self._log_change(tc.topic_name, tc)
        self._maybe_compact()

    def delete(self, topic: str) -> bool:
        """Forget a topic (DELETE_TOPIC_IN_BROKER); True if it existed."""
        with self._lock:
            found = self._topics.pop(topic, None) is not None
            if found:
                self._counter += 1
                self._log_change(topic, None)
        self._maybe_compact()
        return found

    def replace_all(self, table: dict[str, dict]) -> None:
        """A slave takes its master's whole table (SlaveSynchronize); persisted."""
        topics = {}
        for name, d in table.items():
            topics[name] = TopicConfig.from_json({"topicName": name, **(d or {})})
        with self._lock:
            self._topics = topics
            if self.DEFAULT_TOPIC not in self._topics:
                self._topics[self.DEFAULT_TOPIC] = TopicConfig(self.DEFAULT_TOPIC, 8, 8, 7)
            self._counter += 1
        self.persist()

    @property
    def data_version(self) -> int:
        """Moves on every change of the table (RocketMQ's ``dataVersion`` counter)."""
        return self._counter

    def update_order_topics(self, order_topics: set[str]) -> bool:
        """RocketMQ's ``updateOrderTopicConfig``: exactly the topics named by the name server's
        ORDER_TOPIC_CONFIG are ``order``; True (and persisted) if any flag changed."""
        with self._lock:
            changed = False
            for tc in self._topics.values():
                want = tc.topic_name in order_topics
                if tc.order != want:
                    tc.order = want
                    changed = True
            if changed:
                self._counter += 1
        if changed:
            self.persist()
        return changed

    # -- the change journal -----------------------------------------------------------------------
    def _replay_journal(self) -> int:
        """Apply ``topics.json.changes`` over the loaded table; returns its line count."""
        try:
            with open(self.journal_path, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            return 0
        lines = raw.split(b"\n")
        n = 0
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
                name, value, counter = e["t"], e["v"], int(e["c"])
            except (ValueError, KeyError, TypeError):
                if i >= len(lines) - 2:  # the last line, torn by a crash mid-append
                    log.warning("%s: a torn last line ignored (a change never acknowledged)",
                                self.journal_path)
                    break
                raise ValueError(f"{self.journal_path}: line {i + 1} is not a topic change")
            if value is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = TopicConfig.from_json({"topicName": name, **value})
            self._counter = max(self._counter, counter)
            n += 1
        return n

    def _log_change(self, name: str, tc: "TopicConfig | None") -> None:
        """Append one change and sync it (caller holds ``_lock``, so lines follow the table's
        order)."""
        line = json.dumps({"c": self._counter, "t": name,
                           "v": None if tc is None else tc.to_json()},
                          ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
        if self._journal_fd < 0:
            os.makedirs(os.path.dirname(self.journal_path), exist_ok=True)
            self._journal_fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                       0o644)
        os.write(self._journal_fd, line)
        os.fdatasync(self._journal_fd)
        self._journal_lines += 1

    def _maybe_compact(self) -> None:
        if self._journal_lines > max(JOURNAL_MIN_LINES, len(self._topics) // 2):
            self.persist()

    def persist(self) -> None:
        """Write the whole table. Each topic's JSON is cached until the topic changes, so a write
        costs a join over the table, not a serialisation of it: creating the 5,000th topic costs
        about what the 50th did (RocketMQ also rewrites the whole file on every change)."""
        with self._lock:
            version = json.dumps({"counter": self._counter, "timestamp": int(time.time() * 1000)},
                                 sort_keys=True)
            cache = self._json_cache
            parts = []
            for name in sorted(self._topics):
                t = self._topics[name]
                key = (t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm,
                       t.topic_filter_type, t.topic_sys_flag, t.order,
                       tuple(sorted(t.attributes.items())))
                hit = cache.get(name)
                if hit is None or hit[0] != key:
                    hit = cache[name] = (key, json.dumps(name, ensure_ascii=False) + ":"
                                         + json.dumps(t.to_json(), ensure_ascii=False, sort_keys=True))
                parts.append(hit[1])
            for gone in cache.keys() - self._topics.keys():
                del cache[gone]
            text = ('{"dataVersion":' + version + ',\n"topicConfigTable":{\n' + ",\n".join(parts)
                    + "}}\n")
            # the whole table is in the file once it is durable: the journal can go (a crash
            # between the two replays it over the new file, to the same table)
            write_bytes_atomic(self.path, text.encode("utf-8"))
            if self._journal_lines or os.path.exists(self.journal_path):
                if self._journal_fd >= 0:
                    os.close(self._journal_fd)
                    self._journal_fd = -1
                try:
                    os.unlink(self.journal_path)
                except FileNotFoundError:
                    pass
                self._journal_lines = 0


JOURNAL_SUFFIX = ".changes"
JOURNAL_MIN_LINES = 1000  # below this the journal is never compacted by size


_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def validate_topic(topic: str) -> None:
    """RocketMQ's ``TopicValidator``: 1..127 chars of ``%|a-zA-Z0-9_-``."""
    if not topic or len(topic) > 127 or not _TOPIC_RE.match(topic):
        raise ValueError(f"illegal topic name {topic!r}: want 1..127 chars of [%|a-zA-Z0-9_-]")


def queue_nums_for(config: Any, topic: str) -> int:
    """How many queues an auto-created topic gets: one for retry and DLQ topics."""
    if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
        return 1
    return config.default_topic_queue_nums


def ensure_topic(topics: TopicConfigManager, config: Any, topic: str,
                 queue_nums: int | None = None) -> TopicConfig | None:
    """The topic's config, auto-creating it if allowed (``config.auto_create_topic_enable``;
    retry and DLQ topics always); None when it does not exist."""
    tc = topics.get(topic)
    if tc is None and (config.auto_create_topic_enable or topic.startswith(RETRY_PREFIX)
                       or topic.startswith(DLQ_PREFIX)):
        n = queue_nums or queue_nums_for(config, topic)
        default = topics.get(TopicConfigManager.DEFAULT_TOPIC)
        if default is not None and queue_nums:  # RocketMQ: at most TBW102's write queues
            n = min(n, default.write_queue_nums)
        tc = topics.create(topic, min(n, 1024) if n > 0 else queue_nums_for(config, topic))
    return tc


def learn_topic(topics: TopicConfigManager, config: Any, topic: str, queue_id: int) -> bool:
    """A topic the store holds messages of (on disk at start, or replicated to a slave) without
    a config: create it with the broker's defaults (at least ``queue_id + 1`` queues), so a
    restart or a promotion never hides messages. System topics are left to their services.
    True when it was created."""
    from .topic_validator import is_system_topic
    if topics.get(topic) is not None or is_system_topic(topic):
        return False
    try:
        topics.create(topic, max(queue_nums_for(config, topic), queue_id + 1))
    except ValueError:  # a name the topic rules refuse: nothing to serve it under
        return False
    return True


def create_cluster_topics(topics: TopicConfigManager, config: Any) -> None:
    """The topics every RocketMQ broker creates at start for its cluster and for itself
    (``TopicConfigManager.init``, clusterTopicEnable/brokerTopicEnable on by default): the
    cluster's, 16 queues, and the broker's own, 1 queue; both PERM_INHERIT | read | write.
    RocketMQ 5's proxy creates its system topics "on the brokers of the cluster" by finding the
    cluster topic's route (``createTopicOnTopicBrokerIfNotExist``)."""
    for name, queues in ((config.cluster_name, 16), (config.broker_name, 1)):
        if topics.get(name) is None and _TOPIC_RE.match(name or ""):  # RocketMQ skips none,
            topics.create(name, queues, perm=PERM_INHERIT | PERM_RW)  # but a name may not fit
