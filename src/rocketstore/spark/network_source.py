"""The ``rocketmq`` source without a path: a RocketMQ cluster read through its name server.

    df = (spark.read.format("rocketmq").option("namesrv", "h1:9876;h2:9876")
          .option("topic", "Orders").option("startingOffsets", "earliest").load())
    stream = (spark.readStream.format("rocketmq").option("namesrv", "h1:9876")
              .option("topicPattern", "orders-.*").option("maxOffsetsPerTrigger", 100000).load())

Theory of operation (batch). ``partitions()`` runs on the driver: topics and queues from the name
server, offsets from each queue's broker, one ``QueueRange`` per message queue, cut further when
``minPartitions`` asks for more (see ``network``). ``read()`` runs on executors and pulls its
range from the broker that owns the queue; rows have the file source's columns.

Streaming. The Spark offset is ``{"Topic": {"broker-a:0": 42, ...}}`` — the next queue offset
to read per queue, kept by Spark in the query's checkpoint. A micro-batch ``(start, end)`` is
read as the ranges ``[start[q], end[q])``; queue offsets of stored messages never change, so a
replayed batch after a driver restart reads the same rows and a file sink stays exactly-once.
``latestOffset`` asks the name server again every trigger, so new queues, brokers and (with
``topicPattern``) topics join; a queue new to the query starts at its oldest offset, a queue
that disappeared (broker down) keeps its offset until it comes back. ``maxOffsetsPerTrigger``
caps the rows of a batch, shared among queues in proportion to their backlog (as Spark's Kafka
source). ``Trigger.AvailableNow`` pins the latest offsets once and drains up to them.
``commitGroup`` commits each finished batch's end offsets to the brokers for that consumer group
(from the driver, after Spark committed the batch), so RocketMQ tools show the query's progress.
"""
from __future__ import annotations

import logging
from typing import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from ..client import AsyncPullConsumer
from .arrow_columns import arrow_schema
from .read_options import _columns
from .network import (NetOptions, QueueRange, plan_batch, queue_key, queue_states,
                      read_queue_range, run, search_offsets, split_ranges, time_bound,
                      with_client, _pick)

log = logging.getLogger(__name__)


class NetworkReader(DataSourceReader):
    def __init__(self, options: dict, schema) -> None:
        self.o = NetOptions(options)
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)

    def partitions(self) -> list[QueueRange]:
        ranges = run(plan_batch(self.o))
        return ranges or [QueueRange("", "", 0, 0, 0)]  # Spark needs one partition

    def read(self, partition: QueueRange) -> Iterator:
        if partition.count == 0:
            return
        yield from read_queue_range(partition, self.o, self.columns, self.schema)


Offsets = dict  # {"Topic": {"broker:queueId": next offset}}


def _total(start: Offsets, end: Offsets) -> int:
    return sum(max(0, v - start.get(t, {}).get(k, v)) for t, qs in end.items()
               for k, v in qs.items())


