"""Consumer-group registry fed by HEART_BEAT, emptied by UNREGISTER_CLIENT, closes and expiry.

Theory of operation: a group maps each live client (by ``clientID``) to the connection it last
heartbeated on, the time of that heartbeat and its subscriptions. A client disappears when it
unregisters, when its connection closes, or when it has not heartbeated for
``channel_expired_timeout_ms`` (RocketMQ's 120 s). Every method returns whether the set of client
ids of a group changed, so the server can send NOTIFY_CONSUMER_IDS_CHANGED to the others and they
rebalance at once instead of at their next 20 s rebalance tick. Enum fields arrive as names
(ali-ons, Java) or ordinals (C++); both are normalised to names.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


def enum_name(value: Any, names: tuple[str, ...], default: str) -> str:
    """An enum sent as a name or as an ordinal → its name."""
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else default
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        return enum_name(int(s), names, default)
    return s if s in names else default


@dataclass
class Subscription:
    topic: str
    sub_string: str = "*"
    sub_version: int = 0
    expression_type: str = "TAG"  # or "SQL92"
    raw: dict = field(default_factory=dict, compare=False)  # SubscriptionData as the client sent it

    @classmethod
    def from_json(cls, d: dict) -> "Subscription":
        return cls(topic=str(d.get("topic", "")), sub_string=str(d.get("subString") or "*"),
                   sub_version=int(d.get("subVersion") or 0),
                   expression_type=str(d.get("expressionType") or "TAG"), raw=dict(d))


@dataclass
class ClientChannel:
    client_id: str
    connection: Any  # the server's connection object (has .notify(cmd) and .peer)
    last_update_ms: int
    language: str = "JAVA"
    version: int = 0


@dataclass
class ConsumerGroupInfo:
    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[str, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)


class ConsumerManager:
    def __init__(self, expired_timeout_ms: int = 120_000) -> None:
        self.expired_timeout_ms = expired_timeout_ms
        self._groups: dict[str, ConsumerGroupInfo] = {}
        # group -> the subscription fingerprint of its last heartbeat (RocketMQ 5's heartbeat v2)
        self.fingerprints: dict[str, int] = {}

    def register(self, data: dict, client_id: str, connection: Any, *, language: str = "JAVA",
                 version: int = 0, now_ms: int | None = None) -> bool:
        """Apply one ``consumerDataSet`` entry of a heartbeat; True if the client ids changed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        group = str(data.get("groupName") or "")
        if not group:
            raise ValueError("consumer data without groupName")
        info = self._groups.get(group)
        if info is None:
            info = self._groups[group] = ConsumerGroupInfo(group)
        info.consume_type = enum_name(data.get("consumeType"), CONSUME_TYPES, info.consume_type)
        info.message_model = enum_name(data.get("messageModel"), MESSAGE_MODELS, info.message_model)
        info.consume_from_where = enum_name(data.get("consumeFromWhere"), CONSUME_FROM,
                                            info.consume_from_where)
        subs = {}
        for s in data.get("subscriptionDataSet") or []:
            if isinstance(s, dict) and s.get("topic"):
                sub = Subscription.from_json(s)
                subs[sub.topic] = sub
        if subs:
            info.subscriptions = subs
        ch = info.channels.get(client_id)
        changed = ch is None
        if ch is None:
            info.channels[client_id] = ClientChannel(client_id, connection, now, language, version)
        else:
            ch.connection, ch.last_update_ms = connection, now
        return changed

    def unregister(self, group: str, client_id: str) -> bool:
        info = self._groups.get(group)
        if info is None or info.channels.pop(client_id, None) is None:
            return False
        if not info.channels:
            del self._groups[group]
        return True

    def connection_closed(self, connection: Any) -> list[str]:
        """Drop every client registered through ``connection``; the groups that changed."""
        changed = []
        for group, info in list(self._groups.items()):
            for cid, ch in list(info.channels.items()):
                if ch.connection is connection:
                    del info.channels[cid]
                    changed.append(group)
            if not info.channels:
                del self._groups[group]
        return sorted(set(changed))

    def scan_expired(self, now_ms: int | None = None) -> list[str]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        changed = []
        for group, info in list(self._groups.items()):
            for cid, ch in list(info.channels.items()):
                if now - ch.last_update_ms > self.expired_timeout_ms:
                    del info.channels[cid]
                    changed.append(group)
            if not info.channels:
                del self._groups[group]
        return sorted(set(changed))

    def group_names(self) -> list[str]:
        """Every group with at least one live client."""
        return sorted(self._groups)

    def group(self, group: str) -> ConsumerGroupInfo | None:
        return self._groups.get(group)

    def client_ids(self, group: str) -> list[str]:
        info = self._groups.get(group)
        return sorted(info.channels) if info else []

    def connections(self, group: str) -> list[Any]:
        info = self._groups.get(group)
        return [ch.connection for ch in info.channels.values()] if info else []
