"""Consumers: ``PullConsumer`` (you drive offsets) and ``PushConsumer`` (a group-managed loop,
in ``push``).

Theory of operation. ``AsyncPullConsumer.pull`` is one PULL_MESSAGE: it returns the decoded
messages and the broker's next/min/max offsets; offsets are the caller's to keep and commit
(UPDATE_CONSUMER_OFFSET). ``PushConsumer`` is the usual clustering loop on top of it: heartbeat
the group and its subscriptions (plus ``%RETRY%<group>``), split the queues of every subscribed
topic evenly among the group's live clients (sorted ids, RocketMQ's "average" strategy), and for
each queue it owns run one task that starts at the committed offset (or the configured
``consume_from`` when there is none), long-polls, hands messages one at a time, in queue order,
to the listener on a worker thread, and advances its offset. A message the listener rejects
(returns False or raises) is sent back (CONSUMER_SEND_MSG_BACK) to come again through the retry
topic with a delay, and lands in ``%DLQ%<group>`` after ``max_reconsume_times``. Offsets are
committed every ``commit_interval_s``, on each pull, on rebalance and at shutdown. Messages
from a retry topic are shown with their original topic (``RETRY_TOPIC``), as RocketMQ does.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..format.message import PROPERTY_RETRY_TOPIC, BLANK, MessageExt, decode_message
from ..remoting.codes import (PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
                              RequestCode, ResponseCode)
from ._sync import LoopThread
from .instance import ClientInstance, MessageQueue

_PULL_STATUS = {ResponseCode.SUCCESS: "FOUND", ResponseCode.PULL_NOT_FOUND: "NO_NEW_MSG",
                ResponseCode.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG",
                ResponseCode.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL"}
RETRY_PREFIX = "%RETRY%"


@dataclass
class PullResult:
    status: str  # FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    body: bytes = b""  # the undecoded records, for ``pull(..., raw=True)``


def decode_messages(body: bytes) -> list[MessageExt]:
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        if m is BLANK:
            break
        assert isinstance(m, MessageExt)
        out.append(m)
        pos += m.store_size
    return out


@dataclass(frozen=True)
class MessageSelector:
    """A subscription expression and its type (RocketMQ's ``MessageSelector``): tags
    (``"TagA || TagB"``) or a SQL92 selector over message properties."""

    expression: str
    type: str = "TAG"

    @classmethod
    def by_tag(cls, expression: str) -> "MessageSelector":
        return cls(expression, "TAG")

    @classmethod
    def by_sql(cls, expression: str) -> "MessageSelector":
        return cls(expression, "SQL92")


def selector_of(sub: "str | MessageSelector") -> tuple[str, str]:
    """(expression, type) of a subscription value: a plain string is a tag expression."""
    if isinstance(sub, MessageSelector):
        return sub.expression, sub.type
    return sub, "TAG"


class AsyncPullConsumer:
    def __init__(self, group: str, namesrv: str, *, timeout_s: float = 5.0,
                 instance: ClientInstance | None = None, credentials: Any = None) -> None:
        self.group = group
        self.instance = instance or ClientInstance(namesrv, timeout_s=timeout_s,
                                                   credentials=credentials)

    async def start(self) -> "AsyncPullConsumer":
        return self

    async def queues(self, topic: str) -> list[MessageQueue]:
        return (await self.instance.route(topic)).read_queues

    async def _mq(self, topic: str, queue_id: int,
                  broker_name: str | None = None) -> tuple[MessageQueue, str]:
        """The queue and its master's address; ``broker_name`` picks the broker when several
        carry the topic (otherwise the first with that queue id)."""
        for q in await self.queues(topic):
            if q.queue_id == queue_id and broker_name in (None, q.broker_name):
                return q, await self.instance.broker_addr(q, read=True)
        on = f" on broker {broker_name}" if broker_name else ""
        raise ValueError(f"topic {topic} has no read queue {queue_id}{on}")

    async def pull_from(self, mq: MessageQueue, offset: int, max_nums: int = 32,
                        **kwargs) -> PullResult:
        """``pull`` from one ``MessageQueue`` (topic, broker name, queue id)."""
        return await self.pull(mq.topic, mq.queue_id, offset, max_nums,
                               broker_name=mq.broker_name, **kwargs)

    async def pull(self, topic: str, queue_id: int, offset: int, max_nums: int = 32, *,
                   subscription: str = "*", suspend_ms: int = 0,
                   commit_offset: int | None = None, broker_name: str | None = None,
                   raw: bool = False, expression_type: str = "TAG",
                   post_subscription: bool = True) -> PullResult:
        """One PULL_MESSAGE. ``raw=True`` leaves the found records undecoded in
        ``PullResult.body`` (CommitLog record bytes, for batch decoders).
        ``expression_type="SQL92"`` makes ``subscription`` a SQL92 selector over the message
        properties (``a > 5 AND b IN ('x', 'y')``; the broker needs ``enablePropertyFilter``).
        ``post_subscription=False`` lets the broker use the subscription this group registered
        by heartbeat (and, for SQL92, its bitmap prefilter) instead of the one sent here."""
        _, addr = await self._mq(topic, queue_id, broker_name)
        sys_flag = PULL_FLAG_SUBSCRIPTION if post_subscription else 0
        if suspend_ms > 0:
            sys_flag |= PULL_FLAG_SUSPEND
        if commit_offset is not None:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        header = {"consumerGroup": self.group, "topic": topic, "queueId": queue_id,
                  "queueOffset": offset, "maxMsgNums": max_nums, "sysFlag": sys_flag,
                  "commitOffset": commit_offset if commit_offset is not None else 0,
                  "suspendTimeoutMillis": suspend_ms, "subscription": subscription,
                  "subVersion": 0, "expressionType": expression_type}
        resp = await self.instance.invoke(addr, RequestCode.PULL_MESSAGE, header,
                                          timeout=self.instance.timeout_s + suspend_ms / 1000.0,
                                          ok=tuple(_PULL_STATUS))
        found = resp.code == ResponseCode.SUCCESS
        msgs = decode_messages(resp.body) if found and not raw else []
        return PullResult(_PULL_STATUS[resp.code], resp.get_int("nextBeginOffset", offset) or 0,
                          resp.get_int("minOffset", 0) or 0, resp.get_int("maxOffset", 0) or 0,
                          msgs, resp.body if found and raw else b"")

    async def _offset_call(self, code: int, topic: str, queue_id: int,
                           broker_name: str | None = None, **extra) -> int:
        _, addr = await self._mq(topic, queue_id, broker_name)
        resp = await self.instance.invoke(addr, code, {"topic": topic, "queueId": queue_id,
                                                       **extra})
        return resp.get_int("offset", 0) or 0

    async def max_offset(self, topic: str, queue_id: int, broker_name: str | None = None) -> int:
        return await self._offset_call(RequestCode.GET_MAX_OFFSET, topic, queue_id, broker_name)

    async def min_offset(self, topic: str, queue_id: int, broker_name: str | None = None) -> int:
        return await self._offset_call(RequestCode.GET_MIN_OFFSET, topic, queue_id, broker_name)

    async def search_offset(self, topic: str, queue_id: int, timestamp_ms: int,
                            broker_name: str | None = None) -> int:
        return await self._offset_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic, queue_id,
                                       broker_name, timestamp=timestamp_ms)

    async def committed_offset(self, topic: str, queue_id: int,
                               broker_name: str | None = None) -> int | None:
        """The group's committed offset, or None (QUERY_NOT_FOUND)."""
        _, addr = await self._mq(topic, queue_id, broker_name)
        resp = await self.instance.invoke(
            addr, RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": self.group, "topic": topic, "queueId": queue_id},
            ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        return resp.get_int("offset", 0) if resp.code == ResponseCode.SUCCESS else None

    async def commit_offset(self, topic: str, queue_id: int, offset: int,
                            broker_name: str | None = None) -> None:
        _, addr = await self._mq(topic, queue_id, broker_name)
        await self.instance.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                                   {"consumerGroup": self.group, "topic": topic,
                                    "queueId": queue_id, "commitOffset": offset})

    async def send_back(self, msg: MessageExt, delay_level: int = 0,
                        max_reconsume_times: int = 16) -> None:
        """Return a message that failed; it comes back via ``%RETRY%<group>``."""
        topic = msg.properties.get(PROPERTY_RETRY_TOPIC, msg.topic)
        r = await self.instance.route(msg.topic if msg.topic.startswith(RETRY_PREFIX) else topic)
        addr = next(iter(r.brokers.values()))
        await self.instance.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK,
                                   {"offset": msg.commitlog_offset, "group": self.group,
                                    "delayLevel": delay_level, "originMsgId": msg.msg_id,
                                    "originTopic": topic, "unitMode": False,
                                    "maxReconsumeTimes": max_reconsume_times})

    async def shutdown(self) -> None:
        self.instance.close()


class PullConsumer:
    """Blocking facade of ``AsyncPullConsumer``."""

    def __init__(self, group: str, namesrv: str, **kwargs) -> None:
        self._lt = LoopThread.shared()
        self._impl: AsyncPullConsumer = self._lt.run(_make(AsyncPullConsumer, group, namesrv,
                                                           **kwargs))

    def __getattr__(self, name: str):
        attr = getattr(self._impl, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr
        return lambda *a, **kw: self._lt.run(attr(*a, **kw))

    def start(self) -> "PullConsumer":
        return self

    def shutdown(self) -> None:
        self._lt.run(self._impl.shutdown())

    def __enter__(self) -> "PullConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


async def _make(cls, *args, **kwargs):
    return cls(*args, **kwargs)


def original_view(m: MessageExt) -> MessageExt:
    """A retry-topic message shown under its original topic (``RETRY_TOPIC``)."""
    real = m.properties.get(PROPERTY_RETRY_TOPIC)
    if real and m.topic.startswith(RETRY_PREFIX):
        m.topic = real
    return m


__all__ = ["PullResult", "AsyncPullConsumer", "PullConsumer", "decode_messages", "original_view"]
