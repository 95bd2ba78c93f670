"""``consumerOffset.json`` and ``delayOffset.json``: committed consumer offsets and how far
the schedule service has delivered each delay level (RocketMQ's ``ConsumerOffsetManager`` and
``ScheduleMessageService`` offset table).

Shapes::

    consumerOffset.json  {"offsetTable":{"T@group":{"0":12,"1":5}}}
    delayOffset.json     {"offsetTable":{"1":3,"2":0}}
"""
from __future__ import annotations

import os
import threading

from .files import load_json_lenient, write_json_atomic


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
        key = f"{topic}@{group}"
        with self._lock:
            queues = self._table.get(key)
            if queues is None:  # a new group/topic pair: only legal names reach the file
                from .limits import validate_group
                from .topics import validate_topic
                validate_group(group)
                validate_topic(topic)
                queues = self._table[key] = {}
            queues[queue_id] = offset
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

    def merge(self, table: dict[str, dict[int, int]]) -> None:
        """A slave's copy of its master's offsets: the master's entries win, others stay."""
        with self._lock:
            for key, queues in table.items():
                self._table[key] = dict(queues)
            self._dirty = True

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

    def replace_all(self, table: dict[int, int]) -> None:
        """A slave takes its master's delay offsets as they are; persisted."""
        with self._lock:
            self._table = dict(table)
            self._dirty = True
        self.persist()

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
