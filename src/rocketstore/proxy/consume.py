"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and the
revive service: the 5.x "pop" consumption over the store (state: see ``pop``).

Theory of operation: a receive pops from the group's retry queue (``%RETRY%<group>``) and then
the topic's queues, each from the group's consumer offset (the queue's min offset for a group
that never consumed it), filtered by the tag expression or the SQL92 filter (the broker's
evaluator, as a 4.x SQL92 pull; see ``_sql_filter``), until the batch is full. Each queue
that yielded messages gets one checkpoint; the group's offset moves past what was read. When
nothing is there the receive long-polls on the broker's ``PullHoldService`` until a message
arrives on one of those queues or the polling time ends (MESSAGE_NOT_FOUND). The stream
answers with a status first, then each message with its receipt handle.

``ReviveService`` wakes at the next invisible-time deadline (at least every
``revive_interval_s``) and revives what is due: a copy on ``%RETRY%<group>`` with
``reconsume_times + 1``, the same UNIQ_KEY and ``RETRY_TOPIC`` = the original topic, or — once the
message has been delivered ``retryMaxTimes + 1`` times (the group's subscription config;
the broker's ``maxReconsumeTimes`` without one) — a copy on ``%DLQ%<group>``.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, AsyncIterator

from ..broker.eventloop import cancel_and_wait
from ..broker.state.filters import (ConsumerFilterData, ExpressionMessageFilter, compile_expression,
                                    not_supported)
from ..broker.state.topics import ensure_topic
from ..broker.state.topics import readable
from ..filter import SelectorSyntaxError
from ..filter.bloom import BloomFilter
from ..format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_MAX_RECONSUME_TIMES,
                              PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME,
                              PROPERTY_RETRY_TOPIC, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                              Message, MessageExt)
from .convert import (PROPERTY_DLQ_ORIGIN_MESSAGE_ID, PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_POP_CK,
                      ValidationError, to_grpc_message)
from .pieces import BrokerPieces, check_group, check_topic
from .pop import RETRY_PREFIX, PopState, ReceiptHandle
from .protocol import duration_ms, pb, status, to_timestamp

log = logging.getLogger(__name__)
DLQ_PREFIX = "%DLQ%"
MAX_BATCH = 32
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_POLLING_MS = 20_000
_NO_BLOOM = BloomFilter(20, 32)  # without a filter registry: no record is skipped by bitmap
_MOVED = ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_MESSAGE")


def _topic_type_ok(topic: str) -> bool:
    return not topic.startswith((RETRY_PREFIX, DLQ_PREFIX))


