"""Broker state files under ``<store>/config/``: topics, consumer offsets, delay offsets.

Shapes are RocketMQ 4.9's ``ConfigManager`` files::

    topics.json          {"dataVersion":{...},"topicConfigTable":{"T":{"topicName":"T",
                          "readQueueNums":4,"writeQueueNums":4,"perm":6,
                          "topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}}}
    consumerOffset.json  {"offsetTable":{"T@group":{"0":12,"1":5}}}
    delayOffset.json     {"offsetTable":{"1":3,"2":0}}

Theory of operation: each manager keeps its table in memory behind a lock (they are touched
from the event loop and from executor threads) and ``persist()`` writes the whole file the
crash-safe way: a temp file, fsync, ``os.replace``, fsync of the directory, plus a ``.bak`` copy
of the previous version as RocketMQ keeps. RocketMQ's fastjson writes integer map keys without
quotes (``{0:12}``); we write standard JSON, which RocketMQ also reads, and read both.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..remoting.codes import PERM_READ, PERM_RW, PERM_WRITE
from ..remoting.jsonbody import load_json_text
from ..store import syncprobe

log = logging.getLogger(__name__)

# files whose main copy ``load_json_lenient`` found damaged: the next write keeps those bytes
# aside (``<file>.damaged``) instead of rotating them into ``.bak`` over the good backup
_DAMAGED: set[str] = set()


def _read_config(path: str) -> dict | None:
    """One candidate: its object, None if absent or empty; ValueError if damaged."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    try:
        data = load_json_text(raw.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path}: damaged, not a RocketMQ config file: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: damaged, not a RocketMQ config file: a JSON "
                         f"{type(data).__name__}, not an object")
    return data


def load_json_lenient(path: str) -> dict | None:
    """Read a RocketMQ config JSON file (bare integer keys allowed); None if absent/empty.

    As RocketMQ's ``ConfigManager.load``: a file that is absent, empty or does not decode is
    read from ``<file>.bak``; when both are damaged a ValueError names them (a damaged file is
    never read as empty). Nothing is written here (read-only commands call this)."""
    try:
        data = _read_config(path)
    except ValueError as exc:
        try:
            bak = _read_config(path + ".bak")
        except ValueError as exc2:
            raise ValueError(f"{exc}; and its backup {exc2}") from exc
        if bak is None:
            raise
        log.error("%s; read from its backup %s.bak", exc, path)
        _DAMAGED.add(os.path.abspath(path))
        return bak
    if data is None:
        return _read_config(path + ".bak")
    return data


_WRITE_LOCK = threading.Lock()


