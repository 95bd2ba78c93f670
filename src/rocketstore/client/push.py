"""``PushConsumer``: a consumer-group loop — heartbeat, rebalance, long-poll, consume, commit.

See ``consumer`` for the theory of operation. The listener is a plain function
``listener(msg: MessageExt) -> bool | None`` run on a worker thread; ``False`` or an exception
means "consume later": the message is sent back to the broker's retry topic — or, with
``orderly=True``, retried in place after ``orderly_retry_s`` so nothing behind it in the queue
overtakes it. An orderly consumer also holds the broker's lock (LOCK_BATCH_MQ) on every queue
it consumes, renewed at each rebalance, so no two clients of the group consume one queue.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from ..errors import BrokerError
from ..format.message import MessageExt
from ..remoting import fastjson
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ._sync import LoopThread
from .consumer import RETRY_PREFIX, AsyncPullConsumer, original_view, selector_of
from .instance import MessageQueue, sleep_or
from .running_info import ConsumeStatsTracker, ProcessQueueState, RunningInfoResponder

log = logging.getLogger(__name__)
Listener = Callable[[MessageExt], "bool | None"]


class AsyncPushConsumer:
    def __init__(self, group: str, namesrv: str, subscription: Mapping[str, str],
                 listener: Listener, *, consume_from: str = "last", max_reconsume_times: int = 16,
                 retry_delay_level: int = 0, pull_batch_size: int = 32,
                 long_poll_ms: int = 15_000, heartbeat_interval_s: float = 10.0,
                 rebalance_interval_s: float = 5.0, commit_interval_s: float = 1.0,
                 consume_threads: int = 4, timeout_s: float = 5.0, orderly: bool = False,
                 orderly_retry_s: float = 1.0, credentials: Any = None) -> None:
        if consume_from not in ("last", "first"):
            raise ValueError("consume_from must be 'last' or 'first'")
        self.pc = AsyncPullConsumer(group, namesrv, timeout_s=timeout_s, credentials=credentials)
        self.group = group
        self.subscription = dict(subscription)
        self.subscription.setdefault(RETRY_PREFIX + group, "*")
        self.listener = listener
        self.consume_from = consume_from
        self.max_reconsume_times = max_reconsume_times
        self.retry_delay_level = retry_delay_level
        self.pull_batch_size = pull_batch_size
        self.long_poll_ms = long_poll_ms
        self.heartbeat_interval_s = heartbeat_interval_s
        self.rebalance_interval_s = rebalance_interval_s
        self.commit_interval_s = commit_interval_s
        self.orderly = orderly
        self.orderly_retry_s = orderly_retry_s
        self.shutdown_wait_s = 10.0  # how long shutdown waits for the listeners in flight
        self._consuming = 0  # messages handed to the listener and not yet done
        self.executor = ThreadPoolExecutor(consume_threads, thread_name_prefix=f"consume-{group}")
        self.offsets: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        self._tasks: dict[MessageQueue, asyncio.Task] = {}
        self._loops: list[asyncio.Task] = []
        self._stop = asyncio.Event()
        self._rebalance_now = asyncio.Event()
        self.pc.instance.on_notify.append(self._on_notify)
        self._sub_version = int(time.time() * 1000)  # RocketMQ's subVersion: when subscribed
        # what GET_CONSUMER_RUNNING_INFO reports (mqadmin consumerStatus)
        self.consume_threads = consume_threads
        self.start_ms = self._sub_version
        self.process_queues: dict[MessageQueue, ProcessQueueState] = {}
        self.stats = ConsumeStatsTracker()
        RunningInfoResponder(self.pc.instance, self)

    @property
    def sub_version(self) -> int:
        return self._sub_version

    def selector(self, topic: str) -> tuple[str, str]:
        return selector_of(self.subscription.get(topic, "*"))

    def offset_table(self) -> dict[MessageQueue, int]:
        """Next offset to consume per owned queue: in memory first, then committed."""
        return {**self._committed, **self.offsets}

    def properties(self) -> dict[str, object]:
        """This consumer's settings under DefaultMQPushConsumer's names."""
        return {"consumerGroup": self.group, "messageModel": "CLUSTERING",
                "consumeFromWhere": self._consumer_data()["consumeFromWhere"],
                "consumeThreadMin": self.consume_threads,
                "consumeThreadMax": self.consume_threads, "pullBatchSize": self.pull_batch_size,
                "consumeMessageBatchMaxSize": 1, "maxReconsumeTimes": self.max_reconsume_times,
                "namesrvAddr": ";".join(self.pc.instance.namesrv_addrs),
                "clientId": self.client_id, "language": "PYTHON", "unitMode": "false",
                "heartbeatBrokerInterval": int(self.heartbeat_interval_s * 1000),
                "persistConsumerOffsetInterval": int(self.commit_interval_s * 1000),
                "suspendCurrentQueueTimeMillis": int(self.orderly_retry_s * 1000),
                "brokerSuspendMaxTimeMillis": self.long_poll_ms, "pullInterval": 0}

    @property
    def client_id(self) -> str:
        return self.pc.instance.client_id

    def _on_notify(self, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            self._rebalance_now.set()
        elif cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and \
                cmd.get_str("group") == self.group:
            asyncio.get_running_loop().create_task(self._reset_offsets(cmd))

    async def _reset_offsets(self, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (an operator's ``resetOffsetByTime``): drop what is in
        flight on each listed queue, continue from the offset the broker sends, commit it."""
        try:
            table = fastjson.loads(cmd.body or b"{}").get("offsetTable") or {}
        except ValueError as exc:
            log.warning("bad reset-offset body: %s", exc)
            return
        rows = table.items() if isinstance(table, dict) else \
            [(r, r.get("offset")) for r in table if isinstance(r, dict)]  # the C++ list form
        for key, offset in rows:
            try:
                mq = MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))
                offset = int(offset)
            except (KeyError, TypeError, ValueError):
                continue
            task = self._tasks.pop(mq, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self.offsets[mq] = offset
            self._committed.pop(mq, None)
            await self._commit_one(mq)
            if task is not None and not self._stop.is_set():
                self._tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq))

    def _consumer_data(self) -> dict:
        return {"groupName": self.group, "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET" if self.consume_from == "last"
                else "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                "subscriptionDataSet": [{"topic": t, "subString": selector_of(e)[0], "tagsSet": [],
                                         "codeSet": [], "subVersion": self._sub_version,
                                         "classFilterMode": False,
                                         "expressionType": selector_of(e)[1]}
                                        for t, e in self.subscription.items()]}

    async def _heartbeat(self) -> None:
        await self.pc.instance.heartbeat(list(self.subscription), [], [self._consumer_data()])

    async def start(self) -> "AsyncPushConsumer":
        await self._heartbeat()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._heartbeat_loop()),
                       loop.create_task(self._rebalance_loop()),
                       loop.create_task(self._commit_loop())]
        return self

    async def _heartbeat_loop(self) -> None:
        while not await sleep_or(self._stop, self.heartbeat_interval_s):
            try:
                await self._heartbeat()
            except (ConnectionError, TimeoutError, BrokerError) as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _rebalance_loop(self) -> None:
        while not self._stop.is_set():
            await sleep_or(self._rebalance_now, self.rebalance_interval_s)
            self._rebalance_now.clear()
            if self._stop.is_set():
                return
            try:
                await self.rebalance()
            except (ConnectionError, TimeoutError, BrokerError) as exc:
                log.warning("rebalance failed: %s", exc)

    async def _commit_loop(self) -> None:
        while not await sleep_or(self._stop, self.commit_interval_s):
            await self.commit()

    async def rebalance(self) -> None:
        mine: set[MessageQueue] = set()
        for topic in self.subscription:
            try:
                queues = sorted(await self.pc.queues(topic))
            except BrokerError as exc:  # as RocketMQ's rebalance: a topic not created yet is
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:  # skipped, asked again next time
                    raise
                log.debug("rebalance %s: topic %s does not exist (yet)", self.group, topic)
                continue
            if not queues:
                continue
            addr = await self.pc.instance.broker_addr(queues[0])
            resp = await self.pc.instance.invoke(
                addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group},
                ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
            ids = sorted(json.loads(resp.body)["consumerIdList"]) \
                if resp.code == ResponseCode.SUCCESS and resp.body else [self.client_id]
            if self.client_id not in ids:
                ids = sorted(ids + [self.client_id])
            mine.update(allocate_average(queues, ids, self.client_id))
        appeared = {q.topic for q in mine} - {q.topic for q in self._tasks}
        if appeared and self._loops:  # a topic created after start: as RocketMQ's
            # messageQueueChanged, a new subscription version and a heartbeat now, so its
            # brokers know the subscription (and its SQL92 filter) before the first pull
            self._sub_version = int(time.time() * 1000)
            await self._heartbeat()
        if self.orderly:  # consume only the queues whose broker lock we hold (or renewed)
            mine = await self._lock(mine)
        for mq in list(self._tasks):
            if mq not in mine:
                task = self._tasks.pop(mq)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await self._commit_one(mq)
                self.offsets.pop(mq, None)
                self.process_queues.pop(mq, None)
                if self.orderly:
                    await self._unlock([mq])
        for mq in sorted(mine):
            pq = self.process_queues.setdefault(mq, ProcessQueueState())
            if self.orderly:
                pq.locked, pq.last_lock_ms = True, int(time.time() * 1000)
            if mq not in self._tasks:
                self._tasks[mq] = asyncio.get_running_loop().create_task(self._pull_loop(mq))

    async def _lock_call(self, code: int, mqs: list[MessageQueue]) -> list[MessageQueue]:
        if not mqs:
            return []
        addr = await self.pc.instance.broker_addr(mqs[0])
        body = json.dumps({"consumerGroup": self.group, "clientId": self.client_id,
                           "onlyThisBroker": False,
                           "mqSet": [{"topic": q.topic, "brokerName": q.broker_name,
                                      "queueId": q.queue_id} for q in mqs]}).encode()
        resp = await self.pc.instance.invoke(addr, code, None, body)
        if code != RequestCode.LOCK_BATCH_MQ:
            return []
        ok = {(d["topic"], d["brokerName"], int(d["queueId"]))
              for d in json.loads(resp.body or b"{}").get("lockOKMQSet", [])}
        return [q for q in mqs if (q.topic, q.broker_name, q.queue_id) in ok]

    async def _lock(self, mqs: set[MessageQueue]) -> set[MessageQueue]:
        by_broker: dict[str, list[MessageQueue]] = {}
        for q in sorted(mqs):
            by_broker.setdefault(q.broker_name, []).append(q)
        locked: set[MessageQueue] = set()
        for qs in by_broker.values():
            locked.update(await self._lock_call(RequestCode.LOCK_BATCH_MQ, qs))
        return locked

    async def _unlock(self, mqs: list[MessageQueue]) -> None:
        try:
            await self._lock_call(RequestCode.UNLOCK_BATCH_MQ, mqs)
        except (ConnectionError, TimeoutError, BrokerError) as exc:
            log.warning("unlock failed: %s", exc)

    async def _start_offset(self, mq: MessageQueue) -> int:
        off = await self.pc.committed_offset(mq.topic, mq.queue_id)
        if off is not None and off >= 0:
            return off
        if self.consume_from == "first" or mq.topic.startswith(RETRY_PREFIX):
            return await self.pc.min_offset(mq.topic, mq.queue_id)
        return await self.pc.max_offset(mq.topic, mq.queue_id)

    async def _pull_loop(self, mq: MessageQueue) -> None:
        expr, expr_type = selector_of(self.subscription.get(mq.topic, "*"))
        while not self._stop.is_set():
            try:
                if mq not in self.offsets:
                    self.offsets[mq] = await self._start_offset(mq)
                offset = self.offsets[mq]
                pq = self.process_queues.setdefault(mq, ProcessQueueState())
                pq.last_pull_ms = int(time.time() * 1000)  # when asked, as RocketMQ's
                t0 = time.monotonic()
                r = await self.pc.pull(mq.topic, mq.queue_id, offset, self.pull_batch_size,
                                       subscription=expr, expression_type=expr_type,
                                       post_subscription=expr_type == "TAG",
                                       suspend_ms=self.long_poll_ms,
                                       commit_offset=self._committed.get(mq))
                if r.messages:  # a long poll's wait is not its round trip
                    self.stats.pulled(mq.topic, (time.monotonic() - t0) * 1000, len(r.messages))
                pq.cache(r.messages)
                for m in r.messages:
                    if self._stop.is_set():
                        return
                    self._consuming += 1  # shutdown waits for it, then commits its offset
                    try:
                        await self._consume_one(m)
                        self.offsets[mq] = m.queue_offset + 1
                        pq.consumed(m.queue_offset)
                    finally:
                        self._consuming -= 1
                if r.status == "OFFSET_ILLEGAL" or not r.messages:
                    self.offsets[mq] = r.next_begin_offset
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, BrokerError) as exc:
                log.warning("pull %s failed: %s", mq, exc)
                if await sleep_or(self._stop, 1.0):
                    return

    async def _consume_one(self, m: MessageExt) -> None:
        loop = asyncio.get_running_loop()
        queue_topic = m.topic  # the queue's (a retry topic's) name, before the view renames it
        view = original_view(m)
        phys_topic_msg = m
        t0 = time.monotonic()
        try:
            ok = await loop.run_in_executor(self.executor, self.listener, view)
        except Exception as exc:
            log.info("listener failed on %s: %s", m.msg_id, exc)
            ok = False
        self.stats.consumed(queue_topic, (time.monotonic() - t0) * 1000, ok is not False)
        while ok is False and self.orderly and not self._stop.is_set():
            # orderly: never skip ahead; retry the same message in place after a pause
            if await sleep_or(self._stop, self.orderly_retry_s):
                raise asyncio.CancelledError  # shutting down: leave the offset before it
            try:
                ok = await loop.run_in_executor(self.executor, self.listener, view)
            except Exception as exc:
                log.info("listener failed on %s again: %s", m.msg_id, exc)
                ok = False
        if ok is False and not self.orderly:
            while not self._stop.is_set():
                try:
                    await self.pc.send_back(phys_topic_msg, self.retry_delay_level,
                                            self.max_reconsume_times)
                    return
                except (ConnectionError, TimeoutError, BrokerError) as exc:
                    log.warning("send back failed: %s", exc)
                    await sleep_or(self._stop, 1.0)

    async def _commit_one(self, mq: MessageQueue) -> None:
        off = self.offsets.get(mq)
        if off is None or self._committed.get(mq) == off:
            return
        try:
            await self.pc.commit_offset(mq.topic, mq.queue_id, off)
            self._committed[mq] = off
        except (ConnectionError, TimeoutError, BrokerError) as exc:
            log.warning("commit %s failed: %s", mq, exc)

    async def commit(self) -> None:
        for mq in list(self.offsets):
            await self._commit_one(mq)

    async def shutdown(self) -> None:
        """Stop pulling, let the messages being consumed finish (up to ``shutdown_wait_s``),
        commit the offsets past them, then leave the group — as RocketMQ's shutdown persists
        the offsets after its consume threads ended, so nothing consumed is delivered again."""
        self._stop.set()
        deadline = time.monotonic() + self.shutdown_wait_s
        while self._consuming and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        for t in self._loops + list(self._tasks.values()):
            t.cancel()
        await asyncio.gather(*self._loops, *self._tasks.values(), return_exceptions=True)
        locked = list(self._tasks)
        self._tasks.clear()
        await self.commit()
        if self.orderly:
            await self._unlock(locked)
        for addr in await self.pc.instance.all_brokers(list(self.subscription)):
            try:
                await self.pc.instance.invoke(addr, RequestCode.UNREGISTER_CLIENT,
                                              {"clientID": self.client_id,
                                               "consumerGroup": self.group})
            except (ConnectionError, TimeoutError, BrokerError):
                pass
        self.executor.shutdown(wait=False)
        await self.pc.shutdown()