class Consumption:
    def __init__(self, pieces: BrokerPieces, pop: PopState) -> None:
        self.p = pieces
        self.pop = pop
        self._group_locks: dict[str, threading.Lock] = {}
        self._rr = 0  # rotates the first queue a receive looks at
        self._compiled: dict[str, Any] = {}  # SQL92 expression -> compiled (receives repeat)

    # -- receive -----------------------------------------------------------------------------------
    def _validate_receive(self, req: Any) -> tuple[str, str, Any, int, int, bool]:
        group, topic = req.group.name, req.message_queue.topic.name
        check_group(group)
        check_topic(topic)
        tc = self.p.topics.get(topic)
        if tc is None:
            raise ValidationError(pb.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        if not readable(tc.perm):  # the broker's own check (as for a pull or a pop)
            raise ValidationError(pb.FORBIDDEN, f"the topic[{topic}] pulling message is forbidden")
        fifo = bool(getattr(self.p.group_config(group), "consume_message_orderly", False))
        f = req.filter_expression
        expr = f.expression.strip() or "*"
        if f.type != pb.SQL and any(ord(c) < 0x20 for c in expr):
            raise ValidationError(pb.ILLEGAL_FILTER_EXPRESSION, f"bad tag expression {expr!r}")
        invisible = duration_ms(req.invisible_duration) if req.HasField("invisible_duration") \
            else 30_000
        lo = self.p.config.grpc_min_invisible_time_ms
        if not lo <= invisible <= MAX_INVISIBLE_MS:
            raise ValidationError(pb.ILLEGAL_INVISIBLE_TIME,
                                  f"the invisible time {invisible} ms is out of range "
                                  f"[{lo}, {MAX_INVISIBLE_MS}]")
        batch = req.batch_size or MAX_BATCH
        if not 0 < batch <= MAX_BATCH:
            raise ValidationError(pb.BAD_REQUEST, f"batch size {batch} not in [1, {MAX_BATCH}]")
        if f.type == pb.SQL:
            return group, topic, self._sql_filter(group, topic, f.expression), invisible, \
                batch, fifo
        return group, topic, (None if expr == "*" else expr), invisible, batch, fifo

    def _sql_filter(self, group: str, topic: str, expression: str) -> ConsumerFilterData:
        """The SQL92 filter of a receive, refused as RocketMQ 5 refuses it: an empty expression
        by the proxy (ILLEGAL_FILTER_EXPRESSION); one that does not compile, or any while
        ``enablePropertyFilter`` is off, by the broker (SUBSCRIPTION_PARSE_FAILED / SYSTEM_ERROR),
        which the proxy's ``ResponseBuilder`` answers as INTERNAL_SERVER_ERROR. The group's
        registered filter (its Telemetry subscription) is used when it is the same expression:
        its bloom positions let ``enableCalcFilterBitMap`` bitmaps skip records unread."""
        if not expression.strip():
            raise ValidationError(pb.ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92")
        if not self.p.config.enable_property_filter:
            raise ValidationError(pb.INTERNAL_SERVER_ERROR, not_supported("SQL92"))
        filters = self.p.filters
        known = filters.get(topic, group) if filters is not None else None
        if known is not None and known.compiled is not None and \
                known.expression == expression and known.expression_type == "SQL92":
            return known
        compiled = self._compiled.get(expression)
        if compiled is None:
            try:
                compiled = compile_expression("SQL92", expression)
            except SelectorSyntaxError as exc:
                raise ValidationError(pb.INTERNAL_SERVER_ERROR,
                                      f"parse the consumer's subscription failed: {exc}") from None
            if len(self._compiled) >= 256:
                self._compiled.clear()
            self._compiled[expression] = compiled
        return ConsumerFilterData(group, topic, expression, "SQL92", compiled,
                                  born_time=int(time.time() * 1000))

    def _get(self, group: str, topic: str, qid: int, offset: int, n: int, expr: Any) -> Any:
        """Read a queue through the tag expression or SQL92 filter ``expr`` (blocking)."""
        if not isinstance(expr, ConsumerFilterData):
            return self.p.store.get_message(group, topic, qid, offset, n, expr)
        if topic.startswith(RETRY_PREFIX) and expr.bloom is not None:
            # bitmaps of the retry topic are not the group's: check each record's properties
            expr = ConsumerFilterData(expr.consumer_group, expr.topic, expr.expression,
                                      expr.expression_type, expr.compiled, expr.born_time)
        bloom = self.p.filters.bloom if self.p.filters is not None else _NO_BLOOM
        return self.p.store.get_message(group, topic, qid, offset, n, None,
                                        message_filter=ExpressionMessageFilter(expr, bloom))

    def _queues(self, group: str, topic: str, fifo: bool = False) -> list[tuple[str, int]]:
        """The group's retry queue, then every queue of the topic from a rotating start. As in
        the 5.x proxy, the queue named in a receive only picks the broker: a pop reads all of
        the broker's queues ("broker acting queue", id -1)."""
        tc = self.p.topics.get(topic)
        qs: list[tuple[str, int]] = []
        if not fifo:  # watched even before it exists: a revive creates it
            qs.append((RETRY_PREFIX + group, 0))
        n = tc.read_queue_nums
        self._rr = (self._rr + 1) % max(n, 1)
        qs.extend((topic, (self._rr + i) % n) for i in range(n))
        return qs

    def _pop_once(self, group: str, queues: list[tuple[str, int]], expr: Any,
                  invisible: int, batch: int, fifo: bool = False) -> tuple[list, list]:
        """Pop up to ``batch`` messages (blocking). Returns [(handle, message, attempt or
        None)] and the (topic, queue, offset) positions to long-poll on when empty."""
        store = self.p.store
        lock = self._group_locks.setdefault(group, threading.Lock())
        out: list[tuple[Any, MessageExt, int | None]] = []
        positions = []
        with lock:
            for topic, qid in queues:
                if len(out) >= batch:
                    break
                if fifo:
                    found, pos = self._pop_fifo(group, topic, qid, expr, invisible,
                                                batch - len(out))
                    out.extend(found)
                    if pos is not None:
                        positions.append(pos)
                    continue
                if self.p.topics.get(topic) is None:  # the retry topic, not created yet
                    positions.append((topic, qid, 0))
                    continue
                offset = self.p.offsets.query(group, topic, qid)
                if offset < 0:
                    offset = store.get_min_offset_in_queue(topic, qid)
                g = self._get(group, topic, qid, offset, batch - len(out), expr)
                msgs = g.messages if g.status.name == "FOUND" else []
                if not msgs:
                    if g.status.name in _MOVED and g.next_begin_offset != offset:
                        self.p.offsets.commit(group, topic, qid, g.next_begin_offset)
                        offset = g.next_begin_offset
                    positions.append((topic, qid, offset))
                    continue
                now = int(time.time() * 1000)
                ck = self.pop.checkpoint(group, topic, qid, now, invisible,
                                         [(m.queue_offset, m.commitlog_offset) for m in msgs])
                self.p.offsets.commit(group, topic, qid, g.next_begin_offset)
                out.extend((self.pop.handle(ck, m.queue_offset), m, None) for m in msgs)
        return out, positions

    def _pop_fifo(self, group: str, topic: str, qid: int, expr: Any, invisible: int,
                  room: int) -> tuple[list, tuple | None]:
        """An orderly pop of one queue (see ``pop``): nothing while the group's batch there is
        in flight; the batch's unacked messages again once it expired; else the next batch."""
        store = self.p.store
        now = int(time.time() * 1000)
        ck = self.pop.fifo_checkpoint(group, topic, qid)
        if ck is not None and ck.deadline > now:
            return [], None  # locked until acked or expired
        offset = self.p.offsets.query(group, topic, qid)
        if offset < 0:
            offset = store.get_min_offset_in_queue(topic, qid)
        attempt, skip, end = 1, set(), -1
        if ck is not None:  # expired: the same batch again, without what was acked
            attempt, skip, end = ck.attempt + 1, set(ck.acked), ck.end
            offset = min(offset, ck.start_offset)
        limit = room if end < 0 else max(end - offset, 1)
        g = self._get(group, topic, qid, offset, limit, expr)
        msgs = [m for m in g.messages if m.queue_offset not in skip] \
            if g.status.name == "FOUND" else []
        if not msgs:
            if ck is not None:  # nothing left of the expired batch: it is done
                for o in list(ck.pending):
                    self.pop.ack(ck, o)
            elif g.status.name in _MOVED and g.next_begin_offset != offset:
                self.p.offsets.commit(group, topic, qid, g.next_begin_offset)
                offset = g.next_begin_offset
            return [], (topic, qid, offset)
        new_end = end if end >= 0 else g.next_begin_offset
        max_times = self.p.max_reconsume_times(group)
        if attempt > max_times + 1:  # attempts used up: dead-letter the batch, move on
            for m in msgs:
                self._put_copy(m, group, dlq=True, max_times=max_times)
            for o in list(ck.pending) if ck is not None else ():
                self.pop.ack(ck, o)
            self.p.offsets.commit(group, topic, qid, max(new_end, offset))
            return [], (topic, qid, new_end)
        new = self.pop.checkpoint(group, topic, qid, now, invisible,
                                  [(m.queue_offset, m.commitlog_offset) for m in msgs],
                                  fifo=True, attempt=attempt, end=new_end, acked=skip)
        return [(self.pop.handle(new, m.queue_offset), m, attempt) for m in msgs], None

    def fifo_done(self, ck: Any) -> None:
        """Every message of a FIFO batch is acked: the group's offset moves past it."""
        if self.p.offsets.query(ck.group, ck.topic, ck.queue_id) < ck.end:
            self.p.offsets.commit(ck.group, ck.topic, ck.queue_id, ck.end)

    async def receive(self, req: Any, context: Any) -> AsyncIterator[Any]:
        try:
            group, topic, expr, invisible, batch, fifo = self._validate_receive(req)
        except ValidationError as exc:
            yield pb.ReceiveMessageResponse(status=status(exc.code, str(exc)))
            return
        polling = duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") \
            else MAX_POLLING_MS
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the client gives up
            polling = min(polling, max(0, int(remaining * 1000) - 500))
        deadline = time.monotonic() + min(polling, MAX_POLLING_MS) / 1000.0
        queues = self._queues(group, topic, fifo)
        while True:
            found, positions = await self.p.run(self._pop_once, group, queues, expr, invisible,
                                                batch, fifo)
            if found:
                break
            left = deadline - time.monotonic()
            if left <= 0 or self.p.hold.closed:
                yield pb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND,
                                                              "no new message"))
                return
            if not positions:  # every queue is locked by an in-flight FIFO batch
                await asyncio.sleep(min(left, 0.2))
                continue
            waits = [asyncio.ensure_future(self.p.hold.wait(t, q, o, left))
                     for t, q, o in positions]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        yield pb.ReceiveMessageResponse(status=status(pb.OK))
        for rh, m, attempt in found:
            shown = m.properties.get(PROPERTY_RETRY_TOPIC, topic) \
                if m.topic.startswith(RETRY_PREFIX) else m.topic
            yield pb.ReceiveMessageResponse(message=to_grpc_message(
                m, topic=shown, receipt_handle=rh.encode(), invisible_ms=invisible,
                attempt=attempt))
        yield pb.ReceiveMessageResponse(delivery_timestamp=to_timestamp(int(time.time() * 1000)))

    # -- ack, change invisible duration, forward to DLQ ------------------------------------------
    def _resolve(self, group: str, topic: str, handle: str):
        try:
            rh = ReceiptHandle.decode(handle)
        except ValueError as exc:
            raise ValidationError(pb.INVALID_RECEIPT_HANDLE, str(exc)) from None
        if rh.deadline <= int(time.time() * 1000):
            raise ValidationError(pb.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
        ck = self.pop.find(group, topic, rh)
        if ck is None:
            raise ValidationError(pb.INVALID_RECEIPT_HANDLE,
                                  "receipt handle is not in flight (acked or expired)")
        return rh, ck

    def _ack_many(self, group: str, topic: str, handles: list[str]) -> list:
        """Ack every handle; one ack record per checkpoint. A status per handle."""
        results: list = []
        by_ck: dict = {}
        for handle in handles:
            try:
                rh, ck = self._resolve(group, topic, handle)
            except ValidationError as exc:
                results.append(status(exc.code, str(exc)))
                continue
            offsets = by_ck.setdefault(id(ck), (ck, []))[1]
            if rh.offset in offsets:
                results.append(status(pb.INVALID_RECEIPT_HANDLE, "acked twice in one request"))
                continue
            offsets.append(rh.offset)
            results.append(status(pb.OK))
        for ck, offsets in by_ck.values():
            self.pop.ack(ck, offsets)
        return results

    async def ack(self, req: Any) -> Any:
        group, topic = req.group.name, req.topic.name
        try:
            check_group(group)
            check_topic(topic)
        except ValidationError as exc:
            return pb.AckMessageResponse(status=status(exc.code, str(exc)))
        handles = [e.receipt_handle for e in req.entries]
        results = await self.p.run(self._ack_many, group, topic, handles)
        entries = [pb.AckMessageResultEntry(message_id=e.message_id,
                                            receipt_handle=e.receipt_handle, status=st)
                   for e, st in zip(req.entries, results)]
        codes = {e.status.code for e in entries}
        overall = status(codes.pop()) if len(codes) == 1 else status(pb.MULTIPLE_RESULTS)
        if len(entries) == 1:
            overall = entries[0].status
        return pb.AckMessageResponse(status=overall, entries=entries)

    def _change(self, group: str, topic: str, handle: str, invisible: int) -> str:
        rh, ck = self._resolve(group, topic, handle)
        return self.pop.change_invisible(ck, rh.offset, invisible).encode()

    async def change_invisible(self, req: Any) -> Any:
        group, topic = req.group.name, req.topic.name
        invisible = duration_ms(req.invisible_duration)
        try:
            check_group(group)
            check_topic(topic)
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise ValidationError(pb.ILLEGAL_INVISIBLE_TIME,
                                      f"the invisible time {invisible} ms is out of range")
            handle = await self.p.run(self._change, group, topic, req.receipt_handle, invisible)
        except ValidationError as exc:
            return pb.ChangeInvisibleDurationResponse(status=status(exc.code, str(exc)))
        return pb.ChangeInvisibleDurationResponse(status=status(pb.OK), receipt_handle=handle)

    def _forward(self, group: str, topic: str, handle: str, max_attempts: int) -> None:
        rh, ck = self._resolve(group, topic, handle)
        old = self.p.store.look_message_by_offset(rh.commitlog_offset)
        if old is None:
            raise ValidationError(pb.MESSAGE_NOT_FOUND,
                                  f"message at commitlog offset {rh.commitlog_offset} is gone")
        self._put_copy(old, group, dlq=True, max_times=max(max_attempts - 1, 0))
        self.pop.ack(ck, rh.offset)

    async def forward_to_dlq(self, req: Any) -> Any:
        group, topic = req.group.name, req.topic.name
        try:
            check_group(group)
            check_topic(topic)
            await self.p.run(self._forward, group, topic, req.receipt_handle,
                             req.max_delivery_attempts)
        except ValidationError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=status(exc.code, str(exc)))
        return pb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.OK))

    # -- revive ------------------------------------------------------------------------------------
    def _put_copy(self, old: MessageExt, group: str, *, dlq: bool, max_times: int) -> None:
        """Store ``old`` again on the group's retry or dead-letter topic (blocking)."""
        props = {k: v for k, v in old.properties.items()
                 if k not in (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_POP_CK)}
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
        target = (DLQ_PREFIX if dlq else RETRY_PREFIX) + group
        ensure_topic(self.p.topics, self.p.config, target, 1)
        msg = Message(topic=target, body=old.body, properties=props, queue_id=0, flag=old.flag,
                      sys_flag=old.sys_flag, born_timestamp=old.born_timestamp,
                      born_host=old.born_host, reconsume_times=times)
        r = self.p.put_message(msg)
        if r.status.name not in ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
                                 "SLAVE_NOT_AVAILABLE"):
            raise RuntimeError(f"cannot store a copy on {target}: {r.status.name}")

    def revive_due(self) -> int:
        """Revive every pending message whose invisible time passed (blocking); returns how
        many."""
        n = 0
        for ck, offset, clog in self.pop.due():
            max_times = self.p.max_reconsume_times(ck.group)
            old = self.p.store.look_message_by_offset(clog)
            if old is not None:
                dlq = old.reconsume_times >= max_times  # delivered max_times + 1 times
                self._put_copy(old, ck.group, dlq=dlq, max_times=max_times)
            else:
                log.warning("pop revive: %s queue %s offset %s is no longer in the commitlog",
                            ck.topic, ck.queue_id, offset)
            self.pop.ack(ck, offset)
            n += 1
        return n


class ReviveService:
    """Revives expired pop checkpoints; commits the revive offset."""

    def __init__(self, consumption: Consumption, interval_s: float = 0.2) -> None:
        self.consumption = consumption
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pop-revive")

    async def _run(self) -> None:
        run = self.consumption.p.run
        last_commit = 0.0
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await run(self.consumption.revive_due)
                if time.monotonic() - last_commit >= 1.0:
                    await run(self.consumption.pop.commit_revive_offset)
                    last_commit = time.monotonic()
            except Exception:
                log.exception("pop revive failed")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.consumption.p.run(self.consumption.pop.commit_revive_offset)
