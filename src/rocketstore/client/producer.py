"""``AsyncProducer`` / ``Producer``: send messages to a RocketMQ 4.x broker.

Theory of operation: a send looks the topic's route up (cached), picks a write queue — the one
asked for, ``hash(sharding_key) % n`` for ordered messages (RocketMQ's ``SelectMessageQueueByHash``
rule, so the same key always lands on the same queue and stays in order), or round robin — and
sends SEND_MESSAGE_V2 with the message's properties (TAGS, KEYS, a client-made UNIQ_KEY which
becomes the message id, DELAY). ``send_batch`` sends SEND_BATCH_MESSAGE: many messages in one
request and one store append. A connection error on a round-robin send is retried on the next
queue; a broker error code raises ``BrokerError``.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..errors import BrokerError
from ..format.hashing import java_hash
from ..format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_TAGS,
                              PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_WAIT_STORE_MSG_OK,
                              Message, create_uniq_key, properties_to_string)
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.header import SEND_V1_TO_V2
from ..remoting.message_batch import BatchEntry, encode_batch
from ._sync import LoopThread
from .instance import ClientInstance, MessageQueue

if TYPE_CHECKING:
    from ..format.message import MessageExt
    from .request_reply import ReplyMessage

DEFAULT_TOPIC = "TBW102"  # the topic whose route a send to a topic not created yet follows
_SEND_OK_CODES = {ResponseCode.SUCCESS: "SEND_OK", ResponseCode.FLUSH_DISK_TIMEOUT:
                  "FLUSH_DISK_TIMEOUT", ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
                  ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE"}


@dataclass
class SendResult:
    status: str  # SEND_OK, FLUSH_DISK_TIMEOUT, ...
    msg_id: str  # the UNIQ_KEY (what clients call the message id); comma-joined for a batch
    offset_msg_id: str  # store host + CommitLog offset; comma-joined for a batch
    message_queue: MessageQueue
    queue_offset: int

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",")


def build_properties(tags: str | None, keys: Sequence[str] | str | None,
                     properties: Mapping[str, str] | None, delay_level: int = 0,
                     uniq_key: str | None = None) -> dict[str, str]:
    props = dict(properties or {})
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    if delay_level:
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
    # as RocketMQ's MessageClientIDSetter: a UNIQ_KEY the caller set is kept
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = (
        uniq_key or props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or create_uniq_key())
    return props


def batch_body(topic: str, messages: Sequence[Message | bytes],
               entry_properties: Mapping[str, str] | None = None) -> tuple[bytes, list[str]]:
    """A batch's body (``MessageBatch``'s encoding) and the UNIQ_KEY of each message:
    ``entry_properties`` are added to every message's own (a delay level among them is
    dropped: a batch has none)."""
    if not messages:
        raise ValueError("empty batch")
    entries, ids = [], []
    for m in messages:
        if isinstance(m, (bytes, bytearray, memoryview)):
            m = Message(topic=topic, body=bytes(m))
        props = build_properties(m.tags, m.keys, m.properties)
        props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)
        if entry_properties:
            props.update(entry_properties)
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        ids.append(props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
        entries.append(BatchEntry(bytes(m.body), props, m.flag))
    return encode_batch(entries), ids


def select_by_key(queues: Sequence[MessageQueue], key: object) -> MessageQueue:
    """RocketMQ's ``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)``."""
    h = java_hash(key) if isinstance(key, str) else hash(key)
    return queues[abs(int(h)) % len(queues)]  # == abs(h % n) with Java's truncating %


