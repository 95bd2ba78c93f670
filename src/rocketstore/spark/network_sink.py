"""The ``rocketmq`` sink: ``df.write.format("rocketmq")`` / ``writeStream`` send rows as messages.

    (df.selectExpr("CAST(id AS STRING) AS keys", "CAST(payload AS BINARY) AS body")
       .write.format("rocketmq").option("namesrv", "h1:9876").option("topic", "Orders").save())

Columns (any other column is an error, so a typo never silently drops data):

=================  =========================  ==============================================
``body``           binary or string           required; strings are sent as UTF-8
``topic``          string                     per row; else the ``topic`` option
``keys``           string or array<string>    KEYS (space-separated when a string)
``tags``           string                     TAGS
``properties``     map<string,string>         user properties
``queue_id``       int                        the write queue (else round-robin per batch)
``broker_name``    string                     with ``queue_id``: which broker's queue
``idempotencyKey`` string                     a deterministic UNIQ_KEY (msgId) for the row
=================  =========================  ==============================================

Theory of operation. Each task groups its rows by destination queue into RocketMQ batch
messages (SEND_BATCH_MESSAGE) of at most ``sendBatchSize`` messages and ``sendBatchBytes``
bytes, and keeps up to ``sendPipeline`` batches in flight; rows without ``queue_id`` go
round-robin, one batch at a time, over the topic's write queues on every broker. A task
finishes only when every batch it sent was stored (SEND_OK — for a SYNC_FLUSH broker, on disk).

Delivery guarantee: **at least once**. A failed task or a replayed micro-batch sends its rows
again, and RocketMQ stores them again (brokers do not de-duplicate). With an ``idempotencyKey``
column every row gets UNIQ_KEY = upper hex of MD5(topic, NUL, key): a resend carries the same
msgId, so consumers that drop msgIds they have seen (``msg_id``-keyed upserts, or the
``uniq_key`` column when read back through this source) get every row exactly once. The key
must therefore name one message: topic, broker, queue and offset of a source row, or its
``msg_id`` — never ``queue_offset`` alone, which each queue repeats. A batch in which one key
comes with different bodies is sent as it is, with a warning (``SharedKeys``).
"""
from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..client import AsyncProducer, MessageQueue
from ..format.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, Message

log = logging.getLogger(__name__)
_ALLOWED = {"topic": ("string",), "body": ("binary", "string"),
            "keys": ("string", "array<string>"), "tags": ("string",),
            "properties": ("map<string,string>",), "queue_id": ("int", "bigint", "smallint"),
            "broker_name": ("string",), "idempotencykey": ("string",)}


def uniq_key_for(topic: str, key: str) -> str:
    """The deterministic UNIQ_KEY of an ``idempotencyKey`` (32 upper-case hex, a msgId's shape)."""
    return hashlib.md5(f"{topic}\x00{key}".encode("utf-8")).hexdigest().upper()


class SinkOptions:
    def __init__(self, options: dict, schema) -> None:
        opts = {str(k).lower(): v for k, v in options.items()}
        self.namesrv = str(opts.get("namesrv") or "").strip()
        if not self.namesrv:
            raise ValueError("rocketmq sink: give .option('namesrv', 'host:9876')")
        if opts.get("path"):
            raise ValueError("rocketmq sink writes to a cluster (option namesrv), not to a path")
        self.topic = str(opts.get("topic") or "").strip() or None
        self.group = str(opts.get("producergroup") or "rocketstore_spark_sink")
        self.batch_size = int(opts.get("sendbatchsize", 256))
        self.batch_bytes = int(opts.get("sendbatchbytes", 1 << 20))
        self.pipeline = int(opts.get("sendpipeline", 8))
        self.timeout_s = int(opts.get("sendtimeoutms", 10_000)) / 1000.0
        if min(self.batch_size, self.batch_bytes, self.pipeline) <= 0:
            raise ValueError("sendBatchSize, sendBatchBytes and sendPipeline must be positive")
        if self.batch_bytes > 4 << 20:
            raise ValueError("sendBatchBytes above 4 MiB: RocketMQ refuses such batches")
        names = {}
        for f in schema.fields:
            low = f.name.lower()
            if low not in _ALLOWED:
                raise ValueError(f"rocketmq sink: unknown column {f.name!r}; allowed: "
                                 "topic, body, keys, tags, properties, queue_id, broker_name, "
                                 "idempotencyKey")
            kind = f.dataType.simpleString()
            if kind not in _ALLOWED[low]:
                raise ValueError(f"rocketmq sink: column {f.name} is {f.dataType.simpleString()},"
                                 f" want {' or '.join(_ALLOWED[low])}")
            names[low] = f.name
        if "body" not in names:
            raise ValueError("rocketmq sink: a 'body' column (binary or string) is required")
        if "topic" not in names and self.topic is None:
            raise ValueError("rocketmq sink: give a 'topic' column or .option('topic', ...)")
        self.columns = names  # lower-case name -> the frame's name


@dataclass
class SentCount(WriterCommitMessage):
    messages: int
    batches: int


