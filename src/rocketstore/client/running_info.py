"""What a push consumer tells an operator about itself: GET_CONSUMER_RUNNING_INFO (307) and
GET_CONSUMER_STATUS_FROM_CLIENT (221), asked by the broker for ``mqadmin consumerStatus`` /
``getConsumerStatus``, and CONSUME_MESSAGE_DIRECTLY (309, ``queryMsgById -g G -d CLIENT``: the
listener consumes one stored message again) (RocketMQ 4.9.7 ``ClientRemotingProcessor``).

The 307 answer is a ``ConsumerRunningInfo`` body as fastjson writes it::

    {"mqTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{ProcessQueueInfo}},
     "properties":{"consumerGroup":"G",...,"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY",...},
     "statusTable":{"T":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,"consumeOKTPS":1.5,
                         "consumeRT":0.2,"pullRT":3.1,"pullTPS":1.5}},
     "subscriptionSet":[{SubscriptionData}], "jstack": "..." (only when asked)}

``ProcessQueueInfo`` per queue the consumer owns: ``commitOffset`` (the next offset to consume,
memory first), the pulled-but-not-yet-consumed messages (``cachedMsg*``), ``locked`` /
``lastLockTimestamp`` (orderly consumers), ``lastPullTimestamp``, ``lastConsumeTimestamp``.
``statusTable`` holds per topic the last minute's pull RT (ms) and TPS, consume RT (ms), OK and
failed TPS, and the failed messages of the last hour, as RocketMQ's ``ConsumerStatsManager``.
The 221 answer is ``GetConsumerStatusBody`` with ``messageQueueTable``: queue → offset of the
asked topic.

Theory of operation: the consumer updates a ``ProcessQueueState`` per queue and a
``ConsumeStatsTracker`` (per-second buckets) as it pulls and consumes (plain attribute writes,
no locks: all on the client's event loop); the responder builds the body from them when a request comes in and
writes the answer on the connection the request came from.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..format.hashing import java_hash
from ..format.message import MessageExt, decode_message
from ..remoting import fastjson
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from .consumer import original_view

log = logging.getLogger(__name__)
CLIENT_VERSION = "V4_9_4"  # MQVersion of BROKER_VERSION (401), what the client sends
MINUTE_MS, HOUR_MS = 60_000, 3_600_000


@dataclass
class ProcessQueueState:
    """One owned queue (RocketMQ's ``ProcessQueue``, what ``fillProcessQueueInfo`` reports)."""

    cached: dict[int, int] | None = None  # queue offset -> body size, pulled, not consumed yet
    locked: bool = False
    last_lock_ms: int = 0
    last_pull_ms: int = 0
    last_consume_ms: int = 0
    dropped: bool = False

    def cache(self, msgs: list) -> None:
        self.cached = {m.queue_offset: len(m.body) for m in msgs}

    def consumed(self, queue_offset: int) -> None:
        if self.cached:
            self.cached.pop(queue_offset, None)
        self.last_consume_ms = int(time.time() * 1000)

    def info(self, commit_offset: int) -> dict:
        cached = self.cached or {}
        return {"commitOffset": commit_offset,
                "cachedMsgMinOffset": min(cached) if cached else 0,
                "cachedMsgMaxOffset": max(cached) if cached else 0,
                "cachedMsgCount": len(cached),
                "cachedMsgSizeInMiB": sum(cached.values()) // (1024 * 1024),
                "transactionMsgMinOffset": 0, "transactionMsgMaxOffset": 0,
                "transactionMsgCount": 0, "locked": self.locked, "tryUnlockTimes": 0,
                "lastLockTimestamp": self.last_lock_ms, "droped": self.dropped,
                "lastPullTimestamp": self.last_pull_ms,
                "lastConsumeTimestamp": self.last_consume_ms}


class _Second:
    """What happened to one topic in one wall-clock second."""

    __slots__ = ("second", "pulls", "pull_rt", "pulled", "consumes", "consume_rt", "ok", "failed")

    def __init__(self, second: int) -> None:
        self.second = second
        self.pulls = self.pulled = self.consumes = self.ok = self.failed = 0
        self.pull_rt = self.consume_rt = 0.0


class ConsumeStatsTracker:
    """Per topic: one bucket per second of the last minute (pull RT and count, consume RT, OK,
    failed) and one failed count per minute of the last hour — bounded memory at any rate, a
    few attribute updates per message."""

    def __init__(self) -> None:
        self._seconds: dict[str, deque[_Second]] = {}
        self._failed_minutes: dict[str, deque[list[int]]] = {}  # [minute, failed count]

    def _now(self, topic: str) -> _Second:
        sec = int(time.time())
        q = self._seconds.get(topic)
        if q is None:
            q = self._seconds[topic] = deque()
        elif q and q[-1].second == sec:
            return q[-1]
        b = _Second(sec)
        q.append(b)
        while q[0].second <= sec - MINUTE_MS // 1000:
            q.popleft()
        return b

    def pulled(self, topic: str, rt_ms: float, count: int) -> None:
        b = self._now(topic)
        b.pulls += 1
        b.pull_rt += rt_ms
        b.pulled += count

    def consumed(self, topic: str, rt_ms: float, ok: bool) -> None:
        b = self._now(topic)
        b.consumes += 1
        b.consume_rt += rt_ms
        if ok:
            b.ok += 1
            return
        b.failed += 1
        minute = b.second // 60
        q = self._failed_minutes.setdefault(topic, deque())
        if q and q[-1][0] == minute:
            q[-1][1] += 1
        else:
            q.append([minute, 1])
        while q[0][0] <= minute - HOUR_MS // MINUTE_MS:
            q.popleft()

    def status(self, topic: str) -> dict:
        now = int(time.time())
        window = [b for b in self._seconds.get(topic, ()) if b.second > now - MINUTE_MS // 1000]
        pulls, consumes = sum(b.pulls for b in window), sum(b.consumes for b in window)
        per_s = MINUTE_MS / 1000.0
        failed = sum(c for m, c in self._failed_minutes.get(topic, ())
                     if m > now // 60 - HOUR_MS // MINUTE_MS)
        return {"pullRT": sum(b.pull_rt for b in window) / pulls if pulls else 0.0,
                "pullTPS": sum(b.pulled for b in window) / per_s,
                "consumeRT": sum(b.consume_rt for b in window) / consumes if consumes else 0.0,
                "consumeOKTPS": sum(b.ok for b in window) / per_s,
                "consumeFailedTPS": sum(b.failed for b in window) / per_s,
                "consumeFailedMsgs": failed}


def subscription_data(topic: str, expression: str, expression_type: str,
                      sub_version: int) -> dict:
    """RocketMQ's ``FilterAPI.build``: a tag expression's tags and their hash codes."""
    sub = expression.strip() if expression else "*"
    tags: list[str] = []
    if expression_type == "TAG" and sub not in ("", "*"):
        tags = [t.strip() for t in sub.split("||") if t.strip()]
    elif expression_type == "TAG":
        sub = "*"
    return {"classFilterMode": False, "topic": topic, "subString": sub, "tagsSet": tags,
            "codeSet": [java_hash(t) for t in tags], "subVersion": sub_version,
            "expressionType": expression_type}


def python_stacks() -> str:
    """Every thread's stack, for ``jstackEnable`` (the Python twin of ``UtilAll.jstack``)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"Thread: {names.get(ident, ident)}\n")
        out.extend("    " + line.strip() + "\n" for line in traceback.format_stack(frame))
    return "".join(out)


class RunningInfoResponder:
    """Answers 307 and 221 for the one consumer of a ``ClientInstance``."""

    def __init__(self, instance: Any, consumer: Any) -> None:
        self.instance = instance
        self.consumer = consumer
        instance.on_broker_request.append(self._on_request)

    def _on_request(self, addr: str, cmd: RemotingCommand) -> None:
        if cmd.code not in (RequestCode.GET_CONSUMER_RUNNING_INFO,
                            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
                            RequestCode.CONSUME_MESSAGE_DIRECTLY):
            return
        asyncio.get_running_loop().create_task(self._answer(addr, cmd))

    def _build(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.get_str("consumerGroup") or cmd.get_str("group") or ""
        if group != self.consumer.group:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer Group <{group}> not exist in this consumer")
        if cmd.code == RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT:
            topic = cmd.get_str("topic") or ""
            table = {fastjson.message_queue_key(mq.topic, mq.broker_name, mq.queue_id): off
                     for mq, off in self.consumer.offset_table().items() if mq.topic == topic}
            body = {"messageQueueTable": table, "consumerTable": {}}
        else:
            body = running_info(self.consumer, self.instance.namesrv_addrs)
            if cmd.get_bool("jstackEnable"):
                body["jstack"] = python_stacks()
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode("utf-8"))

    async def _consume_directly(self, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (``queryMsgById -g G -d CLIENT``): the listener gets the
        message once more, outside the queue's order and offsets; ``ConsumeMessageDirectlyResult``."""
        group = cmd.get_str("consumerGroup") or ""
        if group != self.consumer.group:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"The Consumer Group <{group}> not exist in this consumer")
        msg = decode_message(cmd.body or b"", 0)
        if not isinstance(msg, MessageExt):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="no message in the request")
        result: dict[str, Any] = {"order": bool(self.consumer.orderly), "autoCommit": True}
        t0 = time.monotonic()
        try:
            ok = await asyncio.get_running_loop().run_in_executor(
                self.consumer.executor, self.consumer.listener, original_view(msg))
            result["consumeResult"] = "CR_LATER" if ok is False else "CR_SUCCESS"
        except Exception as exc:
            result["consumeResult"] = "CR_THROW_EXCEPTION"
            result["remark"] = f"{type(exc).__name__}: {exc}"
        result["spentTimeMills"] = int((time.monotonic() - t0) * 1000)
        return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(result).encode("utf-8"))

    async def _answer(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            if cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
                resp = await self._consume_directly(cmd)
            else:
                resp = self._build(cmd)
        except Exception as exc:  # never leave the broker waiting on a bug of ours
            log.exception("building the answer to request %s failed", cmd.code)
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        try:
            client = await self.instance.pool.get(addr)
            client._write(resp)
        except (ConnectionError, OSError) as exc:
            log.info("cannot answer request %s of %s: %s", cmd.code, addr, exc)


def running_info(consumer: Any, namesrv_addrs: list[str]) -> dict:
    """The ``ConsumerRunningInfo`` of a push consumer, as a dict ready for ``fastjson.dumps``."""
    props = {k: str(v) for k, v in consumer.properties().items()}
    props.update({"PROP_CONSUMEORDERLY": str(bool(consumer.orderly)).lower(),
                  "PROP_THREADPOOL_CORE_SIZE": str(consumer.consume_threads),
                  "PROP_CONSUMER_START_TIMESTAMP": str(consumer.start_ms),
                  "PROP_NAMESERVER_ADDR": "".join(a + ";" for a in namesrv_addrs),
                  "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
                  "PROP_CLIENT_VERSION": CLIENT_VERSION})
    subs = sorted((subscription_data(t, *consumer.selector(t), consumer.sub_version)
                   for t in consumer.subscription), key=lambda s: s["topic"] + "@" + s["subString"])
    offsets = consumer.offset_table()
    mq_table = {fastjson.message_queue_key(mq.topic, mq.broker_name, mq.queue_id):
                pq.info(offsets.get(mq, -1))
                for mq, pq in sorted(consumer.process_queues.items())}
    return {"properties": props, "subscriptionSet": subs, "mqTable": mq_table,
            "statusTable": {s["topic"]: consumer.stats.status(s["topic"]) for s in subs}}


__all__ = ["ConsumeStatsTracker", "ProcessQueueState", "RunningInfoResponder", "running_info",
           "subscription_data"]