class AsyncProducer:
    def __init__(self, group: str, namesrv: str, *, timeout_s: float = 5.0, retries: int = 2,
                 instance: ClientInstance | None = None, credentials: Any = None) -> None:
        self.group = group
        self.instance = instance or ClientInstance(namesrv, timeout_s=timeout_s,
                                                   credentials=credentials)
        self.retries = retries
        self.default_topic_queue_nums = 4
        self._rr = itertools.count()

    async def start(self) -> "AsyncProducer":
        return self

    async def queues(self, topic: str) -> list[MessageQueue]:
        try:
            r = await self.instance.route(topic)
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            # a name server that does not create topics (RocketMQ's, ``rocketstore namesrv``):
            # send through the brokers that carry TBW102, which create the topic on first
            # send (``autoCreateTopicEnable``), as RocketMQ's producer does
            d = await self.instance.route(DEFAULT_TOPIC)
            n = self.default_topic_queue_nums
            qs = [MessageQueue(topic, q.broker_name, q.queue_id) for q in d.write_queues
                  if q.queue_id < n]
            if not qs:
                raise
            return qs
        if not r.write_queues:
            raise ValueError(f"topic {topic} has no writable queue")
        return r.write_queues

    async def _pick(self, topic: str, queue_id: int | None, sharding_key: object) -> MessageQueue:
        qs = await self.queues(topic)
        if queue_id is not None:
            for q in qs:
                if q.queue_id == queue_id:
                    return q
            raise ValueError(f"topic {topic} has no write queue {queue_id}")
        if sharding_key is not None:
            return select_by_key(qs, sharding_key)
        return qs[next(self._rr) % len(qs)]

    async def send(self, topic: str, body: bytes, *, tags: str | None = None,
                   keys: Sequence[str] | str | None = None,
                   properties: Mapping[str, str] | None = None, queue_id: int | None = None,
                   sharding_key: object = None, delay_level: int = 0, flag: int = 0,
                   sys_flag: int = 0, mq: MessageQueue | None = None) -> SendResult:
        """``mq`` names the queue exactly (broker and queue id); a pinned send is tried once."""
        props = build_properties(tags, keys, properties, delay_level)
        pinned = queue_id is not None or sharding_key is not None or mq is not None
        attempts = 1 if pinned else 1 + self.retries
        last: Exception | None = None
        given = mq
        for _ in range(attempts):
            mq = given or await self._pick(topic, queue_id, sharding_key)
            header = {"producerGroup": self.group, "topic": topic, "defaultTopic": "TBW102",
                      "defaultTopicQueueNums": 4, "queueId": mq.queue_id, "sysFlag": sys_flag,
                      "bornTimestamp": int(time.time() * 1000), "flag": flag,
                      "properties": properties_to_string(props), "reconsumeTimes": 0,
                      "unitMode": False, "batch": False}
            try:
                return await self._send(mq, RequestCode.SEND_MESSAGE_V2,
                                        {SEND_V1_TO_V2[k]: v for k, v in header.items()}, body,
                                        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            except (ConnectionError, TimeoutError) as exc:
                last = exc
        raise ConnectionError(f"send to {topic} failed after {attempts} attempts: {last}")

    async def send_batch(self, topic: str, messages: Sequence[Message | bytes], *,
                         queue_id: int | None = None, sharding_key: object = None,
                         mq: MessageQueue | None = None, sys_flag: int = 0,
                         batch_properties: Mapping[str, str] | None = None,
                         entry_properties: Mapping[str, str] | None = None) -> SendResult:
        """Send many messages to one queue in one request (no delay levels in a batch);
        ``mq`` names the queue exactly (broker and queue id) when several brokers serve it.
        ``sys_flag`` and ``batch_properties`` go into the request header (a batch of half
        messages: PREPARED and ``TRAN_MSG``, which only a broker with
        ``transactionBatchEnable`` takes); ``entry_properties`` are added to every message's
        own (a delay level among them is dropped: a batch has none)."""
        body, ids = batch_body(topic, messages, entry_properties)
        mq = mq or await self._pick(topic, queue_id, sharding_key)
        header = {"producerGroup": self.group, "topic": topic, "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": 4, "queueId": mq.queue_id, "sysFlag": sys_flag,
                  "bornTimestamp": int(time.time() * 1000), "flag": 0,
                  "properties": properties_to_string({PROPERTY_WAIT_STORE_MSG_OK: "true",
                                                      **(batch_properties or {})}),
                  "reconsumeTimes": 0, "unitMode": False, "batch": True}
        return await self._send(mq, RequestCode.SEND_BATCH_MESSAGE,
                                {SEND_V1_TO_V2[k]: v for k, v in header.items()},
                                body, ",".join(ids))

    async def send_addr(self, mq: MessageQueue) -> str:
        """The broker a send to ``mq`` goes to; a topic not created yet: its broker from TBW102's
        route (the broker creates the topic on the first send)."""
        try:
            return await self.instance.broker_addr(mq)
        except BrokerError as exc:
            addr = (await self.instance.route(DEFAULT_TOPIC)).brokers.get(mq.broker_name)
            if addr is None:
                raise exc
            return addr

    async def _send(self, mq: MessageQueue, code: int, header: dict, body: bytes,
                    msg_id: str) -> SendResult:
        addr = await self.send_addr(mq)
        resp = await self.instance.invoke(addr, code, header, body, ok=tuple(_SEND_OK_CODES))
        return SendResult(_SEND_OK_CODES[resp.code], msg_id, resp.get_str("msgId") or "", mq,
                          resp.get_int("queueOffset", -1) or 0)

    # -- request-reply (see client.request_reply) ------------------------------------------------
    async def request(self, topic: str, body: bytes, *, timeout_s: float = 3.0,
                      tags: str | None = None, keys: Sequence[str] | str | None = None,
                      properties: Mapping[str, str] | None = None,
                      queue_id: int | None = None) -> "ReplyMessage":
        """Send a request and wait for its reply (``DefaultMQProducer.request``); raises
        ``TimeoutError`` when none arrives within ``timeout_s``."""
        from .request_reply import ReplyWaiter, request_properties

        if getattr(self, "_replies", None) is None:
            self._replies = ReplyWaiter(self.instance)
        # the broker finds our connection by client id among its producers: heartbeat first
        # (a topic not created yet is sent through TBW102's brokers: those hear from us too)
        await self.instance.heartbeat([topic, DEFAULT_TOPIC], [self.group], [])
        props = dict(properties or {})
        props.update(request_properties(self.instance.client_id, int(timeout_s * 1000)))
        corr = props["CORRELATION_ID"]
        fut = self._replies.expect(corr)
        try:
            await self.send(topic, body, tags=tags, keys=keys, properties=props, queue_id=queue_id)
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"request to {topic} got no reply within {timeout_s}s "
                               f"(correlation id {corr})") from None
        finally:
            self._replies.forget(corr)

    async def reply(self, request: "MessageExt", body: bytes) -> SendResult:
        """Answer a request message received by a consumer (``MessageUtil.createReplyMessage``
        + send): the reply goes to ``<CLUSTER>_REPLY_TOPIC`` with SEND_REPLY_MESSAGE_V2."""
        from .request_reply import reply_properties

        topic, rprops = reply_properties(request.properties)
        props = build_properties(None, None, rprops)
        mq = await self._pick(topic, None, None)
        header = {"producerGroup": self.group, "topic": topic, "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": 4, "queueId": mq.queue_id, "sysFlag": 0,
                  "bornTimestamp": int(time.time() * 1000), "flag": 0,
                  "properties": properties_to_string(props), "reconsumeTimes": 0,
                  "unitMode": False, "batch": False}
        return await self._send(mq, RequestCode.SEND_REPLY_MESSAGE_V2,
                                {SEND_V1_TO_V2[k]: v for k, v in header.items()}, body,
                                props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])

    async def shutdown(self) -> None:
        self.instance.close()


