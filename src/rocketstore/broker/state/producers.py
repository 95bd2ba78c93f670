"""Producer-group registry fed by HEART_BEAT's ``producerDataSet`` (RocketMQ's ``ProducerManager``).

Theory of operation: a producer group maps each live connection to the client that heartbeated
on it (client id, language, version, time of the last heartbeat). As in RocketMQ a producer is
keyed by its connection, not by its client id: one client process that talks to the broker over
two connections is two entries. A producer disappears when it unregisters (UNREGISTER_CLIENT with
``producerGroup``), when its connection closes, or when it has not heartbeated for
``expired_timeout_ms`` (RocketMQ's 120 s). Users: GET_PRODUCER_CONNECTION_LIST (204), the
transaction check service (CHECK_TRANSACTION_STATE goes to any live connection of the group) and
request-reply pushes. All methods are safe to call from the event loop and from worker threads.
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class ProducerChannel:
    """One producer connection of a group (RocketMQ's ``ClientChannelInfo``)."""

    group: str
    client_id: str
    connection: Any  # the server's connection object (has .notify(cmd), .peer, .closed)
    language: str = "JAVA"
    version: int = 0
    last_update_ms: int = 0

    @property
    def client_addr(self) -> str:
        return str(getattr(self.connection, "peer", "") or "")


class ProducerManager:
    def __init__(self, expired_timeout_ms: int = 120_000) -> None:
        self.expired_timeout_ms = expired_timeout_ms
        self._lock = threading.Lock()
        self._groups: dict[str, dict[int, ProducerChannel]] = {}  # group -> id(conn) -> channel
        self._round_robin = itertools.count()

    def register(self, group: str, connection: Any, client_id: str, *, language: str = "JAVA",
                 version: int = 0, now_ms: int | None = None) -> bool:
        """Record a heartbeat of ``client_id`` in ``group`` over ``connection``; True if new."""
        if not group:
            raise ValueError("producer data without groupName")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            table = self._groups.setdefault(group, {})
            ch = table.get(id(connection))
            if ch is not None and ch.connection is connection:
                ch.last_update_ms = now
                ch.client_id = client_id
                return False
            table[id(connection)] = ProducerChannel(group, client_id, connection, language,
                                                    version, now)
            return True

    def unregister(self, group: str, client_id: str, connection: Any = None) -> bool:
        """Drop ``client_id`` (on ``connection`` if given) from ``group``; True if it was there."""
        with self._lock:
            table = self._groups.get(group)
            if not table:
                return False
            gone = [k for k, ch in table.items() if ch.client_id == client_id
                    and (connection is None or ch.connection is connection)]
            for k in gone:
                del table[k]
            if not table:
                del self._groups[group]
            return bool(gone)

    def connection_closed(self, connection: Any) -> list[str]:
        """Forget every producer registered through ``connection``; the groups it was in."""
        changed = []
        with self._lock:
            for group, table in list(self._groups.items()):
                ch = table.get(id(connection))
                if ch is not None and ch.connection is connection:
                    del table[id(connection)]
                    changed.append(group)
                if not table:
                    del self._groups[group]
        return sorted(changed)

    def scan_expired(self, now_ms: int | None = None) -> list[str]:
        """Drop producers silent for longer than ``expired_timeout_ms``; the groups changed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        changed = set()
        with self._lock:
            for group, table in list(self._groups.items()):
                for k, ch in list(table.items()):
                    if now - ch.last_update_ms > self.expired_timeout_ms:
                        del table[k]
                        changed.add(group)
                if not table:
                    del self._groups[group]
        return sorted(changed)

    # -- views ----------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def channels(self, group: str) -> list[ProducerChannel]:
        """The live producer channels of ``group`` (copies of the registry's entries)."""
        with self._lock:
            return [ProducerChannel(**vars(ch)) for ch in self._groups.get(group, {}).values()]

    def connections(self, group: str) -> list[Any]:
        """The live connections of ``group``, in registration order."""
        with self._lock:
            return [ch.connection for ch in self._groups.get(group, {}).values()]

    def available_connection(self, group: str) -> Any | None:
        """One open connection of ``group``, round-robin (RocketMQ's ``getAvailableChannel``)."""
        conns = [c for c in self.connections(group) if not getattr(c, "closed", False)]
        if not conns:
            return None
        return conns[next(self._round_robin) % len(conns)]

    def find_connection(self, client_id: str) -> Any | None:
        """The connection a producer with ``client_id`` last heartbeated on, in any group."""
        with self._lock:
            for table in self._groups.values():
                for ch in table.values():
                    if ch.client_id == client_id:
                        return ch.connection
        return None


__all__ = ["ProducerChannel", "ProducerManager"]