def allocate_average(queues: list[MessageQueue], client_ids: list[str],
                     me: str) -> list[MessageQueue]:
    """RocketMQ's ``AllocateMessageQueueAveragely``: contiguous, near-equal shares."""
    n, k = len(queues), len(client_ids)
    idx = client_ids.index(me)
    mod = n % k
    size = (n // k + 1 if idx < mod else n // k) if n > k else 1
    start = idx * size if mod > 0 and idx < mod else idx * size + mod
    rng = min(size, n - start)
    return [queues[(start + i) % n] for i in range(max(rng, 0))]


class PushConsumer:
    """Blocking facade: ``start()`` runs the loop in the background until ``shutdown()``."""

    def __init__(self, group: str, namesrv: str, subscription: Mapping[str, str],
                 listener: Listener, **kwargs) -> None:
        self._lt = LoopThread.shared()

        async def make() -> AsyncPushConsumer:
            return AsyncPushConsumer(group, namesrv, subscription, listener, **kwargs)
        self._impl = self._lt.run(make())

    @property
    def client_id(self) -> str:
        return self._impl.client_id

    @property
    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self._impl.offsets)

    def start(self) -> "PushConsumer":
        self._lt.run(self._impl.start())
        return self

    def shutdown(self) -> None:
        self._lt.run(self._impl.shutdown())

    def __enter__(self) -> "PushConsumer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