def rate_limit(start: Offsets, latest: Offsets, first: dict, max_rows: int) -> Offsets:
    """End offsets at most ``max_rows`` past ``start``, shared in proportion to each queue's
    backlog; ``first`` gives where a queue absent from ``start`` begins."""
    avail = {}
    for t, qs in latest.items():
        for k, hi in qs.items():
            lo = start.get(t, {}).get(k, first.get((t, k), 0))
            avail[(t, k)] = (lo, max(0, hi - lo))
    total = sum(n for _, n in avail.values())
    end = {t: dict(qs) for t, qs in start.items()}
    if total <= max_rows:
        for (t, k), (lo, n) in avail.items():
            end.setdefault(t, {})[k] = lo + n
        return end
    taken = 0
    for (t, k), (lo, n) in sorted(avail.items()):
        share = min(n, (n * max_rows) // total)
        end.setdefault(t, {})[k] = lo + share
        taken += share
    # hand what rounding left over to the queues with the most left, one row at a time
    left = max_rows - taken
    for (t, k), (lo, n) in sorted(avail.items(), key=lambda kv: -(kv[1][1])):
        if left <= 0:
            break
        room = lo + n - end[t][k]
        give = min(room, left)
        end[t][k] += give
        left -= give
    return end


class NetworkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict, schema) -> None:
        self.o = NetOptions(options, streaming=True)
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)
        self._pinned: Offsets | None = None
        self._first: dict = {}  # (topic, key) -> oldest offset, for queues new to the query
        self._latest_seen: Offsets | None = None  # the brokers' ends at the last trigger

    def _states(self):
        return run(with_client(self.o, lambda ci: queue_states(ci, self.o, missing_ok=True)))

    def initialOffset(self) -> Offsets:
        o = self.o

        async def go(ci):
            from .network import _check_named_queues
            consumer = AsyncPullConsumer(o.group, o.namesrv, instance=ci)
            from .network import check_topics_exist
            states, addrs = await queue_states(ci, o, missing_ok=True)
            check_topics_exist(o, states, o.namesrv)
            _check_named_queues(o, states)
            starts = [_pick(o.starting, s.mq, s.min_offset, s.max_offset, "startingOffsets")
                      for s in states]
            starts = [s.min_offset if v is None else v for v, s in zip(starts, states)]
            if o.starting_ts is not None:
                import asyncio
                hints = await search_offsets(ci, addrs, states, o.starting_ts)
                starts = list(await asyncio.gather(*(
                    time_bound(consumer, s, h, o.starting_ts, True)
                    for s, h in zip(states, hints))))
            out: Offsets = {}
            for s, v in zip(states, starts):
                out.setdefault(s.mq.topic, {})[queue_key(s.mq.broker_name, s.mq.queue_id)] = v
            return out

        return run(with_client(o, go))

    def _latest(self) -> Offsets:
        states, _ = self._states()
        out: Offsets = {}
        for s in states:
            k = queue_key(s.mq.broker_name, s.mq.queue_id)
            out.setdefault(s.mq.topic, {})[k] = s.max_offset
            self._first[(s.mq.topic, k)] = s.min_offset
        return out

    def getDefaultReadLimit(self):
        if self.o.max_offsets_per_trigger:
            return ReadMaxRows(self.o.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._pinned = self._latest()

    def latestOffset(self, start: Offsets, limit=None) -> Offsets:
        latest = self._pinned if self._pinned is not None else self._latest()
        self._latest_seen = latest
        max_rows = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None and self.o.max_offsets_per_trigger:
            max_rows = self.o.max_offsets_per_trigger
        if max_rows is not None:
            return rate_limit(start, latest, self._first, max_rows)
        return rate_limit(start, latest, self._first, 1 << 62)

    def reportLatestOffset(self) -> Offsets | None:
        """The brokers' ends (not the rate-limited end of the batch): the progress's
        ``latestOffset``, from which ``rocketstore.spark.lag`` computes how far behind a batch
        is (Python sources cannot fill ``sources[].metrics``)."""
        return self._latest_seen

    def partitions(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        ranges = []
        for t, qs in sorted(end.items()):
            for k, hi in sorted(qs.items()):
                lo = start.get(t, {}).get(k)
                new = lo is None
                lo = 0 if new else lo
                broker, _, qid = k.rpartition(":")
                if hi > lo:
                    ranges.append(QueueRange(t, broker, int(qid), lo, hi, new))
        return split_ranges(ranges, self.o.min_partitions)

    def read(self, partition: QueueRange) -> Iterator:
        yield from read_queue_range(partition, self.o, self.columns, self.schema)

    def commit(self, end: Offsets) -> None:
        if self.o.commit_group is None:
            return
        async def go(ci):
            consumer = AsyncPullConsumer(self.o.commit_group, self.o.namesrv, instance=ci)
            for t, qs in end.items():
                for k, off in qs.items():
                    broker, _, qid = k.rpartition(":")
                    try:
                        await consumer.commit_offset(t, int(qid), off, broker_name=broker)
                    except Exception as exc:  # progress reporting only: never fail the query
                        log.warning("commit of %s %s=%d for %s failed: %s", t, k, off,
                                    self.o.commit_group, exc)
        run(with_client(self.o, go))

    def stop(self) -> None:
        pass


def lag(progress, namesrv: str | None = None, *, credentials=None) -> list[dict]:
    """How far each ``rocketmq`` source of a streaming progress is behind the brokers, as
    Kafka's source metrics: per source ``avgOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
    ``minOffsetsBehindLatest`` and ``offsetsBehindLatest`` (the total), from its ``endOffset``
    (where the batch stopped) and ``latestOffset`` (the brokers' ends when it was planned).

    With ``namesrv`` (and ``credentials``, a ``rocketstore.client.SessionCredentials``, on an
    ACL cluster) also in time, from the brokers' store timestamps: per queue the time between
    the first message the batch left unread (at ``endOffset``) and the newest one (at
    ``latestOffset`` - 1) — 0 when the batch read to the end — as ``maxMsBehindLatest``,
    ``avgMsBehindLatest`` and ``queuesMsBehindLatest``. Two PULLs of one message per queue that
    is behind; a queue whose messages are gone (retention) is left out.

        for s in rocketstore.spark.lag(query.lastProgress): print(s["maxOffsetsBehindLatest"])
    """
    import json as _json
    if hasattr(progress, "json"):  # a StreamingQueryProgress
        progress = _json.loads(progress.json)
    out = []
    for src in (progress or {}).get("sources") or []:
        def load(v):
            if isinstance(v, str):
                try:
                    v = _json.loads(v)
                except ValueError:
                    return None
            return v if isinstance(v, dict) else None
        end, latest = load(src.get("endOffset")), load(src.get("latestOffset"))
        if end is None or latest is None:
            continue
        behind, spans = {}, {}
        for t, qs in latest.items():
            if not isinstance(qs, dict):
                break
            for k, hi in qs.items():
                lo = (end.get(t) or {}).get(k, 0)
                behind[f"{t}/{k}"] = max(0, int(hi) - int(lo))
                spans[f"{t}/{k}"] = (t, k, int(lo), int(hi))
        if not behind:
            continue
        v = list(behind.values())
        row = {"description": src.get("description"), "offsetsBehindLatest": sum(v),
               "avgOffsetsBehindLatest": sum(v) / len(v),
               "maxOffsetsBehindLatest": max(v), "minOffsetsBehindLatest": min(v),
               "queues": behind}
        if namesrv:
            ms = _ms_behind(namesrv, credentials, spans)
            if ms:
                row.update(maxMsBehindLatest=max(ms.values()),
                           avgMsBehindLatest=sum(ms.values()) / len(ms),
                           queuesMsBehindLatest=ms)
        out.append(row)
    return out


def _ms_behind(namesrv: str, credentials, spans: dict) -> dict[str, int]:
    """Per queue (``spans``: name -> topic, "broker:qid", end, latest): the newest message's
    store time minus the first unread one's, in ms (module doc of ``lag``)."""
    from ..client import MessageQueue, PullConsumer
    out: dict[str, int] = {}
    with PullConsumer("rocketstore_spark_lag", namesrv, credentials=credentials) as c:
        def stamp(mq, off):
            r = c.pull_from(mq, off, 1)
            if r.status != "FOUND" or not r.messages or r.messages[0].queue_offset != off:
                return None
            return r.messages[0].store_timestamp
        for name, (t, k, lo, hi) in spans.items():
            if hi <= lo:
                out[name] = 0
                continue
            broker, _, qid = k.rpartition(":")
            mq = MessageQueue(t, broker, int(qid))
            first, newest = stamp(mq, lo), stamp(mq, hi - 1)
            if first is not None and newest is not None:
                out[name] = max(0, newest - first)
    return out
