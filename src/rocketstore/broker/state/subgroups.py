"""``subscriptionGroup.json``: consumer-group settings (RocketMQ's ``SubscriptionGroupManager``).

Shape, as RocketMQ 4.9 writes it::

    {"dataVersion":{"counter":2,"timestamp":1700000000000},
     "subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":true,
        "consumeFromMinEnable":true,"consumeBroadcastEnable":true,"retryQueueNums":1,
        "retryMaxTimes":16,"brokerId":0,"whichBrokerWhenConsumeSlowly":1,
        "notifyConsumerIdsChangedEnable":true}}}

Theory of operation: mqadmin ``updateSubGroup`` (code 200) sends a whole
``SubscriptionGroupConfig`` as the body and replaces the group's entry; ``deleteSubGroup``
(207) removes it; 201 lists the table. A group seen in a heartbeat is created with defaults
(RocketMQ's ``autoCreateSubscriptionGroup``). The file is written the crash-safe way shared with
the other state files (``state.write_json_atomic``).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Any

from .limits import validate_group
from .files import load_json_lenient, write_json_atomic

_JSON_NAMES = {
    "group_name": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
    "consume_message_orderly": "consumeMessageOrderly",
}


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False  # 5.x: FIFO consumption for gRPC (pop) consumers

    def to_json(self) -> dict:
        d = {_JSON_NAMES[f.name]: getattr(self, f.name) for f in fields(self)}
        if not self.consume_message_orderly:  # RocketMQ 4.9's shape unless a 5.x FIFO group
            del d["consumeMessageOrderly"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "SubscriptionGroupConfig":
        """From RocketMQ's JSON; booleans and numbers may arrive as strings."""
        if not isinstance(d, dict):
            raise ValueError("a subscription group config must be a JSON object")
        name = d.get("groupName")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("the subscription group config has no groupName")
        kw: dict[str, Any] = {"group_name": name.strip()}
        for f in fields(cls):
            key = _JSON_NAMES[f.name]
            if f.name == "group_name" or d.get(key) is None:
                continue
            v = d[key]
            if f.type in ("bool", bool):
                if isinstance(v, str):
                    if v.lower() not in ("true", "false"):
                        raise ValueError(f"{key} must be true or false, not {v!r}")
                    v = v.lower() == "true"
                kw[f.name] = bool(v)
            else:
                try:
                    kw[f.name] = int(v)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{key} must be an integer, not {v!r}") from exc
        cfg = cls(**kw)
        if cfg.retry_queue_nums < 0 or cfg.retry_max_times < -1:
            raise ValueError("retryQueueNums and retryMaxTimes must not be negative")
        return cfg


def max_reconsume_times(subgroups: "SubscriptionGroupManager | None", group: str,
                        default: int) -> int:
    """How often a message of ``group`` is retried: the group's ``retryMaxTimes``, else
    ``default`` (the broker's ``maxReconsumeTimes``) when the group has no config. Both doors
    (POP over remoting and the gRPC service) ask this one place."""
    cfg = subgroups.get(group) if subgroups is not None else None
    if cfg is not None and cfg.retry_max_times >= 0:
        return cfg.retry_max_times
    return default


class SubscriptionGroupManager:
    FILE = "subscriptionGroup.json"

    def __init__(self, config_dir: str, auto_create: bool = True) -> None:
        self.path = os.path.join(config_dir, self.FILE)
        self.auto_create = auto_create
        self._lock = threading.Lock()
        self._groups: dict[str, SubscriptionGroupConfig] = {}
        data = load_json_lenient(self.path) or {}
        for name, d in (data.get("subscriptionGroupTable") or {}).items():
            try:
                self._groups[name] = SubscriptionGroupConfig.from_json({"groupName": name, **d})
            except ValueError:
                continue
        self._counter = int((data.get("dataVersion") or {}).get("counter", 0))
        self._timestamp = int((data.get("dataVersion") or {}).get("timestamp", 0)) or \
            int(time.time() * 1000)
        self._dirty = False

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        with self._lock:
            return self._groups.get(group)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def ensure(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults if missing and auto-create is on."""
        with self._lock:
            cfg = self._groups.get(group)
            if cfg is None and self.auto_create and group:
                validate_group(group)  # only legal names reach subscriptionGroup.json
                cfg = self._groups[group] = SubscriptionGroupConfig(group)
                self._bump()
            return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        validate_group(cfg.group_name)
        with self._lock:
            self._groups[cfg.group_name] = cfg
            self._bump()
        self.persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            found = self._groups.pop(group, None) is not None
            if found:
                self._bump()
        if found:
            self.persist()
        return found

    def replace_all(self, wrapper: dict) -> None:
        """A slave takes its master's table and data version (SlaveSynchronize); persisted."""
        groups = {}
        for name, d in (wrapper.get("subscriptionGroupTable") or {}).items():
            try:
                groups[name] = SubscriptionGroupConfig.from_json({"groupName": name, **(d or {})})
            except ValueError:
                continue
        version = wrapper.get("dataVersion") or {}
        with self._lock:
            self._groups = groups
            self._counter = int(version.get("counter", self._counter))
            self._timestamp = int(version.get("timestamp", self._timestamp))
            self._dirty = True
        self.persist()

    def _bump(self) -> None:
        self._counter += 1
        self._timestamp = int(time.time() * 1000)
        self._dirty = True

    def wrapper(self) -> dict:
        """``SubscriptionGroupWrapper``: the table and its data version (code 201's body)."""
        with self._lock:
            return {"dataVersion": {"counter": self._counter, "timestamp": self._timestamp},
                    "subscriptionGroupTable": {n: c.to_json() for n, c in self._groups.items()}}

    def persist(self, force: bool = False) -> None:
        with self._lock:
            if not (self._dirty or force):
                return
            self._dirty = False
        try:
            write_json_atomic(self.path, self.wrapper())
        except BaseException:
            with self._lock:  # still owed: the next persist writes it
                self._dirty = True
            raise


__all__ = ["SubscriptionGroupConfig", "SubscriptionGroupManager"]
