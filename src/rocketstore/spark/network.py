"""Reading a RocketMQ cluster over the network: options, queue planning, pipelined pulls.

Theory of operation. A *queue range* ``(topic, broker, queue id, start, end)`` is plain data,
planned on the driver and read on an executor. Planning asks the name server for the topics
(a list, or ``topicPattern`` matched in full against the cluster's topic list) and their routes
(read queues of every master broker), then each owning broker for the queue's offsets
(GET_MIN_OFFSET / GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP), all requests concurrent.

Reading is RocketMQ's pull protocol (PULL_MESSAGE, no long polling, consumer offsets untouched)
with several pulls in flight per queue: queue offsets are dense (one ConsumeQueue unit per
message), so the range is cut into slices of ``pullBatchSize`` offsets and ``pullPipeline``
slices are requested at once. Each slice owns exactly ``[off, off + n)``: rows outside it (a
tag-filtered pull may scan past its slice) are dropped, and a slice answered short (a broker's
per-pull count or byte cap: RocketMQ answers at most 32 messages, 8 when they are read from
disk) is finished with follow-up pulls. Slices then shrink to the largest recent answer and
proportionally more of them (up to 64) are kept in flight, so as many messages are asked for
at once whatever the broker's cap. The answer bodies are CommitLog records, byte for byte, so
several answers are joined and decoded at once by the file source's vectorised decoder: the
network source has exactly the file source's columns.

Offsets the broker has already deleted (retention) show as PULL_OFFSET_MOVED or a minimum
offset above the slice: ``DataLossError`` unless ``failOnDataLoss`` is false, in which case
the loss is logged and reading goes on from the oldest offset still there.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Iterator

import numpy as np

from ..client import AsyncPullConsumer, ClientInstance, MessageQueue
from ..errors import BrokerError, RocketStoreError
from ..format.batch import decode_records, parse_delay_levels

try:  # InputPartition is a plain base class; keep this module importable without pyspark
    from pyspark.sql.datasource import InputPartition as _PartitionBase
except ImportError:  # pragma: no cover
    _PartitionBase = object  # type: ignore[misc,assignment]

log = logging.getLogger(__name__)

GET_ALL_TOPIC_LIST = 206  # GET_ALL_TOPIC_LIST_FROM_NAMESERVER
EARLIEST, LATEST = -2, -1  # in JSON offsets, as Spark's Kafka source
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX",
                         "TBW102", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "BenchmarkTest",
                         "TRANS_CHECK_MAX_TIME_TOPIC", "rocketstore_")
DEFAULT_GROUP = "rocketstore_spark"
MAX_PULLS_IN_FLIGHT = 64  # per queue range


class DataLossError(RocketStoreError):
    """Offsets a query needs were deleted by the broker (or never existed)."""


def _bool(v, default: bool) -> bool:
    if v is None or str(v).strip() == "":
        return default
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true/false, got {v!r}")


def _pos_int(opts: dict, name: str, default: int | None) -> int | None:
    v = opts.get(name.lower())
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ValueError(f"option {name}: want a positive integer, got {v!r}") from None
    if n <= 0:
        raise ValueError(f"option {name}: want a positive integer, got {v!r}")
    return n


def _timestamp_ms(name: str, v) -> int | None:
    """Epoch milliseconds, or an ISO-8601 instant (a zone is required)."""
    if v is None or str(v).strip() == "":
        return None
    s = str(v).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    import datetime as dt
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"option {name}: want epoch milliseconds or an ISO-8601 time with a "
                         f"zone, got {v!r}") from None
    if t.tzinfo is None:
        raise ValueError(f"option {name}: {v!r} has no time zone (add Z or +hh:mm)")
    return int(t.timestamp() * 1000)


def queue_key(broker: str, queue_id: int) -> str:
    return f"{broker}:{queue_id}"


def parse_offsets(name: str, v, default: str) -> str | dict[str, dict[str, int]]:
    """``earliest`` | ``latest`` | ``{"T": {"broker-a:0": 42, ...}}`` (-2 earliest, -1 latest)."""
    if v is None or str(v).strip() == "":
        return default
    s = str(v).strip()
    if s.lower() in ("earliest", "latest"):
        return s.lower()
    try:
        data = json.loads(s)
    except ValueError:
        raise ValueError(f"option {name}: want earliest, latest or JSON like "
                         f'{{"Topic": {{"broker-a:0": 42}}}}, got {s[:80]!r}') from None
    if not isinstance(data, dict):
        raise ValueError(f"option {name}: the JSON must be an object of topics")
    out: dict[str, dict[str, int]] = {}
    for topic, queues in data.items():
        if not isinstance(queues, dict):
            raise ValueError(f"option {name}: topic {topic!r} needs an object of "
                             f'"broker:queueId": offset')
        for key, off in queues.items():
            broker, sep, qid = str(key).rpartition(":")
            if not sep or not broker or not qid.isdigit() or not isinstance(off, int) \
                    or isinstance(off, bool) or off < -2:
                raise ValueError(f"option {name}: {topic}/{key}={off!r}: want "
                                 f'"broker:queueId": offset (offset >= 0, -2 earliest, -1 latest)')
            out.setdefault(str(topic), {})[queue_key(broker, int(qid))] = off
    return out


SOURCE_OPTIONS = ("namesrv", "topic", "topics", "topicPattern", "startingOffsets",
                  "endingOffsets", "startingTimestamp", "endingTimestamp", "tags", "tagFilter",
                  "minPartitions", "commitGroup", "consumerGroup", "pullBatchSize",
                  "pullPipeline", "pullTimeoutMs", "failOnDataLoss", "maxOffsetsPerTrigger",
                  "includeSystemTopics", "messageDelayLevel", "accessKey", "secretKey")
BATCH_ONLY = ("endingOffsets", "endingTimestamp")
STREAM_ONLY = ("maxOffsetsPerTrigger",)


class NetOptions:
    """The network source's options, parsed once (plain, picklable data)."""

    def __init__(self, options: dict, *, streaming: bool = False) -> None:
        from .read_options import check_options, credentials_of
        check_options(options, SOURCE_OPTIONS, "rocketmq network source")
        opts = {str(k).lower(): v for k, v in options.items()}
        for name in (BATCH_ONLY if streaming else STREAM_ONLY):
            if opts.get(name.lower()) not in (None, ""):
                raise ValueError(f"option {name} is for {'batch' if streaming else 'streaming'}"
                                 f" queries only; this is a {'stream' if streaming else 'batch'}"
                                 " read")
        self.credentials = credentials_of(opts, "rocketmq network source")
        self.namesrv = str(opts.get("namesrv") or "").strip()
        if not self.namesrv:
            raise ValueError("rocketmq network source: give .option('namesrv', 'host:9876')")
        topics = opts.get("topic") or opts.get("topics")
        pattern = opts.get("topicpattern")
        if bool(topics) == bool(pattern):
            raise ValueError("rocketmq network source: give exactly one of option 'topic' "
                             "(a name or a comma list) and 'topicPattern' (a regex)")
        self.topics = [t.strip() for t in str(topics).split(",") if t.strip()] if topics else None
        self.pattern = str(pattern) if pattern else None
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"option topicPattern: {exc}") from None
        self.starting = parse_offsets("startingOffsets", opts.get("startingoffsets"),
                                      "latest" if streaming else "earliest")
        self.ending = parse_offsets("endingOffsets", opts.get("endingoffsets"), "latest")
        if self.ending == "earliest":
            raise ValueError("endingOffsets=earliest reads nothing; use latest or JSON")
        self.starting_ts = _timestamp_ms("startingTimestamp", opts.get("startingtimestamp"))
        self.ending_ts = _timestamp_ms("endingTimestamp", opts.get("endingtimestamp"))
        self.tags = _tag_expression(opts.get("tags") or opts.get("tagfilter") or "*")
        self.min_partitions = _pos_int(opts, "minPartitions", None)
        self.commit_group = str(opts.get("commitgroup") or "").strip() or None
        self.group = str(opts.get("consumergroup") or self.commit_group or DEFAULT_GROUP)
        self.pull_batch = _pos_int(opts, "pullBatchSize", 256)
        self.pipeline = _pos_int(opts, "pullPipeline", 8)
        self.timeout_s = (_pos_int(opts, "pullTimeoutMs", 10_000) or 10_000) / 1000.0
        self.fail_on_data_loss = _bool(opts.get("failondataloss"), True)
        self.max_offsets_per_trigger = _pos_int(opts, "maxOffsetsPerTrigger", None)
        self.include_system = _bool(opts.get("includesystemtopics"), False)
        spec = opts.get("messagedelaylevel")
        self.delay_levels = parse_delay_levels(spec) if spec else None