def write_json_atomic(path: str, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as JSON: temp file, fsync, rename, fsync of the directory."""
    with _WRITE_LOCK:
        _write_json_atomic(path, obj)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """``write_json_atomic`` for JSON text the caller already built."""
    with _WRITE_LOCK:
        _write_bytes_atomic(path, data)


def _write_json_atomic(path: str, obj: Any) -> None:
    _write_bytes_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1,
                                         sort_keys=True).encode("utf-8"))


def _write_bytes_atomic(path: str, data: bytes) -> None:
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:  # a full disk: the old version stays, no partial temp file is left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if os.path.exists(path):
        # the previous version becomes the backup, unless it was found damaged: then it is
        # kept as ``.damaged`` for the operator and the good backup stays
        key = os.path.abspath(path)
        try:
            os.replace(path, path + (".damaged" if key in _DAMAGED else ".bak"))
        except OSError:
            pass
        else:
            _DAMAGED.discard(key)
        syncprobe.crash_point("state-write")
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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

    def to_json(self) -> dict:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    @classmethod
    def from_json(cls, d: dict) -> "TopicConfig":
        return cls(topic_name=d["topicName"], read_queue_nums=int(d.get("readQueueNums", 4)),
                   write_queue_nums=int(d.get("writeQueueNums", 4)), perm=int(d.get("perm", 6)),
                   topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
                   topic_sys_flag=int(d.get("topicSysFlag", 0)), order=bool(d.get("order", False)))


class TopicConfigManager:
    """``topics.json``: which topics exist and how many queues each has."""

    DEFAULT_TOPIC = "TBW102"

    def __init__(self, config_dir: str, default_queue_nums: int = 4) -> None:
        self.path = os.path.join(config_dir, "topics.json")
        self.default_queue_nums = default_queue_nums
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._json_cache: dict[str, tuple[tuple, str]] = {}  # name -> (fields, its JSON)
        self._counter = 0
        data = load_json_lenient(self.path) or {}
        for name, d in (data.get("topicConfigTable") or {}).items():
            self._topics[name] = TopicConfig.from_json({"topicName": name, **d})
        self._counter = int((data.get("dataVersion") or {}).get("counter", 0))
        if self.DEFAULT_TOPIC not in self._topics:
            self._topics[self.DEFAULT_TOPIC] = TopicConfig(self.DEFAULT_TOPIC, 8, 8, 7)

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
            self.persist()
        return tc

    def update(self, tc: TopicConfig) -> None:
        validate_topic(tc.topic_name)
        with self._lock:
            self._topics[tc.topic_name] = tc
            self._counter += 1
        self.persist()

    def delete(self, topic: str) -> bool:
        """Forget a topic (DELETE_TOPIC_IN_BROKER); True if it existed."""
        with self._lock:
            found = self._topics.pop(topic, None) is not None
            if found:
                self._counter += 1
        if found:
            self.persist()
        return found

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
                       t.topic_filter_type, t.topic_sys_flag, t.order)
                hit = cache.get(name)
                if hit is None or hit[0] != key:
                    hit = cache[name] = (key, json.dumps(name, ensure_ascii=False) + ":"
                                         + json.dumps(t.to_json(), ensure_ascii=False, sort_keys=True))
                parts.append(hit[1])
            for gone in cache.keys() - self._topics.keys():
                del cache[gone]
        text = '{"dataVersion":' + version + ',\n"topicConfigTable":{\n' + ",\n".join(parts) + "}}\n"
        write_bytes_atomic(self.path, text.encode("utf-8"))


_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def validate_topic(topic: str) -> None:
    """RocketMQ's ``TopicValidator``: 1..127 chars of ``%|a-zA-Z0-9_-``."""
    if not topic or len(topic) > 127 or not _TOPIC_RE.match(topic):
        raise ValueError(f"illegal topic name {topic!r}: want 1..127 chars of [%|a-zA-Z0-9_-]")


class ConsumerOffsetManager:
    """``consumerOffset.json``: committed offset per (topic, group, queue)."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "consumerOffset.json")
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        data = load_json_lenient(self.path) or {}
        for key, queues in (data.get("offsetTable") or {}).items():
            self._table[key] = {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on that queue."""
        with self._lock:
            return self._table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def remove_group(self, group: str) -> int:
        """Drop every committed offset of ``group`` (deleteSubGroup with removeOffset)."""
        with self._lock:
            gone = [k for k in self._table if k.rpartition("@")[2] == group]
            for k in gone:
                del self._table[k]
            self._dirty = self._dirty or bool(gone)
            return len(gone)

    def table(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def persist(self, force: bool = False) -> None:
        with self._lock:
            if not (self._dirty or force):
                return
            obj = {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())}
                                   for k, v in self._table.items()}}
            self._dirty = False
        try:
            write_json_atomic(self.path, obj)
        except BaseException:
            with self._lock:  # still owed: the next persist writes it (a full disk passes)
                self._dirty = True
            raise


class DelayOffsetStore:
    """``delayOffset.json``: how far the schedule service has delivered each delay level."""

    def __init__(self, config_dir: str) -> None:
        self.path = os.path.join(config_dir, "delayOffset.json")
        self._lock = threading.Lock()
        data = load_json_lenient(self.path) or {}
        self._table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        self._dirty = False

    def get(self, level: int) -> int:
        with self._lock:
            return self._table.get(level, 0)

    def set(self, level: int, offset: int) -> None:
        with self._lock:
            if self._table.get(level) != offset:
                self._table[level] = offset
                self._dirty = True

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            obj = {"offsetTable": {str(k): v for k, v in sorted(self._table.items())}}
            self._dirty = False
        try:
            write_json_atomic(self.path, obj)
        except BaseException:
            with self._lock:  # still owed
                self._dirty = True
            raise