class Producer:
    """Blocking facade of ``AsyncProducer`` (runs it on a shared background event loop)."""

    def __init__(self, group: str, namesrv: str, **kwargs) -> None:
        self._lt = LoopThread.shared()
        self._impl = self._lt.run(_make(AsyncProducer, group, namesrv, **kwargs))

    def start(self) -> "Producer":
        self._lt.run(self._impl.start())
        return self

    def queues(self, topic: str) -> list[MessageQueue]:
        return self._lt.run(self._impl.queues(topic))

    def send(self, topic: str, body: bytes, **kwargs) -> SendResult:
        return self._lt.run(self._impl.send(topic, body, **kwargs))

    def send_batch(self, topic: str, messages: Sequence[Message | bytes], **kwargs) -> SendResult:
        return self._lt.run(self._impl.send_batch(topic, messages, **kwargs))

    def request(self, topic: str, body: bytes, **kwargs):
        """Send a request and wait for the reply (a ``ReplyMessage``); see ``AsyncProducer``."""
        return self._lt.run(self._impl.request(topic, body, **kwargs))

    def reply(self, request, body: bytes) -> SendResult:
        """Answer a request message a consumer received."""
        return self._lt.run(self._impl.reply(request, body))

    def shutdown(self) -> None:
        self._lt.run(self._impl.shutdown())

    def __enter__(self) -> "Producer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


async def _make(cls, *args, **kwargs):
    return cls(*args, **kwargs)