def _tag_expression(expr: str) -> str:
    expr = str(expr).strip() or "*"
    if expr != "*" and not all(t.strip() for t in expr.split("||")):
        raise ValueError(f"option tags: {expr!r} is not a RocketMQ tag expression like 'A || B'")
    return expr


def tag_set(expr: str) -> frozenset[str] | None:
    """The tags of ``"A || B"``; None for ``*`` (everything)."""
    if expr.strip() == "*":
        return None
    return frozenset(t.strip() for t in expr.split("||"))


@dataclass(frozen=True)
class QueueRange(_PartitionBase):
    """Queue offsets ``[start, end)`` of one message queue; ``end`` None: read what is there."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int
    new_queue: bool = False  # found by a stream after it began: start at the oldest offset

    @property
    def key(self) -> str:
        return queue_key(self.broker, self.queue_id)

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


# -- driver side: topics, queues, offsets ------------------------------------------------------

def run(coro):
    """Run a coroutine to completion on a private event loop (driver or executor)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


async def with_client(o: "NetOptions", fn):
    """``await fn(client)`` with a client made and closed on the running loop."""
    ci = ClientInstance(o.namesrv, timeout_s=o.timeout_s, credentials=o.credentials)
    try:
        return await fn(ci)
    finally:
        ci.close()


