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

Delivery guarantee: **at least once** by default. A failed task or a replayed micro-batch sends
its rows again, and RocketMQ stores them again (brokers do not de-duplicate). With an
``idempotencyKey`` column every row gets UNIQ_KEY = upper hex of MD5(topic, NUL, key): a resend
carries the same UNIQ_KEY (the ``uniq_key`` column when read back through this source; the
offset ``msg_id`` differs per copy), so consumers that drop UNIQ_KEYs they have seen get every
row once. ``deliveryGuarantee=exactly-once`` sends RocketMQ transactions instead
(``sink_transactions``). The key
must therefore name one message: topic, broker, queue and offset of a source row, or its
``msg_id`` — never ``queue_offset`` alone, which each queue repeats. A batch in which one key
comes with different bodies is sent as it is, with a warning (``SharedKeys``).
"""
from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..client import AsyncProducer, MessageQueue
from ..format.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, SYSTEM_PROPERTY_NAMES, Message
from .read_options import check_options, credentials_of

log = logging.getLogger(__name__)
_ALLOWED = {"topic": ("string",), "body": ("binary", "string"),
            "keys": ("string", "array<string>"), "tags": ("string",),
            "properties": ("map<string,string>",), "queue_id": ("int", "bigint", "smallint"),
            "broker_name": ("string",), "idempotencykey": ("string",),
            "user_properties": ("map<string,string>",)}


def _check_struct_properties(f) -> None:
    """A ``struct`` of properties names them up front: reserved names are refused when the
    query starts (a map's reserved entries are dropped row by row, see ``_user_props``)."""
    from ..format.message import SYSTEM_PROPERTY_NAMES
    for sub in f.dataType.fields:
        if sub.dataType.simpleString() != "string":
            raise ValueError(f"rocketmq sink: property {f.name}.{sub.name} is "
                             f"{sub.dataType.simpleString()}, want string")
        if sub.name in SYSTEM_PROPERTY_NAMES:
            raise ValueError(f"rocketmq sink: property name {sub.name!r} (column {f.name}) is "
                             "reserved by RocketMQ; set keys, tags and idempotencyKey through "
                             "their columns")


def _user_props(props, keep_uniq_key: bool) -> dict:
    """A row's properties less RocketMQ's own (a copy job's ``properties`` carries the source's
    KEYS, TAGS, UNIQ_KEY, ...: the sink sets those from its columns); UNIQ_KEY is kept only
    with ``keepUniqKey=true`` (per row: no imports in here)."""
    if not props:
        return {}
    items = props.items() if isinstance(props, dict) else props
    return {k: v for k, v in items if v is not None and (
        k not in SYSTEM_PROPERTY_NAMES and k != "RS_SPARK_TXN"
        or (keep_uniq_key and k == PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX))}


def uniq_key_for(topic: str, key: str) -> str:
    """The deterministic UNIQ_KEY of an ``idempotencyKey`` (32 upper-case hex, a msgId's shape)."""
    return hashlib.md5(f"{topic}\x00{key}".encode("utf-8")).hexdigest().upper()


SINK_OPTIONS = ("namesrv", "topic", "producerGroup", "sendBatchSize", "sendBatchBytes",
                "sendPipeline", "sendTimeoutMs", "deliveryGuarantee", "accessKey", "secretKey",
                "checkpointLocation", "keepUniqKey")
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"


class SinkOptions:
    def __init__(self, options: dict, schema, *, streaming: bool = False) -> None:
        opts = {str(k).lower(): v for k, v in options.items()}
        if opts.get("path"):
            raise ValueError("rocketmq sink writes to a cluster (option namesrv), not to a path")
        check_options({k: v for k, v in options.items() if str(k).lower() != "path"},
                      SINK_OPTIONS, "rocketmq sink")
        self.namesrv = str(opts.get("namesrv") or "").strip()
        if not self.namesrv:
            raise ValueError("rocketmq sink: give .option('namesrv', 'host:9876')")
        self.topic = str(opts.get("topic") or "").strip() or None
        self.batch_size = int(opts.get("sendbatchsize", 256))
        self.batch_bytes = int(opts.get("sendbatchbytes", 1 << 20))
        self.pipeline = int(opts.get("sendpipeline", 8))
        self.timeout_s = int(opts.get("sendtimeoutms", 10_000)) / 1000.0
        if min(self.batch_size, self.batch_bytes, self.pipeline) <= 0:
            raise ValueError("sendBatchSize, sendBatchBytes and sendPipeline must be positive")
        if self.batch_bytes > 4 << 20:
            raise ValueError("sendBatchBytes above 4 MiB: RocketMQ refuses such batches")
        self.credentials = credentials_of(opts, "rocketmq sink")
        guarantee = str(opts.get("deliveryguarantee") or AT_LEAST_ONCE).strip().lower()
        if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
            raise ValueError(f"option deliveryGuarantee: want {AT_LEAST_ONCE} or {EXACTLY_ONCE},"
                             f" got {guarantee!r}")
        self.exactly_once = guarantee == EXACTLY_ONCE
        self.state_dir: str | None = None
        group = str(opts.get("producergroup") or "").strip() or None
        if self.exactly_once:
            from . import sink_transactions as st
            ck = str(opts.get("checkpointlocation") or "").strip()
            if streaming and not ck:
                raise ValueError("rocketmq sink: deliveryGuarantee=exactly-once keeps its "
                                 "decisions in the query's checkpoint: give "
                                 ".option('checkpointLocation', ...)")
            if ck:
                self.state_dir = os.path.join(os.path.abspath(ck), st.STATE_SUBDIR)
            else:  # a batch write: one directory per producer group
                name = group or "rocketstore_spark_eo"
                self.state_dir = os.path.join(os.path.expanduser("~"), ".cache", "rocketstore",
                                              "spark-sink", name)
            group = group or st.default_group(self.state_dir)
            self.sink_id = st.sink_id(self.state_dir)
        elif opts.get("checkpointlocation") and not streaming:
            raise ValueError("rocketmq sink: checkpointLocation is read by a batch write only "
                             "with deliveryGuarantee=exactly-once")
        self.group = group or "rocketstore_spark_sink"
        names = {}
        for f in schema.fields:
            low = f.name.lower()
            if low not in _ALLOWED:
                raise ValueError(f"rocketmq sink: unknown column {f.name!r}; allowed: "
                                 "topic, body, keys, tags, properties (or user_properties), "
                                 "queue_id, broker_name, idempotencyKey")
            kind = f.dataType.simpleString()
            if low in ("properties", "user_properties") and kind.startswith("struct<"):
                _check_struct_properties(f)
                kind = "map<string,string>"
            if kind not in _ALLOWED[low]:
                raise ValueError(f"rocketmq sink: column {f.name} is {f.dataType.simpleString()},"
                                 f" want {' or '.join(_ALLOWED[low])}")
            names[low] = f.name
        if "body" not in names:
            raise ValueError("rocketmq sink: a 'body' column (binary or string) is required")
        if "topic" not in names and self.topic is None:
            raise ValueError("rocketmq sink: give a 'topic' column or .option('topic', ...)")
        if "properties" in names and "user_properties" in names:
            raise ValueError("rocketmq sink: give properties or user_properties, not both")
        self.columns = names  # lower-case name -> the frame's name
        self.keep_uniq_key = str(opts.get("keepuniqkey") or "false").strip().lower() == "true"
        # rows may carry UNIQ_KEYs of the caller's, shared between rows and writes
        self.caller_keys = self.keep_uniq_key or "idempotencykey" in names

    def __repr__(self) -> str:  # plans and logs never show the secret
        return (f"SinkOptions(namesrv={self.namesrv!r}, topic={self.topic!r}, "
                f"exactly_once={self.exactly_once}, "
                f"accessKey={getattr(self.credentials, 'access_key', None)!r})")


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
    if "user_properties" in cols:
        cols["properties"] = cols.pop("user_properties")
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
        p = _user_props(props, o.keep_uniq_key)  # Arrow maps come back as (key, value) pairs
        if ikey is not None:
            p[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq = uniq_key_for(topic, ikey)
            if shared is not None:
                shared.check(seen, uniq, body, topic, ikey)
        if isinstance(keys, list):
            keys = [k for k in keys if k]
        yield topic, qid, broker, Message(topic=topic, body=body, tags=tags or None,
                                          keys=keys or None, properties=p or None)


async def _pick_queue(producer: AsyncProducer, queues: dict[str, list[MessageQueue]], rr,
                      topic: str, qid, broker) -> MessageQueue:
    """The write queue of a row: ``queue_id`` (on ``broker_name`` when given), else the next
    of the topic's write queues round-robin (``rr``: a counter); ``queues`` caches routes."""
    if topic not in queues:
        queues[topic] = sorted(await producer.queues(topic))
    qs = queues[topic]
    if qid is None:
        return qs[next(rr) % len(qs)]
    for q in qs:
        if q.queue_id == qid and broker in (None, q.broker_name):
            return q
    raise ValueError(f"rocketmq sink: topic {topic} has no write queue {qid}"
                     + (f" on broker {broker}" if broker else ""))


async def _send_all(batches: Iterator, o: SinkOptions) -> SentCount:
    producer = AsyncProducer(o.group, o.namesrv, timeout_s=o.timeout_s,
                             credentials=o.credentials)
    rr = itertools.count()
    inflight: set[asyncio.Task] = set()
    sent = [0, 0]
    queues: dict[str, list[MessageQueue]] = {}
    open_batches: dict[tuple, tuple[list[Message], int]] = {}

    async def pick(topic: str, qid, broker) -> MessageQueue:
        return await _pick_queue(producer, queues, rr, topic, qid, broker)

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


@dataclass
class HalvesSent(WriterCommitMessage):
    """An exactly-once task's half messages (``sink_transactions``)."""

    messages: int  # rows
    sent: object  # sink_transactions.TaskHalves


async def _send_halves(batches: Iterator, o: SinkOptions, batch: str) -> HalvesSent:
    """Send every row in a half message. To a broker that takes packed half messages
    (rocketstore's ``transactionPackEnable``, read from its GET_BROKER_CONFIG) rows go as the
    at-least-once sink sends them — per queue, ``sendBatchSize`` rows a request, ``sendPipeline``
    requests in flight — each batch ONE half message (its body the batch) that a COMMIT stores
    as those rows. To one that takes only batches of half messages (``transactionBatchEnable``)
    the same batches, each row its own half message — also to a packing broker when rows
    carry the caller's UNIQ_KEYs (``idempotencyKey``, ``keepUniqKey``): the broker then decides
    each key on its own, so a key it committed before is not delivered again, which a packed
    half (one transaction id a batch) could not promise. To any other broker (RocketMQ's: it
    stores no transactional batch) one request per row, up to ``sendPipeline`` x 16 in flight.
    A failed send fails the task, whose halves the decision then rolls back."""
    from ..client.transaction import (send_half_run, send_packed_half,
                                      transaction_batch_supported, transaction_pack_supported)
    from ..format.message import TRANSACTION_PREPARED_TYPE, parse_message_id
    from . import sink_transactions as st

    task = st.new_task_uuid()
    tag = st.make_tag(o.sink_id, batch, task)
    out = st.TaskHalves(task, batch)
    producer = AsyncProducer(o.group, o.namesrv, timeout_s=o.timeout_s, retries=0,
                             credentials=o.credentials)
    rr = itertools.count()
    queues: dict[str, list[MessageQueue]] = {}
    inflight: set[asyncio.Task] = set()
    batched: dict[str, str] = {}  # broker name -> "pack", "batch" or "one" (module doc)
    open_batches: dict[tuple, tuple[list[Message], int]] = {}

    async def room(limit: int) -> None:
        while len(inflight) >= limit:
            done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                inflight.discard(t)
                t.result()

    async def how(mq: MessageQueue) -> str:
        if mq.broker_name not in batched:
            addr = await producer.send_addr(mq)  # the topic may not exist yet
            batched[mq.broker_name] = (
                "pack" if not o.caller_keys and await transaction_pack_supported(
                    producer.instance, addr) else
                "batch" if await transaction_batch_supported(producer.instance, addr) else "one")
        return batched[mq.broker_name]

    def prepared(m: Message) -> Message:
        return Message(topic=m.topic, body=m.body, tags=m.tags, keys=m.keys, flag=m.flag,
                       properties=st.prepared_properties(m.properties or {}, o.group, tag))

    async def one(topic: str, mq: MessageQueue, m: Message) -> None:
        r = await producer.send(topic, m.body, tags=m.tags, keys=m.keys,
                                properties=prepared(m).properties, mq=mq,
                                sys_flag=TRANSACTION_PREPARED_TYPE)
        _, cl_off = parse_message_id(r.offset_msg_id)
        out.add_one(topic, mq.broker_name, r.queue_offset, cl_off, r.msg_id)

    async def many(topic: str, mq: MessageQueue, msgs: list[Message]) -> None:
        q0, offsets, ids = await send_half_run(producer, topic, msgs, mq, {st.TXN_PROPERTY: tag})
        out.add_run(topic, mq.broker_name, q0, offsets, ids)

    async def packed(topic: str, mq: MessageQueue, msgs: list[Message]) -> None:
        ref = await send_packed_half(producer, topic, msgs, mq, {st.TXN_PROPERTY: tag})
        out.add_one(topic, mq.broker_name, ref.queue_offset, ref.commitlog_offset, ref.msg_id,
                    rows=len(msgs))

    async def ship(topic: str, qid, broker, msgs: list[Message]) -> None:
        mq = await _pick_queue(producer, queues, rr, topic, qid, broker)
        way = await how(mq)
        if way != "one":
            await room(o.pipeline)
            inflight.add(asyncio.ensure_future((packed if way == "pack" else many)(topic, mq,
                                                                                    msgs)))
            return
        for m in msgs:
            await room(o.pipeline * 16)
            inflight.add(asyncio.ensure_future(one(topic, mq, m)))

    try:
        for b in batches:
            for topic, qid, broker, m in _messages(b, o):
                key = (topic, qid, broker)
                msgs, size = open_batches.get(key, ([], 0))
                if msgs and (len(msgs) >= o.batch_size or size + len(m.body) > o.batch_bytes):
                    await ship(topic, qid, broker, msgs)
                    msgs, size = [], 0
                msgs.append(m)
                open_batches[key] = (msgs, size + len(m.body) + 200)
        for (topic, qid, broker), (msgs, _) in open_batches.items():
            if msgs:
                await ship(topic, qid, broker, msgs)
        if inflight:
            await asyncio.gather(*inflight)
    except BaseException:
        for t in inflight:
            t.cancel()
        if out.runs:  # not needed for correctness (the check rolls them back): just sooner
            try:
                await st.end_halves(producer.instance, o.group, out.runs, False)
            except Exception:
                pass
        raise
    finally:
        await producer.shutdown()
    return HalvesSent(out.rows, out)


def _run(coro):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def _streaming_batch_id() -> str:
    from pyspark import TaskContext
    tc = TaskContext.get()
    bid = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    if bid is None:
        raise RuntimeError("rocketmq sink: no streaming batch id in the task's context")
    return str(int(bid))


def _settle(o: SinkOptions, batch: str, messages, decide: bool, hand_over: bool = False) -> None:
    from . import sink_transactions as st
    sent = [m.sent for m in messages if isinstance(m, HalvesSent)]
    tasks = [t.task for t in sent] if decide else None
    st.settle(o.state_dir, batch, sent, namesrv=o.namesrv, group=o.group,
              credentials=o.credentials, timeout_s=o.timeout_s, decide_tasks=tasks,
              hand_over=hand_over)


def _start_responder(o: SinkOptions) -> None:
    """A restarted sink's responder (a fresh sink's starts at its first commit)."""
    from . import sink_transactions as st
    if st.has_decisions(o.state_dir):
        st.ensure_responder(o.state_dir, o.group, o.namesrv, o.credentials)


def _write(iterator, o: SinkOptions) -> SentCount:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_send_all(iterator, o))
    finally:
        loop.close()


class RocketMQWriter(DataSourceArrowWriter):
    def __init__(self, options: dict, schema) -> None:
        self.o = SinkOptions(options, schema)
        if self.o.exactly_once:
            import uuid
            self.batch = f"w-{uuid.uuid4().hex}"  # pickled to the tasks and to the commit
            _start_responder(self.o)

    def write(self, iterator):
        if self.o.exactly_once:
            return _run(_send_halves(iterator, self.o, self.batch))
        return _write(iterator, self.o)

    def commit(self, messages) -> None:
        if self.o.exactly_once:
            _settle(self.o, self.batch, messages, decide=True)

    def abort(self, messages) -> None:
        if self.o.exactly_once:  # an empty decision: every half of this write rolls back
            from . import sink_transactions as st
            st.decide(self.o.state_dir, self.batch, [])
            _settle(self.o, self.batch, messages, decide=False)
        # at least once: sent messages stay sent (module doc)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict, schema) -> None:
        self.o = SinkOptions(options, schema, streaming=True)
        if self.o.exactly_once:
            _start_responder(self.o)

    def write(self, iterator):
        if self.o.exactly_once:
            return _run(_send_halves(iterator, self.o, _streaming_batch_id()))
        return _write(iterator, self.o)

    def commit(self, messages, batchId: int) -> None:
        if self.o.exactly_once:
            # the responder ends this batch's halves while the next batch runs
            _settle(self.o, str(batchId), messages, decide=True, hand_over=True)

    def abort(self, messages, batchId: int) -> None:
        if self.o.exactly_once:  # the batch runs again after a restart: decide nothing here
            _settle(self.o, str(batchId), messages, decide=False)
