"""``PopService``: RocketMQ 5's "pop" consumption over the store, one for the whole broker.

Both doors use it: the remoting processors (``processors.pop``: POP_MESSAGE, ACK_MESSAGE,
BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION, POLLING_INFO) and the gRPC proxy
(``rocketstore.proxy.consume``: ReceiveMessage, AckMessage, ...). A message popped through one
door can be acked through the other; there is one set of checkpoints (``pop_state``), one revive
log, one revive task.

Theory of operation: a pop reads the group's pop retry queue of the topic
(``%RETRY%<group>_<topic>``, RocketMQ 5.3.3's ``KeyBuilder.buildPopRetryTopicV1``) and then the
topic's queues, each from the group's consumer offset (the queue's min offset for a group that
never consumed it), through the tag expression or SQL92 filter, until the batch is full. Each
queue that yielded messages gets one checkpoint (all with the one pop time of the request) and
the group's offset moves past what was read. An orderly pop (``fifo``) locks a queue for the
group until its batch is acked or expires (see ``pop_state``). What to long-poll on when nothing
was found comes back as ``positions`` ((topic, queue id, offset)); the caller waits on the
broker's ``PullHoldService``.

The revive task wakes every ``revive_interval_s`` and revives what is due: a copy on
``%RETRY%<group>_<topic>`` (for a retry: the retry topic it was read from) with
``reconsume_times + 1``, the same UNIQ_KEY and ``RETRY_TOPIC`` = the original topic, or — once delivered
``retryMaxTimes + 1`` times — a copy on ``%DLQ%<group>``; then one ack record marks it done, so a
message is revived once per invisible time (RocketMQ's #7724 / #8479 revive twice; here a due
message leaves the live set under the state's lock before the next scan can see it). Records live
on ``rmq_sys_REVIVE_LOG_<cluster>`` and are replayed at ``open()``, so checkpoints survive a
SIGKILL. Two crash windows are closed at ``open()``: a group offset the pop moved but the crash did
not persist is moved past the replayed checkpoints (nothing popped is popped again as new), and a
revive copied but not yet marked — its copy carries ``POP_REVIVE_KEY``, the checkpoint entry — is
marked instead of copied again.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any, Callable

from ...format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_MAX_RECONSUME_TIMES,
                               PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME,
                               PROPERTY_RETRY_TOPIC, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                               Message, MessageExt)
from ...filter.bloom import BloomFilter
from ..eventloop import cancel_and_wait
from ..state.filters import ConsumerFilterData, ExpressionMessageFilter
from ..state.subgroups import max_reconsume_times
from ..state.topics import ensure_topic
from .pop_state import (CK_TAG, REVIVE_GROUP, RETRY_PREFIX, Checkpoint, PopState,
                        pop_retry_topic, revive_topic)

log = logging.getLogger(__name__)
DLQ_PREFIX = "%DLQ%"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
# ours: which checkpoint entry a revive copy was made for ("group topic queue start poptime
# offset"); a restart finds copies whose ack record a crash cut off and does not copy again
PROPERTY_POP_REVIVE_KEY = "POP_REVIVE_KEY"
_NO_BLOOM = BloomFilter(20, 32)  # without a filter registry: no record is skipped by bitmap
_MOVED = ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_MESSAGE")
_STORED = ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")

# one popped message: (its handle, the message, the FIFO attempt or None, its checkpoint)
Popped = tuple[Any, MessageExt, "int | None", Checkpoint]


def _revive_key(ck: Checkpoint, offset: int) -> str:
    return f"{ck.group} {ck.topic} {ck.queue_id} {ck.start_offset} {ck.pop_time} {offset}"


def _note_popped(popped: dict, body: bytes) -> None:
    try:
        d = json.loads(body)
        if d.get("f") or not d.get("o"):
            return  # an orderly batch keeps the offset at its start until it is done
        key = (str(d["g"]), str(d["t"]), int(d["q"]))
        popped[key] = max(popped.get(key, -1), max(int(o) for o, _c in d["o"]) + 1)
    except (ValueError, KeyError, TypeError):
        return


class PopService:
    def __init__(self, *, store: Any, topics: Any, offsets: Any, config: Any,
                 put_message: Callable[[Message], Any], run: Callable[..., Any],
                 subgroups: Any = None, filters: Any = None,
                 revive_interval_s: float = 0.2) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.config = config
        self.subgroups = subgroups
        self.filters = filters
        self.put_message = put_message
        self.run = run
        self.revive_interval_s = revive_interval_s
        self.revive_topic = revive_topic(config.cluster_name)
        self.pop = PopState(config.broker_name, self._write_revive, self._commit_revive,
                            on_fifo_done=self.fifo_done)
        self._group_locks: dict[str, threading.Lock] = {}
        self._rr = 0  # rotates the first queue a pop looks at
        self._task: asyncio.Task | None = None
        self.revived = 0  # messages revived since start (tests and metrics read it)

    # -- the revive log, through the store -------------------------------------------------------
    def _write_revive(self, tags: str, body: bytes) -> int:
        r = self.put_message(Message(topic=self.revive_topic, body=body, tags=tags, queue_id=0))
        if r.status.name not in _STORED:
            raise RuntimeError(f"cannot write the pop revive log: {r.status.name}")
        return r.queue_offset

    def _commit_revive(self, offset: int) -> None:
        if self.offsets.query(REVIVE_GROUP, self.revive_topic, 0) != offset:  # idle: no write
            self.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, offset)

    def open(self) -> int:
        """Create the revive topic and replay it (blocking); returns the open checkpoints."""
        if self.topics.get(self.revive_topic) is None:
            self.topics.create(self.revive_topic, 1)
        store = self.store
        store.wait_dispatched(timeout=30)
        offset = max(self.offsets.query(REVIVE_GROUP, self.revive_topic, 0),
                     store.get_min_offset_in_queue(self.revive_topic, 0))

        popped: dict[tuple[str, str, int], int] = {}  # where each unordered pop left off

        def records():
            nonlocal offset
            while True:
                g = store.get_message(REVIVE_GROUP, self.revive_topic, 0, offset, 256)
                if g.status.name != "FOUND" or not g.messages:
                    return
                for m in g.messages:
                    if m.tags == CK_TAG:
                        _note_popped(popped, m.body)
                    yield m.queue_offset, m.tags or "", m.body
                offset = g.next_begin_offset
        n = self.pop.replay(records())
        settled = self._settle_revived()
        if settled:
            log.info("pop: %d revives a crash left unmarked were already copied", settled)
        # a crash may lose the group offsets a pop moved (they are persisted every few
        # seconds) but never its checkpoint: what a checkpoint holds is not popped again
        for (group, topic, qid), end in popped.items():
            if self.offsets.query(group, topic, qid) < end:
                self.offsets.commit(group, topic, qid, end)
        if n:
            log.info("pop: %d open checkpoints recovered from %s", n, self.revive_topic)
        return n

    def _settle_revived(self) -> int:
        """Mark done what was revived but not marked before a crash (blocking, at open): every
        due entry whose copy is on the group's retry or dead-letter queue already."""
        now = int(time.time() * 1000)
        due: dict[tuple[str, str], list[tuple[Checkpoint, int]]] = {}
        for ck, offset, _clog in self.pop.due(now):
            key = (ck.group, pop_retry_topic(ck.group, ck.topic))
            due.setdefault(key, []).append((ck, offset))
        n = 0
        for (group, retry_topic), entries in due.items():
            wanted = {_revive_key(ck, o): (ck, o) for ck, o in entries}
            since = min(ck.pop_time for ck, _o in entries)
            for target in (retry_topic, DLQ_PREFIX + group):
                if self.topics.get(target) is None:
                    continue
                at = max(self.store.get_offset_in_queue_by_time(target, 0, since) - 1, 0)
                while wanted:
                    g = self.store.get_message(REVIVE_GROUP, target, 0, at, 256)
                    if g.status.name != "FOUND" or not g.messages:
                        break
                    for m in g.messages:
                        hit = wanted.pop(m.properties.get(PROPERTY_POP_REVIVE_KEY, ""), None)
                        if hit is not None:
                            self.pop.ack(hit[0], hit[1])
                            n += 1
                    at = g.next_begin_offset
        return n

    # -- group settings --------------------------------------------------------------------------
    def max_reconsume_times(self, group: str) -> int:
        """How often a message of ``group`` is retried (``subgroups.max_reconsume_times``)."""
        return max_reconsume_times(self.subgroups, group, self.config.max_reconsume_times)

    # -- pop -------------------------------------------------------------------------------------
    def get(self, group: str, topic: str, qid: int, offset: int, n: int, expr: Any) -> Any:
        """Read a queue through the tag expression or SQL92 filter ``expr`` (blocking)."""
        if not isinstance(expr, ConsumerFilterData):
            return self.store.get_message(group, topic, qid, offset, n, expr)
        if topic.startswith(RETRY_PREFIX) and expr.bloom is not None:
            # bitmaps of the retry topic are not the group's: check each record's properties
            expr = ConsumerFilterData(expr.consumer_group, expr.topic, expr.expression,
                                      expr.expression_type, expr.compiled, expr.born_time)
        bloom = self.filters.bloom if self.filters is not None else _NO_BLOOM
        return self.store.get_message(group, topic, qid, offset, n, None,
                                      message_filter=ExpressionMessageFilter(expr, bloom))

    def queues(self, group: str, topic: str, fifo: bool = False,
               queue_id: int = -1) -> list[tuple[str, int]]:
        """The group's retry queue, then the topic's queues from a rotating start (all of them
        for ``queue_id`` -1, RocketMQ's "any queue" pop; else that one)."""
        tc = self.topics.get(topic)
        qs: list[tuple[str, int]] = []
        if not fifo:  # watched even before it exists: a revive creates it
            qs.append((pop_retry_topic(group, topic), 0))
        if queue_id >= 0:
            qs.append((topic, queue_id))
            return qs
        n = tc.read_queue_nums
        self._rr = (self._rr + 1) % max(n, 1)
        qs.extend((topic, (self._rr + i) % n) for i in range(n))
        return qs

    def pop_once(self, group: str, queues: list[tuple[str, int]], expr: Any, invisible: int,
                 batch: int, fifo: bool = False, pop_time: int | None = None
                 ) -> tuple[list[Popped], list[tuple[str, int, int]]]:
        """Pop up to ``batch`` messages (blocking). Returns what was popped and the (topic,
        queue, offset) positions to long-poll on when nothing was."""
        store = self.store
        now = int(time.time() * 1000) if pop_time is None else pop_time
        lock = self._group_locks.setdefault(group, threading.Lock())
        out: list[Popped] = []
        positions = []
        with lock:
            for topic, qid in queues:
                if len(out) >= batch:
                    break
                if fifo:
                    found, pos = self._pop_fifo(group, topic, qid, expr, invisible,
                                                batch - len(out), now)
                    out.extend(found)
                    if pos is not None:
                        positions.append(pos)
                    continue
                if self.topics.get(topic) is None:  # the retry topic, not created yet
                    positions.append((topic, qid, 0))
                    continue
                offset = self.offsets.query(group, topic, qid)
                if offset < 0:
                    offset = store.get_min_offset_in_queue(topic, qid)
                g = self.get(group, topic, qid, offset, batch - len(out), expr)
                msgs = g.messages if g.status.name == "FOUND" else []
                if not msgs:
                    if g.status.name in _MOVED and g.next_begin_offset != offset:
                        self.offsets.commit(group, topic, qid, g.next_begin_offset)
                        offset = g.next_begin_offset
                    positions.append((topic, qid, offset))
                    continue
                ck = self.pop.checkpoint(group, topic, qid, now, invisible,
                                         [(m.queue_offset, m.commitlog_offset) for m in msgs])
                self.offsets.commit(group, topic, qid, g.next_begin_offset)
                out.extend((self.pop.handle(ck, m.queue_offset), m, None, ck) for m in msgs)
        return out, positions

    def _pop_fifo(self, group: str, topic: str, qid: int, expr: Any, invisible: int,
                  room: int, now: int) -> tuple[list[Popped], tuple | None]:
        """An orderly pop of one queue (see ``pop_state``): nothing while the group's batch
        there is in flight; the batch's unacked messages again once it expired; else the next
        batch."""
        store = self.store
        ck = self.pop.fifo_checkpoint(group, topic, qid)
        if ck is not None and ck.deadline > now:
            return [], None  # locked until acked or expired
        offset = self.offsets.query(group, topic, qid)
        if offset < 0:
            offset = store.get_min_offset_in_queue(topic, qid)
        attempt, skip, end = 1, set(), -1
        if ck is not None:  # expired: the same batch again, without what was acked
            attempt, skip, end = ck.attempt + 1, set(ck.acked), ck.end
            offset = min(offset, ck.start_offset)
        limit = room if end < 0 else max(end - offset, 1)
        g = self.get(group, topic, qid, offset, limit, expr)
        msgs = [m for m in g.messages if m.queue_offset not in skip] \
            if g.status.name == "FOUND" else []
        if not msgs:
            if ck is not None:  # nothing left of the expired batch: it is done
                for o in list(ck.pending):
                    self.pop.ack(ck, o)
            elif g.status.name in _MOVED and g.next_begin_offset != offset:
                self.offsets.commit(group, topic, qid, g.next_begin_offset)
                offset = g.next_begin_offset
            return [], (topic, qid, offset)
        new_end = end if end >= 0 else g.next_begin_offset
        max_times = self.max_reconsume_times(group)
        if attempt > max_times + 1:  # attempts used up: dead-letter the batch, move on
            for m in msgs:
                self.put_copy(m, group, dlq=True, max_times=max_times)
            for o in list(ck.pending) if ck is not None else ():
                self.pop.ack(ck, o)
            self.offsets.commit(group, topic, qid, max(new_end, offset))
            return [], (topic, qid, new_end)
        new = self.pop.checkpoint(group, topic, qid, now, invisible,
                                  [(m.queue_offset, m.commitlog_offset) for m in msgs],
                                  fifo=True, attempt=attempt, end=new_end, acked=skip)
        return [(self.pop.handle(new, m.queue_offset), m, attempt, new) for m in msgs], None

    def fifo_done(self, ck: Checkpoint) -> None:
        """Every message of a FIFO batch is acked: the group's offset moves past it."""
        if self.offsets.query(ck.group, ck.topic, ck.queue_id) < ck.end:
            self.offsets.commit(ck.group, ck.topic, ck.queue_id, ck.end)

    def has_message(self, group: str, queues: list[tuple[str, int]], fifo: bool,
                    positions: list[tuple[str, int, int]] | None = None) -> bool:
        """Whether a pop of ``queues`` would find something now (NOTIFICATION; blocking).
        When not, ``positions`` gets the (topic, queue, offset) to long-poll on, as
        ``pop_once`` gives them (none for a queue an orderly batch holds)."""
        now = int(time.time() * 1000)
        for topic, qid in queues:
            if self.topics.get(topic) is None:
                if positions is not None:  # the retry topic, not created yet
                    positions.append((topic, qid, 0))
                continue
            if fifo:
                ck = self.pop.fifo_checkpoint(group, topic, qid)
                if ck is not None:
                    if ck.deadline <= now:
                        return True
                    continue
            offset = self.offsets.query(group, topic, qid)
            if offset < 0:
                offset = self.store.get_min_offset_in_queue(topic, qid)
            if self.store.get_max_offset_in_queue(topic, qid) > offset:
                return True
            if positions is not None:
                positions.append((topic, qid, offset))
        return False

    # -- revive ------------------------------------------------------------------------------------
    def put_copy(self, old: MessageExt, group: str, *, dlq: bool, max_times: int,
                 revive_key: str | None = None) -> None:
        """Store ``old`` again on the group's retry or dead-letter topic (blocking)."""
        props = {k: v for k, v in old.properties.items()
                 if k not in (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_POP_CK, PROPERTY_POP_REVIVE_KEY)}
        if revive_key is not None:
            props[PROPERTY_POP_REVIVE_KEY] = revive_key
        origin_topic = props.get(PROPERTY_RETRY_TOPIC) or old.topic
        props[PROPERTY_RETRY_TOPIC] = origin_topic
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or old.msg_id
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, old.msg_id)
        times = old.reconsume_times + (0 if dlq else 1)
        props[PROPERTY_RECONSUME_TIME] = str(times)
        props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
        if dlq:
            props[PROPERTY_DLQ_ORIGIN_TOPIC] = origin_topic
            props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = uniq
        target = DLQ_PREFIX + group if dlq else pop_retry_topic(group, old.topic)
        ensure_topic(self.topics, self.config, target, 1)
        msg = Message(topic=target, body=old.body, properties=props, queue_id=0, flag=old.flag,
                      sys_flag=old.sys_flag, born_timestamp=old.born_timestamp,
                      born_host=old.born_host, reconsume_times=times)
        r = self.put_message(msg)
        if r.status.name not in _STORED:
            raise RuntimeError(f"cannot store a copy on {target}: {r.status.name}")

    def revive_due(self) -> int:
        """Revive every pending message whose invisible time passed (blocking); returns how
        many."""
        n = 0
        for ck, offset, clog in self.pop.due():
            max_times = self.max_reconsume_times(ck.group)
            old = self.store.look_message_by_offset(clog)
            if old is not None:
                dlq = old.reconsume_times >= max_times  # delivered max_times + 1 times
                self.put_copy(old, ck.group, dlq=dlq, max_times=max_times,
                              revive_key=_revive_key(ck, offset))
            else:
                log.warning("pop revive: %s queue %s offset %s is no longer in the commitlog",
                            ck.topic, ck.queue_id, offset)
            self.pop.ack(ck, offset)
            n += 1
        self.revived += n
        return n

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the revive task on the running loop (call after ``open``)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._revive_loop(),
                                                                name="pop-revive")

    async def _revive_loop(self) -> None:
        last_commit = 0.0
        while True:
            await asyncio.sleep(self.revive_interval_s)
            try:
                await self.run(self.revive_due)
                if time.monotonic() - last_commit >= 1.0:
                    await self.run(self.pop.commit_revive_offset)
                    last_commit = time.monotonic()
            except Exception:
                log.exception("pop revive failed")

    async def stop(self) -> None:
        if self._task is None:
            return
        await cancel_and_wait(self._task)
        self._task = None
        await self.run(self.pop.commit_revive_offset)