async def list_topics(ci: ClientInstance, o: NetOptions) -> list[str]:
    if o.topics is not None:
        return list(dict.fromkeys(o.topics))
    last: Exception | None = None
    for addr in ci.namesrv_addrs:
        try:
            resp = await ci.invoke(addr, GET_ALL_TOPIC_LIST)
            names = json.loads(resp.body.decode("utf-8") or "{}").get("topicList") or []
            break
        except (ConnectionError, TimeoutError, BrokerError) as exc:
            last = exc
    else:
        raise ConnectionError(f"no name server answered the topic list: {last}")
    rx = re.compile(o.pattern or "")
    out = []
    for t in sorted(set(names)):
        if not rx.fullmatch(t):
            continue
        if not o.include_system and t.startswith(SYSTEM_TOPIC_PREFIXES):
            continue
        out.append(t)
    return out


async def list_queues(ci: ClientInstance, topics: list[str], *,
                      missing_ok: bool) -> tuple[list[MessageQueue], dict[str, str]]:
    """Read queues of ``topics`` and the master address of every broker name."""
    queues: list[MessageQueue] = []
    addrs: dict[str, str] = {}
    for t in topics:
        try:
            r = await ci.route(t, refresh=True)
        except BrokerError as exc:
            if missing_ok:
                continue
            raise ValueError(f"topic {t!r} not found at name server {ci.namesrv_addrs}: "
                             f"{exc.remark or exc}") from None
        queues.extend(r.read_queues)
        addrs.update(r.brokers)
    return queues, addrs


async def queue_offsets(ci: ClientInstance, addrs: dict[str, str], queues: list[MessageQueue],
                        code_fields: list[tuple[int, dict]]) -> list[list[int]]:
    """For each (request code, extra fields): that offset of every queue (concurrently)."""
    async def one(mq: MessageQueue, code: int, extra: dict) -> int:
        resp = await ci.invoke(addrs[mq.broker_name], code,
                               {"topic": mq.topic, "queueId": mq.queue_id, **extra})
        return resp.get_int("offset", 0) or 0

    sem = asyncio.Semaphore(64)

    async def limited(*a):
        async with sem:
            return await one(*a)

    out = []
    for code, extra in code_fields:
        out.append(list(await asyncio.gather(*(limited(q, code, extra) for q in queues))))
    return out


GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP = 30, 31, 29


def _pick(spec, mq: MessageQueue, lo: int, hi: int, name: str) -> int | None:
    """The offset ``spec`` gives for ``mq`` (None: the spec does not name this queue)."""
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    v = (spec.get(mq.topic) or {}).get(queue_key(mq.broker_name, mq.queue_id))
    if v is None:
        return None
    if v > hi:
        raise ValueError(f"option {name}: {mq.topic} {queue_key(mq.broker_name, mq.queue_id)}"
                         f" offset {v} is past the queue's end ({hi})")
    return lo if v == EARLIEST else hi if v == LATEST else v


