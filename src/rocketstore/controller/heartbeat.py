"""Which brokers are alive: RocketMQ's DefaultBrokerHeartbeatManager, without threads.

A broker is alive while its last BROKER_HEARTBEAT (904) is younger than the timeout it sent
(``heartbeatTimeoutMills``, 10 s by default on RocketMQ's brokers); its connection closing or its
heartbeat expiring (found by ``expired``, run every ``scanNotActiveBrokerInterval``) makes it
inactive at once. A heartbeat also carries what the elect policy ranks by: the broker's epoch,
max offset and election priority; epoch and offset only move forward, as RocketMQ's do.
Time is passed in (milliseconds), so tests need no clock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

DEFAULT_TIMEOUT_MS = 10_000
#: a missing electionPriority ranks last (Integer.MAX_VALUE)
LOWEST_PRIORITY = 2**31 - 1


@dataclass
class BrokerLive:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    last_ms: int
    timeout_ms: int
    conn: Any
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    priority: int = LOWEST_PRIORITY


Key = tuple[str, str, int]  # (cluster, brokerName, brokerId)


class Heartbeats:
    def __init__(self) -> None:
        self.table: dict[Key, BrokerLive] = {}

    def beat(self, now_ms: int, cluster: str, broker_name: str, broker_id: int, addr: str,
             conn: Any = None, timeout_ms: int | None = None, epoch: int | None = None,
             max_offset: int | None = None, confirm_offset: int | None = None,
             priority: int | None = None) -> bool:
        """Record a heartbeat; True when this broker was not known alive before."""
        key = (cluster, broker_name, broker_id)
        t = DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms
        e = -1 if epoch is None else epoch
        mo = -1 if max_offset is None else max_offset
        co = -1 if confirm_offset is None else confirm_offset
        pr = LOWEST_PRIORITY if priority is None else priority
        prev = self.table.get(key)
        if prev is None:
            self.table[key] = BrokerLive(cluster, broker_name, broker_id, addr, now_ms, t, conn,
                                         e, mo, co, pr)
            return True
        prev.last_ms = now_ms
        prev.timeout_ms = t
        prev.priority = pr
        prev.addr = addr or prev.addr
        if conn is not None:
            prev.conn = conn
        if e > prev.epoch or (e == prev.epoch and mo > prev.max_offset):
            prev.epoch, prev.max_offset, prev.confirm_offset = e, mo, co
        return False

    def alive(self, now_ms: int, cluster: str, broker_name: str, broker_id: int | None) -> bool:
        if broker_id is None:
            return False
        info = self.table.get((cluster, broker_name, broker_id))
        return info is not None and info.last_ms + info.timeout_ms >= now_ms

    def get(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLive | None:
        return self.table.get((cluster, broker_name, broker_id))

    def expired(self, now_ms: int) -> list[BrokerLive]:
        """Remove and return the brokers whose heartbeat timed out."""
        gone = [k for k, v in self.table.items() if now_ms - v.last_ms > v.timeout_ms]
        return [self.table.pop(k) for k in gone]

    def closed(self, conn: Any) -> list[BrokerLive]:
        """Remove and return the brokers that heartbeated on ``conn`` (it closed)."""
        gone = [k for k, v in self.table.items() if v.conn is conn]
        return [self.table.pop(k) for k in gone]

    def __iter__(self) -> Iterator[BrokerLive]:
        return iter(list(self.table.values()))
