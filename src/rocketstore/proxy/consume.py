"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and the
revive service: the 5.x "pop" consumption over the store (state: see ``pop``).

Theory of operation: a receive pops from the group's pop retry queue of the topic
(``%RETRY%<group>_<topic>``, as RocketMQ 5.3.3) and then
the topic's queues, each from the group's consumer offset (the queue's min offset for a group
that never consumed it), filtered by the tag expression or the SQL92 filter (the broker's
evaluator, as a 4.x SQL92 pull; see ``_sql_filter``), until the batch is full. Each queue
that yielded messages gets one checkpoint; the group's offset moves past what was read. When
nothing is there the receive long-polls on the broker's ``PullHoldService`` until a message
arrives on one of those queues or the polling time ends (MESSAGE_NOT_FOUND). The stream
answers with a status first, then each message with its receipt handle.

The pop itself, the checkpoints and the revive of what is not acked in time are the broker's
``PopService`` (``broker.services.pop``), shared with the remoting door (POP_MESSAGE, ...): a
message received here can be acked there and the other way round.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator

from ..broker.services.pop import PopService
from ..broker.state.filters import (ConsumerFilterData, compile_expression,
                                    not_supported)
from ..broker.state.topics import readable
from ..filter import SelectorSyntaxError
from ..format.message import PROPERTY_RETRY_TOPIC, MessageExt
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


def _topic_type_ok(topic: str) -> bool:
    return not topic.startswith((RETRY_PREFIX, DLQ_PREFIX))


class Consumption:
    def __init__(self, pieces: BrokerPieces, svc: PopService) -> None:
        self.p = pieces
        self.svc = svc
        self.pop: PopState = svc.pop
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

    def _pop_once(self, group: str, queues: list[tuple[str, int]], expr: Any,
                  invisible: int, batch: int, fifo: bool = False) -> tuple[list, list]:
        """Pop up to ``batch`` messages through the broker's pop service (blocking). Returns
        [(handle, message, attempt or None)] and the positions to long-poll on when empty."""
        found, positions = self.svc.pop_once(group, queues, expr, invisible, batch, fifo)
        return [(rh, m, attempt) for rh, m, attempt, _ck in found], positions

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
        queues = self.svc.queues(group, topic, fifo)
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
        old = self.p.store.look_message_by_offset(ck.pending.get(rh.offset, rh.commitlog_offset))
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

    # -- revive: the broker's pop service revives (``broker.services.pop``) -------------------
    def _put_copy(self, old: MessageExt, group: str, *, dlq: bool, max_times: int) -> None:
        self.svc.put_copy(old, group, dlq=dlq, max_times=max_times)

    def revive_due(self) -> int:
        return self.svc.revive_due()