def check_topics_exist(o: "NetOptions", states: list["QueueState"], namesrv: str) -> None:
    """A stream's named topics must exist when it starts (later, a topic whose broker is down
    is waited for)."""
    if o.topics is None:
        return
    have = {s.mq.topic for s in states}
    missing = [t for t in o.topics if t not in have]
    if missing:
        raise ValueError(f"rocketmq stream: topic {', '.join(missing)} does not exist at name "
                         f"server {namesrv} (create it first, or use topicPattern to pick up "
                         "topics as they appear)")


@dataclass
class QueueState:
    mq: MessageQueue
    min_offset: int
    max_offset: int


async def queue_states(ci: ClientInstance, o: NetOptions,
                       missing_ok: bool = False) -> tuple[list[QueueState], dict[str, str]]:
    topics = await list_topics(ci, o)
    queues, addrs = await list_queues(ci, topics, missing_ok=missing_ok)
    if not queues:
        return [], addrs
    mins, maxs = await queue_offsets(ci, addrs, queues, [(GET_MIN_OFFSET, {}),
                                                         (GET_MAX_OFFSET, {})])
    return [QueueState(q, lo, hi) for q, lo, hi in zip(queues, mins, maxs)], addrs


async def search_offsets(ci: ClientInstance, addrs: dict[str, str], states: list[QueueState],
                         ts: int) -> list[int]:
    (res,) = await queue_offsets(ci, addrs, [s.mq for s in states],
                                 [(SEARCH_OFFSET_BY_TIMESTAMP, {"timestamp": ts})])
    return res


async def time_bound(consumer: AsyncPullConsumer, s: QueueState, hint: int, ts: int,
                     lower: bool) -> int:
    """A safe range bound for a time: with ``lower``, an offset before which every message was
    stored before ``ts``; else one from which every message was stored at or after ``ts``.

    RocketMQ's SEARCH_OFFSET_BY_TIMESTAMP answers the message *nearest* ``ts`` (any of several
    with the same millisecond), so its answer is a hint: we step away from it, doubling the
    step, until a message on the right side of ``ts`` is seen. Store times are assumed not to
    go backwards within a queue; rows are re-checked against the time bounds anyway.
    """
    lo, hi = s.min_offset, s.max_offset
    if hi <= lo:
        return lo

    async def time_at(off: int) -> int | None:
        res = await consumer.pull(s.mq.topic, s.mq.queue_id, off, 1, broker_name=s.mq.broker_name)
        return res.messages[0].store_timestamp if res.messages else None

    pos = min(max(hint, lo), hi)
    step = 1
    if lower:
        while pos > lo:
            cand = max(lo, pos - step)
            t = await time_at(cand)
            if t is not None and t < ts:
                return cand
            pos, step = cand, step * 2
        return lo
    while pos < hi:
        t = await time_at(pos)
        if t is not None and t >= ts:
            return pos + 1
        pos, step = min(hi, pos + step), step * 2
    return hi


async def plan_batch(o: NetOptions) -> list[QueueRange]:
    return await with_client(o, lambda ci: _plan_batch(ci, o))