@dataclass
class SharedKeys:
    """Rows whose ``idempotencyKey`` another row of the same batch has with a different body:
    they get the same msgId, so a consumer that drops msgIds it has seen drops them."""
    rows: int = 0
    example: tuple[str, str] | None = None  # (topic, key) of the first

    def check(self, seen: dict[str, bytes], uniq: str, body: bytes, topic: str, key: str) -> None:
        first = seen.setdefault(uniq, body)
        if first is not body and first != body:
            self.rows += 1
            self.example = self.example or (topic, key)

    def warn(self) -> None:
        if self.rows:
            topic, key = self.example or ("", "")
            log.warning("rocketmq sink: %d row(s) share an idempotencyKey with a row of the "
                        "same batch whose body differs (e.g. %r in topic %s): they get the same "
                        "msgId, and a consumer that drops msgIds it has seen loses them. Use a "
                        "key unique per message: topic, broker, queue and offset, or the "
                        "source's msg_id", self.rows, key, topic)


def _messages(batch, o: SinkOptions,
              shared: SharedKeys | None = None) -> Iterator[tuple[str, int | None, str | None, Message]]:
    cols = {low: batch.column(name).to_pylist() for low, name in o.columns.items()}
    seen: dict[str, bytes] = {}  # one batch's idempotency keys -> the first body
    n = batch.num_rows
    none = [None] * n  # a list: zip may read it once per absent column
    topics = cols.get("topic", none)
    for body, topic, keys, tags, props, qid, broker, ikey in zip(
            cols["body"], topics, cols.get("keys", none), cols.get("tags", none),
            cols.get("properties", none), cols.get("queue_id", none),
            cols.get("broker_name", none), cols.get("idempotencykey", none)):
        topic = topic or o.topic
        if not topic:
            raise ValueError("rocketmq sink: a row has no topic (null column and no option)")
        if body is None:
            raise ValueError(f"rocketmq sink: a row for {topic} has a null body")
        if isinstance(body, str):
            body = body.encode("utf-8")
        p = dict(props) if props else {}  # Arrow maps come back as (key, value) pairs
        if ikey is not None:
            p[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq = uniq_key_for(topic, ikey)
            if shared is not None:
                shared.check(seen, uniq, body, topic, ikey)
        if isinstance(keys, list):
            keys = [k for k in keys if k]
        yield topic, qid, broker, Message(topic=topic, body=body, tags=tags or None,
                                          keys=keys or None, properties=p or None)


async def _send_all(batches: Iterator, o: SinkOptions) -> SentCount:
    producer = AsyncProducer(o.group, o.namesrv, timeout_s=o.timeout_s)
    rr = itertools.count()
    inflight: set[asyncio.Task] = set()
    sent = [0, 0]
    queues: dict[str, list[MessageQueue]] = {}
    open_batches: dict[tuple, tuple[list[Message], int]] = {}

    async def queues_of(topic: str) -> list[MessageQueue]:
        if topic not in queues:
            queues[topic] = sorted(await producer.queues(topic))
        return queues[topic]

    async def pick(topic: str, qid, broker) -> MessageQueue:
        qs = await queues_of(topic)
        if qid is None:
            return qs[next(rr) % len(qs)]
        for q in qs:
            if q.queue_id == qid and broker in (None, q.broker_name):
                return q
        raise ValueError(f"rocketmq sink: topic {topic} has no write queue {qid}"
                         + (f" on broker {broker}" if broker else ""))

    async def ship(topic: str, mq: MessageQueue | None, msgs: list[Message]) -> None:
        while len(inflight) >= o.pipeline:
            done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                inflight.discard(t)
                t.result()
        target = mq or await pick(topic, None, None)

        async def one():
            await producer.send_batch(topic, msgs, mq=target)
            sent[0] += len(msgs)
            sent[1] += 1
        inflight.add(asyncio.ensure_future(one()))

    shared = SharedKeys()
    try:
        for batch in batches:
            for topic, qid, broker, m in _messages(batch, o, shared):
                key = (topic, qid, broker)
                msgs, size = open_batches.get(key, ([], 0))
                if msgs and (len(msgs) >= o.batch_size or size + len(m.body) > o.batch_bytes):
                    mq = await pick(topic, qid, broker) if qid is not None else None
                    await ship(topic, mq, msgs)
                    msgs, size = [], 0
                msgs.append(m)
                open_batches[key] = (msgs, size + len(m.body) + 200)
        for (topic, qid, broker), (msgs, _) in open_batches.items():
            if msgs:
                mq = await pick(topic, qid, broker) if qid is not None else None
                await ship(topic, mq, msgs)
        if inflight:
            await asyncio.gather(*inflight)
        shared.warn()
    except BaseException:
        for t in inflight:
            t.cancel()
        raise
    finally:
        await producer.shutdown()
    return SentCount(sent[0], sent[1])


def _write(iterator, o: SinkOptions) -> SentCount:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_send_all(iterator, o))
    finally:
        loop.close()


class RocketMQWriter(DataSourceArrowWriter):
    def __init__(self, options: dict, schema) -> None:
        self.o = SinkOptions(options, schema)

    def write(self, iterator) -> SentCount:
        return _write(iterator, self.o)

    def commit(self, messages) -> None:
        pass

    def abort(self, messages) -> None:
        pass  # sent messages stay sent: the guarantee is at least once (module doc)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict, schema) -> None:
        self.o = SinkOptions(options, schema)

    def write(self, iterator) -> SentCount:
        return _write(iterator, self.o)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