async def _plan_batch(ci: ClientInstance, o: NetOptions) -> list[QueueRange]:
    consumer = AsyncPullConsumer(o.group, o.namesrv, instance=ci)
    states, addrs = await queue_states(ci, o)
    _check_named_queues(o, states)
    starts = [_pick(o.starting, s.mq, s.min_offset, s.max_offset, "startingOffsets")
              for s in states]
    ends = [_pick(o.ending, s.mq, s.min_offset, s.max_offset, "endingOffsets")
            for s in states]
    # queues a JSON spec does not name: from the earliest, to the latest
    starts = [s.min_offset if v is None else v for v, s in zip(starts, states)]
    ends = [s.max_offset if v is None else v for v, s in zip(ends, states)]
    if o.starting_ts is not None:  # takes precedence over startingOffsets (as Kafka's)
        hints = await search_offsets(ci, addrs, states, o.starting_ts)
        starts = list(await asyncio.gather(*(time_bound(consumer, s, h, o.starting_ts, True)
                                             for s, h in zip(states, hints))))
    if o.ending_ts is not None:
        hints = await search_offsets(ci, addrs, states, o.ending_ts)
        ends = list(await asyncio.gather(*(time_bound(consumer, s, h, o.ending_ts, False)
                                           for s, h in zip(states, hints))))
    ranges = []
    for s, st, en in zip(states, starts, ends):
        if st < s.min_offset:
            if o.fail_on_data_loss:
                raise DataLossError(
                    f"{s.mq.topic} {queue_key(s.mq.broker_name, s.mq.queue_id)}: starting offset "
                    f"{st} is below the oldest offset still stored ({s.min_offset}); offsets "
                    f"[{st}, {s.min_offset}) were deleted. Set failOnDataLoss=false to read "
                    f"from {s.min_offset}")
            log.warning("%s %s: offsets [%d, %d) were deleted; reading from %d", s.mq.topic,
                        queue_key(s.mq.broker_name, s.mq.queue_id), st, s.min_offset,
                        s.min_offset)
            st = s.min_offset
        if en > st:
            ranges.append(QueueRange(s.mq.topic, s.mq.broker_name, s.mq.queue_id, st, en))
    if o.commit_group is None:  # a committed offset must mean "the whole queue range was read"
        ranges = split_ranges(ranges, o.min_partitions)
    return ranges


def _check_named_queues(o: NetOptions, states: list[QueueState]) -> None:
    known = {(s.mq.topic, queue_key(s.mq.broker_name, s.mq.queue_id)) for s in states}
    for name, spec in (("startingOffsets", o.starting), ("endingOffsets", o.ending)):
        if isinstance(spec, dict):
            for topic, queues in spec.items():
                for key in queues:
                    if (topic, key) not in known:
                        raise ValueError(f"option {name}: {topic} has no queue {key} "
                                         f"(known: {sorted(k for t, k in known if t == topic)})")


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Cut ranges so there are at least ``min_partitions`` (as Spark's Kafka source: each range
    gets a share of the partitions proportional to its size)."""
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.count for r in ranges)
    if total == 0:
        return ranges
    out = []
    for r in ranges:
        parts = max(1, min(r.count, -(-r.count * min_partitions // total)))
        step = r.count / parts
        bounds = [r.start + int(round(i * step)) for i in range(parts)] + [r.end]
        for a, b in zip(bounds, bounds[1:]):
            if b > a:
                out.append(QueueRange(r.topic, r.broker, r.queue_id, a, b))
    return out


# -- executor side: pipelined pulls → Arrow batches ----------------------------------------------

@dataclass
class _Chunk:
    body: bytes
    lo: int  # the slice this answer is responsible for: queue offsets [lo, hi)
    hi: int


async def pull_chunks(consumer: AsyncPullConsumer, r: QueueRange, o: NetOptions,
                      lost: list[str]) -> AsyncIterator[_Chunk]:
    """Answers of the pulls covering ``r`` in offset order (see module doc)."""
    batch = o.pull_batch
    budget = o.pull_batch * o.pipeline  # messages asked for at once, whatever the slice size
    short: deque = deque(maxlen=32)  # sizes of recent answers cut short by the broker
    inflight: deque = deque()
    next_issue = r.start

    def issue(lo: int, hi: int):
        return asyncio.ensure_future(consumer.pull(r.topic, r.queue_id, lo, hi - lo,
                                                   subscription=o.tags, broker_name=r.broker,
                                                   raw=True))

    while inflight or next_issue < r.end:
        depth = max(o.pipeline, min(MAX_PULLS_IN_FLIGHT, budget // batch))
        while len(inflight) < depth and next_issue < r.end:
            hi = min(r.end, next_issue + batch)
            inflight.append((next_issue, hi, issue(next_issue, hi)))
            next_issue = hi
        lo, hi, fut = inflight.popleft()
        try:
            while lo < hi:
                res = await fut
                if res.status == "FOUND":
                    yield _Chunk(res.body, lo, hi)
                    nxt = res.next_begin_offset
                    if nxt < hi and nxt > lo and o.tags == "*":
                        # the broker's per-pull cap (RocketMQ: 32 from memory, 8 from disk):
                        # slices of the largest recent answer, more of them in flight
                        short.append(nxt - lo)
                        batch = max(1, min(o.pull_batch, max(short)))
                elif res.status == "OFFSET_ILLEGAL" or res.min_offset > lo:
                    if res.min_offset > lo and r.new_queue:
                        nxt = min(hi, res.min_offset)  # "earliest" of a queue new to the stream
                    elif res.min_offset > lo:
                        gone = min(hi, res.min_offset)
                        msg = (f"{r.topic} {r.key}: offsets [{lo}, {gone}) were deleted by the "
                               f"broker (oldest offset now {res.min_offset})")
                        if o.fail_on_data_loss:
                            raise DataLossError(msg + "; set failOnDataLoss=false to skip them")
                        log.warning("%s; skipped", msg)
                        lost.append(msg)
                        nxt = gone
                    else:  # beyond the queue's end: nothing more in this slice
                        nxt = hi
                elif res.status == "NO_NEW_MSG":
                    nxt = hi  # the queue ends before the range does
                else:  # NO_MATCHED_MSG: the tag filter skipped up to next_begin_offset
                    nxt = res.next_begin_offset
                if nxt <= lo:
                    nxt = hi  # no progress possible: never loop
                lo = nxt
                if lo < hi:
                    fut = issue(lo, hi)
        except BaseException:
            for _, _, f in inflight:
                f.cancel()
            raise


def chunk_mask(rec, starts: np.ndarray, los: np.ndarray, his: np.ndarray,
               tags: frozenset[str] | None, ts_lo: int | None, ts_hi: int | None,
               tag_values: list | None) -> np.ndarray:
    """Rows each answer is responsible for, passing the tag and time filters."""
    which = np.searchsorted(starts, rec.pos, side="right") - 1
    qo = rec.queue_offset
    m = (qo >= los[which]) & (qo < his[which])
    if tags is not None:
        m &= np.fromiter((t in tags for t in tag_values), dtype=bool, count=len(rec))
    if ts_lo is not None:
        m &= rec.store_timestamp >= ts_lo
    if ts_hi is not None:
        m &= rec.store_timestamp < ts_hi
    return m


def read_queue_range(r: QueueRange, o: NetOptions, columns: list[str], schema,
                     target_bytes: int = 8 << 20) -> Iterator:
    """Arrow batches of the rows of ``r`` (runs on an executor)."""
    from ..format.batch import extract_property
    from ..format.message import PROPERTY_TAGS
    from .arrow_columns import to_batches

    tags = tag_set(o.tags)
    ts_lo = o.starting_ts
    ts_hi = o.ending_ts
    loop = asyncio.new_event_loop()
    ci = ClientInstance(o.namesrv, timeout_s=o.timeout_s, credentials=o.credentials)
    consumer = AsyncPullConsumer(o.group, o.namesrv, instance=ci)
    lost: list[str] = []
    agen = pull_chunks(consumer, r, o, lost)

    def flush(chunks: list[_Chunk]):
        buf = b"".join(c.body for c in chunks)
        starts = np.cumsum([0] + [len(c.body) for c in chunks[:-1]]).astype(np.int64)
        los = np.array([c.lo for c in chunks], dtype=np.int64)
        his = np.array([c.hi for c in chunks], dtype=np.int64)
        rec = decode_records(buf, delay_levels_ms=o.delay_levels)
        if rec.end != len(buf):
            raise RocketStoreError(f"{r.topic} {r.key}: the broker sent a damaged record at "
                                   f"byte {rec.end} of a pull answer ({rec.stop_reason})")
        tv = extract_property(rec.props_raw, PROPERTY_TAGS) if tags is not None else None
        mask = chunk_mask(rec, starts, los, his, tags, ts_lo, ts_hi, tv)
        return list(to_batches(rec, buf, columns, schema, mask, broker_name=r.broker))

    try:
        pending: list[_Chunk] = []
        size = 0
        while True:
            try:
                c = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                break
            pending.append(c)
            size += len(c.body)
            if size >= target_bytes:
                yield from flush(pending)
                pending, size = [], 0
        if pending:
            yield from flush(pending)
        if o.commit_group is not None:
            loop.run_until_complete(consumer.commit_offset(r.topic, r.queue_id, r.end,
                                                           broker_name=r.broker))
    finally:
        try:
            loop.run_until_complete(agen.aclose())
        except Exception:
            pass
        ci.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def now_ms() -> int:
    return int(time.time() * 1000)
