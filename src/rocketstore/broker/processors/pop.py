"""RocketMQ 5's pop consumption over remoting: POP_MESSAGE (200050), ACK_MESSAGE (200051),
BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054),
POLLING_INFO (200055) and PEEK_MESSAGE (200052), with 5.3.3's headers, answers and codes, over
the broker's one ``PopService`` (the gRPC door's state too).

Theory of operation. POP_MESSAGE pops from the group's retry queue and the topic's queues
(``queueId`` -1: all of them) under one pop time; when nothing is there it long-polls on the
broker's ``PullHoldService`` for up to ``pollTime`` and then answers POLLING_TIMEOUT. A found
answer carries RocketMQ's response header — ``popTime``, ``invisibleTime``, ``reviveQid`` (0, or
999 for an orderly pop), ``restNum``, ``startOffsetInfo`` / ``msgOffsetInfo`` (``"<retry> <queue>
<value>"`` joined by ``;``, retry "0" for the topic, "1" for its retry queue), ``orderCountInfo``
for orderly pops (``"<retry> qo<queue>%<offset> <times consumed before>"``) — from which the
client builds each message's receipt handle (``extraInfo``, see ``services.pop_state``). The body
is the stored records one after another; a record read from the retry queue is re-encoded with
the request's topic and its ``POP_CK`` property already set, as RocketMQ's broker does.

ACK_MESSAGE acks the message at ``offset`` of the checkpoint ``extraInfo`` names: acking what is
not in flight (acked, revived, never popped, another group's) answers SUCCESS and changes nothing,
as RocketMQ's broker (it writes an ack that matches no checkpoint), so nothing is acked twice.
Out of range: MESSAGE_ILLEGAL (queue id), NO_MESSAGE (offset outside the queue). BATCH_ACK_MESSAGE
takes RocketMQ's ``BatchAckMessageRequestBody`` (``acks``: ``c`` group, ``t`` topic, ``r`` retry,
``so`` start offset, ``q`` queue, ``rq`` revive queue, ``pt`` pop time, ``it`` invisible time,
``b`` the acked offsets as a base64 ``java.util.BitSet``). CHANGE_MESSAGE_INVISIBLETIME makes a
new checkpoint for the message, invisible from now, and acks it in the old one; it answers the
new ``popTime``, ``invisibleTime`` and ``reviveQid``.

Cost: each request makes one trip off the event loop (a POP_MESSAGE that found messages pops and
builds its answer in the same trip). ACK_MESSAGEs are settled in rounds: those that arrive
while a round is in the store wait for the next, and a round writes one ack record per
checkpoint for all of its offsets — RocketMQ's proxy acks a received batch message by message,
all at once, and this makes those 32 requests a few records and one trip, as one
BATCH_ACK_MESSAGE would be.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any

from ...filter import SelectorSyntaxError
from ...format.message import record_bytes
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ..services.pop import PROPERTY_POP_CK
from ..services.pop_state import (ORDER_REVIVE_QUEUE, RETRY_PREFIX, TOPIC_TYPE_NORMAL,
                                  TOPIC_TYPE_RETRY, ReceiptHandle, pop_retry_topic)
from ..state.filters import ConsumerFilterData, compile_expression
from .pull import topic_refusal

if TYPE_CHECKING:
    from ..contexts import PopContext

MAX_POP_NUMS = 32
MAX_POLL_MS = 60_000  # a pop held longer than this is cut short (the client's own timeout rules)
TIMEOUT_TOO_MUCH_MS = 500  # PopMessageRequestHeader.isTimeoutTooMuch


def _stored_topic(topic: str, group: str, rh: ReceiptHandle) -> str:
    """Where the acked message sits: RocketMQ 5's clients name the pop retry topic
    ``%RETRY%<group>_<topic>`` themselves (``ExtraInfoUtil.getRealTopic``); a handle marked retry
    with the user's topic means the same."""
    if topic.startswith(RETRY_PREFIX) or rh.topic_type == TOPIC_TYPE_NORMAL:
        return topic
    return pop_retry_topic(group, topic)


def _retry_mark(topic: str) -> str:
    return TOPIC_TYPE_RETRY if topic.startswith(RETRY_PREFIX) else TOPIC_TYPE_NORMAL


def _check_queue(ctx: PopContext, cmd: RemotingCommand, topic: str, queue_id: int,
                 bad_queue_code: int) -> RemotingCommand | None:
    tc = ctx.topics.get(topic)
    refused = topic_refusal(cmd, topic, tc)
    if refused is not None:
        return refused
    if queue_id >= tc.read_queue_nums or (queue_id < 0 and bad_queue_code != -1):
        return cmd.response(bad_queue_code if bad_queue_code != -1 else
                            ResponseCode.INVALID_PARAMETER,
                            remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
    return None


def _group_refusal(ctx: PopContext, cmd: RemotingCommand, group: str) -> RemotingCommand | None:
    cfg = ctx.subgroups.ensure(group) if ctx.subgroups is not None else None
    if ctx.subgroups is not None and cfg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                            remark=f"subscription group [{group}] does not exist")
    if cfg is not None and not cfg.consume_enable:
        return cmd.response(ResponseCode.NO_PERMISSION,
                            remark=f"subscription group no permission, {group}")
    return None


def _filter(group: str, topic: str, exp_type: str | None, exp: str | None) -> Any:
    """The pop's filter: None (all), a tag expression, or a compiled SQL92 filter."""
    exp = (exp or "").strip()
    if not exp or exp == "*":
        return None
    if (exp_type or "TAG").upper() == "SQL92":
        return ConsumerFilterData(group, topic, exp, "SQL92", compile_expression("SQL92", exp),
                                  born_time=int(time.time() * 1000))
    return exp


def _is_fifo(ctx: PopContext, group: str, order: bool) -> bool:
    if order:
        return True
    cfg = ctx.subgroups.get(group) if ctx.subgroups is not None else None
    return bool(getattr(cfg, "consume_message_orderly", False))


def _read_refusal(ctx: PopContext, cmd: RemotingCommand, group: str, topic: str,
                  queue_id: int) -> RemotingCommand | None:
    """What POP_MESSAGE and PEEK_MESSAGE refuse before reading, in RocketMQ 5.3.3's order (its
    pop answers the peek remark for an unreadable topic): a missing topic, a topic without read
    permission, a queue id out of range (-1: every queue), then the group; None to go on."""
    refused = topic_refusal(cmd, topic, ctx.topics.get(topic), "peeking")
    if refused is None and queue_id >= 0:
        refused = _check_queue(ctx, cmd, topic, queue_id, -1)
    return refused if refused is not None else _group_refusal(ctx, cmd, group)


# -- POP_MESSAGE --------------------------------------------------------------------------------
async def pop(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    max_nums = cmd.require_int("maxMsgNums")
    invisible = cmd.require_int("invisibleTime")
    poll_ms = cmd.get_int("pollTime", 0) or 0
    born = cmd.get_int("bornTime", 0) or 0
    order = cmd.get_bool("order")
    now = int(time.time() * 1000)
    if born > 0 and now - born - poll_ms > TIMEOUT_TOO_MUCH_MS:
        return cmd.response(ResponseCode.POLLING_TIMEOUT,
                            remark=f"the broker[{ctx.config.host}] pop message is timeout too much")
    if max_nums > MAX_POP_NUMS:
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            remark=f"the broker[{ctx.config.host}] pop message's num is greater "
                                   f"than 32")
    refused = _read_refusal(ctx, cmd, group, topic, queue_id)
    if refused is not None:
        return refused
    try:
        expr = _filter(group, topic, cmd.get_str("expType"), cmd.get_str("exp"))
    except (SelectorSyntaxError, ValueError):
        return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                            remark="parse the consumer's subscription failed")
    fifo = _is_fifo(ctx, group, order)
    svc = ctx.service
    queues = svc.queues(group, topic, fifo, queue_id)
    deadline = time.monotonic() + min(max(poll_ms, 0), MAX_POLL_MS) / 1000.0
    key = (topic, group, queue_id)
    pop_time = now
    while True:
        found, positions = await ctx.run(_pop_found, ctx, cmd, topic, queues, group, expr,
                                         invisible, max(max_nums, 1), fifo, pop_time)
        if found is not None:
            return found
        left = deadline - time.monotonic()
        if left <= 0 or ctx.hold.closed:
            return cmd.response(ResponseCode.POLLING_TIMEOUT, {
                "popTime": pop_time, "invisibleTime": invisible,
                "reviveQid": ORDER_REVIVE_QUEUE if fifo else 0, "restNum": 0,
                "startOffsetInfo": "", "msgOffsetInfo": ""}, remark="NO_MESSAGE_IN_QUEUE")
        ctx.polling[key] = ctx.polling.get(key, 0) + 1
        try:
            await _hold(ctx, positions, left, fifo)
        finally:
            ctx.polling[key] -= 1
            if not ctx.polling[key]:
                del ctx.polling[key]
        pop_time = int(time.time() * 1000)


async def _hold(ctx: PopContext, positions: list, left: float, fifo: bool) -> None:
    """Long-poll a pop or NOTIFICATION that found nothing: until a message arrives at one of
    ``positions`` ((topic, queue, offset)) or ``left`` seconds pass; an orderly pop also
    rechecks every 0.2 s, when a batch in flight holds a queue (its lock expires unannounced)."""
    if not positions:  # every queue is locked by an in-flight orderly batch
        await asyncio.sleep(min(left, 0.2))
        return
    waits = [asyncio.ensure_future(ctx.hold.wait(t, q, o, left)) for t, q, o in positions]
    if fifo:
        waits.append(asyncio.ensure_future(asyncio.sleep(min(left, 0.2))))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _pop_found(ctx: PopContext, cmd: RemotingCommand, topic: str, queues: list, group: str,
               expr: Any, invisible: int, batch: int, fifo: bool, pop_time: int
               ) -> tuple[RemotingCommand | None, list]:
    """One pop and, when it found messages, its FOUND answer — one trip off the event loop
    (blocking); else (None, the positions to long-poll on)."""
    found, positions = ctx.service.pop_once(group, queues, expr, invisible, batch, fifo,
                                            pop_time)
    if not found:
        return None, positions
    return _found_response(ctx, cmd, topic, queues, group, found, pop_time, invisible,
                           fifo), positions


def _found_response(ctx: PopContext, cmd: RemotingCommand, topic: str, queues: list,
                    group: str, found: list, pop_time: int, invisible: int,
                    fifo: bool) -> RemotingCommand:
    """The FOUND answer: header infos and the records (blocking: reads queue offsets)."""
    starts: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], list[int]] = {}
    counts: list[str] = []
    body = bytearray()
    broker = ctx.config.broker_name
    rqid = ORDER_REVIVE_QUEUE if fifo else 0
    for rh, m, attempt, ck in found:
        k = (_retry_mark(ck.topic), ck.queue_id)
        starts.setdefault(k, ck.start_offset)
        offsets.setdefault(k, []).append(m.queue_offset)
        if fifo:
            counts.append(f"{k[0]} qo{ck.queue_id}%{m.queue_offset} {max((attempt or 1) - 1, 0)}")
        if ck.topic.startswith(RETRY_PREFIX):  # RocketMQ re-encodes retry records for the client
            props = dict(m.properties)
            props.setdefault(PROPERTY_POP_CK, " ".join(str(v) for v in (
                ck.start_offset, pop_time, invisible, rqid, TOPIC_TYPE_RETRY, broker,
                ck.queue_id, m.queue_offset)))
            m = dataclasses.replace(m, topic=topic, properties=props)
        body += record_bytes(m)
    rest = 0
    store = ctx.store
    for t, q in queues:
        if ctx.topics.get(t) is None:
            continue
        at = ctx.offsets.query(group, t, q)
        if at < 0:
            at = store.get_min_offset_in_queue(t, q)
        rest += max(store.get_max_offset_in_queue(t, q) - at, 0)
    fields: dict[str, object] = {
        "popTime": pop_time, "invisibleTime": invisible, "reviveQid": rqid, "restNum": rest,
        "startOffsetInfo": ";".join(f"{r} {q} {so}" for (r, q), so in starts.items()),
        "msgOffsetInfo": ";".join(f"{r} {q} {','.join(map(str, offs))}"
                                  for (r, q), offs in offsets.items())}
    if fifo:
        fields["orderCountInfo"] = ";".join(counts)
    return cmd.response(ResponseCode.SUCCESS, fields, remark="FOUND", body=bytes(body))


# -- PEEK_MESSAGE -------------------------------------------------------------------------------
async def peek(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    """PEEK_MESSAGE (200052), as RocketMQ 5.3.3's ``PeekMessageProcessor``: up to ``maxMsgNums``
    records from where the group's pops stand (the topic's queues, ``queueId`` -1: all, then the
    group's pop retry queue), unfiltered; nothing is popped, locked or committed. SUCCESS with the
    records and ``restNum``, else PULL_NOT_FOUND."""
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    max_nums = cmd.require_int("maxMsgNums")
    refused = _read_refusal(ctx, cmd, group, topic, queue_id)
    if refused is not None:
        return refused
    return await ctx.run(_peek, ctx, cmd, group, topic, queue_id, max(max_nums, 0))


def _peek(ctx: PopContext, cmd: RemotingCommand, group: str, topic: str, queue_id: int,
          max_nums: int) -> RemotingCommand:
    store = ctx.store
    queues = [(topic, q) for q in
              ([queue_id] if queue_id >= 0 else range(ctx.topics.get(topic).read_queue_nums))]
    retry_topic = pop_retry_topic(group, topic)
    retry = ctx.topics.get(retry_topic)
    if retry is not None:
        queues.extend((retry_topic, q) for q in range(retry.read_queue_nums))
    body = bytearray()
    n = rest = 0
    for t, q in queues:
        at = ctx.offsets.query(group, t, q)
        if at < 0:
            at = store.get_min_offset_in_queue(t, q)
        rest += store.get_max_offset_in_queue(t, q) - at
        if n >= max_nums:
            continue
        g = store.get_message(group, t, q, at, max_nums - n, None)
        if g.status.name in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY"):  # stale offset
            g = store.get_message(group, t, q, g.next_begin_offset, max_nums - n, None)
        for m in (g.messages if g.status.name == "FOUND" else []):
            body += record_bytes(m)
            n += 1
    if not n:
        return cmd.response(ResponseCode.PULL_NOT_FOUND, {"restNum": rest},
                            remark="NO_MESSAGE_IN_QUEUE")
    return cmd.response(ResponseCode.SUCCESS, {"restNum": rest}, remark="FOUND",
                        body=bytes(body))


# -- ACK_MESSAGE, BATCH_ACK_MESSAGE -------------------------------------------------------------
def _offset_refusal(ctx: PopContext, cmd: RemotingCommand, topic: str, queue_id: int,
                    offset: int, inclusive_max: bool) -> RemotingCommand | None:
    lo = ctx.store.get_min_offset_in_queue(topic, queue_id)
    hi = ctx.store.get_max_offset_in_queue(topic, queue_id)
    if offset < lo or offset > hi or (not inclusive_max and offset == hi):
        return cmd.response(ResponseCode.NO_MESSAGE,
                            remark=f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, "
                                   f"store:{lo}~{hi}")
    return None


# (group, topic, the stored topic, queue id, offset, receipt handle of the named queue)
Named = tuple[str, str, str, int, int, ReceiptHandle]


def _named(ctx: PopContext, cmd: RemotingCommand) -> Named | RemotingCommand:
    """What an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME names, or RocketMQ's refusal of it
    (the checks that need no store read; ``_offset_refusal`` is the other)."""
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    offset = cmd.require_int("offset")
    try:
        rh = ReceiptHandle.decode(cmd.require_str("extraInfo"))
    except ValueError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
    stored = _stored_topic(topic, group, rh)
    refused = _check_queue(ctx, cmd, stored, queue_id, ResponseCode.MESSAGE_ILLEGAL)
    if refused is not None:
        return refused
    return group, topic, stored, queue_id, offset, dataclasses.replace(rh, queue_id=queue_id)


def _ack_many(ctx: PopContext, items: list[tuple[RemotingCommand, Named]]
              ) -> list[RemotingCommand]:
    """Settle ACK_MESSAGEs that arrived together (blocking): each checked against its queue,
    then one ack record per checkpoint for all of its offsets acked here (as a
    BATCH_ACK_MESSAGE of them would), not one per message. An answer per request, in order."""
    answers: list[RemotingCommand | None] = []
    pop = ctx.service.pop
    by_ck: dict[int, tuple[Any, list[int], list[int]]] = {}  # id -> (ck, offsets, answer idx)
    for i, (cmd, (group, topic, stored, qid, offset, rh)) in enumerate(items):
        refused = _offset_refusal(ctx, cmd, stored, qid, offset, True)
        if refused is not None:
            answers.append(refused)
            continue
        answers.append(None)
        # not in flight (acked, revived, never popped): SUCCESS and nothing changes
        ck = pop.find(group, topic, dataclasses.replace(rh, offset=offset))
        if ck is not None:
            _ck, offs, idx = by_ck.setdefault(id(ck), (ck, [], []))
            if offset not in offs:
                offs.append(offset)
            idx.append(i)
    for ck, offs, idx in by_ck.values():
        try:
            pop.ack(ck, offs)
        except Exception as exc:  # the revive log refused the record: these acks failed
            for i in idx:
                answers[i] = items[i][0].response(ResponseCode.SYSTEM_ERROR,
                                                  remark=f"ack not stored: {exc}")
    return [a if a is not None else items[i][0].response(ResponseCode.SUCCESS)
            for i, a in enumerate(answers)]


async def _drain_acks(ctx: PopContext) -> None:
    """Settle queued ACK_MESSAGEs, one store call per round; what arrives meanwhile waits for
    the next round (a group commit of acks: the proxy sends a received batch's acks at once)."""
    try:
        while ctx.acks:
            batch, ctx.acks = ctx.acks, []
            try:
                answers = await ctx.run(_ack_many, ctx, [(c, n) for c, n, _f in batch])
            except Exception as exc:
                for _c, _n, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_c, _n, fut), answer in zip(batch, answers):
                if not fut.done():
                    fut.set_result(answer)
    finally:
        ctx.ack_task = None


async def ack(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    named = _named(ctx, cmd)
    if isinstance(named, RemotingCommand):
        return named
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[RemotingCommand] = loop.create_future()
    ctx.acks.append((cmd, named, fut))
    if ctx.ack_task is None:
        ctx.ack_task = loop.create_task(_drain_acks(ctx), name="pop-acks")
    return await fut


def _bitset(b64: str | None) -> list[int]:
    """The set bits of a ``java.util.BitSet`` written as fastjson writes a byte[]."""
    if not b64:
        return []
    data = base64.b64decode(b64)
    return [i * 8 + j for i, byte in enumerate(data) for j in range(8) if byte >> j & 1]


def _batch_ack(ctx: PopContext, acks: list) -> None:
    store = ctx.store
    for a in acks:
        group, topic = str(a.get("c") or a.get("consumerGroup")), str(a.get("t") or a.get("topic"))
        retry = str(a.get("r") or a.get("retry") or "0")
        qid = int(a.get("q", a.get("queueId", 0)))
        start = int(a.get("so", a.get("startOffset", 0)))
        rh = ReceiptHandle(start, int(a.get("pt", a.get("popTime", 0))),
                           int(a.get("it", a.get("invisibleTime", 0))),
                           int(a.get("rq", a.get("reviveQueueId", 0))), retry, "", qid, start, -1)
        real = rh.real_topic(topic, group)
        lo, hi = store.get_min_offset_in_queue(real, qid), store.get_max_offset_in_queue(real, qid)
        if lo < 0 or hi < 0:
            continue
        offsets = [start + i for i in _bitset(a.get("b") or a.get("bitSet"))]
        pop = ctx.service.pop
        by_ck: dict[int, tuple[Any, list[int]]] = {}
        for o in offsets:
            if not lo <= o <= hi:
                continue
            ck = pop.find(group, topic, dataclasses.replace(rh, offset=o))
            if ck is not None and o not in by_ck.setdefault(id(ck), (ck, []))[1]:
                by_ck[id(ck)][1].append(o)
        for ck, offs in by_ck.values():
            if offs:
                pop.ack(ck, offs)


async def batch_ack(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    acks = None
    if cmd.body:
        try:
            acks = json.loads(cmd.body).get("acks")
        except (ValueError, AttributeError):
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark="bad BatchAckMessageRequestBody")
    if not acks or not isinstance(acks, list):
        return cmd.response(ResponseCode.NO_MESSAGE)
    try:
        await ctx.run(_batch_ack, ctx, [a for a in acks if isinstance(a, dict)])
    except (ValueError, TypeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"bad batch ack: {exc}")
    return cmd.response(ResponseCode.SUCCESS)


# -- CHANGE_MESSAGE_INVISIBLETIME --------------------------------------------------------------
def _change(ctx: PopContext, cmd: RemotingCommand, named: Named,
            invisible: int) -> RemotingCommand:
    """CHANGE_MESSAGE_INVISIBLETIME's store part, one trip off the loop (blocking)."""
    group, topic, stored, qid, offset, rh = named
    refused = _offset_refusal(ctx, cmd, stored, qid, offset, False)
    if refused is not None:
        return refused
    pop = ctx.service.pop
    ck = pop.find(group, topic, dataclasses.replace(rh, offset=offset))
    if ck is None:  # not in flight: nothing to move (RocketMQ would revive it once more)
        pop_time, shown = int(time.time() * 1000), invisible
    else:
        new = pop.change_invisible(ck, offset, invisible)
        pop_time, shown = new.pop_time, new.invisible_ms if ck.fifo else invisible
    return cmd.response(ResponseCode.SUCCESS, {"popTime": pop_time, "invisibleTime": shown,
                                               "reviveQid": rh.revive_queue_id})


async def change_invisible(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    invisible = cmd.require_int("invisibleTime")
    named = _named(ctx, cmd)
    if isinstance(named, RemotingCommand):
        return named
    return await ctx.run(_change, ctx, cmd, named, invisible)


# -- NOTIFICATION, POLLING_INFO -----------------------------------------------------------------
async def notification(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    poll_ms = cmd.get_int("pollTime", 0) or 0
    refused = _check_queue(ctx, cmd, topic, queue_id, -1) if queue_id >= 0 else None
    if refused is None and ctx.topics.get(topic) is None:
        refused = _check_queue(ctx, cmd, topic, 0, -1)
    if refused is not None:
        return refused
    refused = _group_refusal(ctx, cmd, group)
    if refused is not None:
        return refused
    fifo = _is_fifo(ctx, group, cmd.get_bool("order"))
    svc = ctx.service
    queues = svc.queues(group, topic, fifo, queue_id)
    deadline = time.monotonic() + min(max(poll_ms, 0), MAX_POLL_MS) / 1000.0
    key = (topic, group, queue_id)
    while True:
        positions: list[tuple[str, int, int]] = []
        has = await ctx.run(svc.has_message, group, queues, fifo, positions)
        left = deadline - time.monotonic()
        if has or left <= 0 or ctx.hold.closed:
            return cmd.response(ResponseCode.SUCCESS, {"hasMsg": has, "pollingFull": False})
        ctx.polling[key] = ctx.polling.get(key, 0) + 1
        try:  # held as a pop is: woken by an arrival, not by polling the store
            await _hold(ctx, positions, left, fifo)
        finally:
            ctx.polling[key] -= 1
            if not ctx.polling[key]:
                del ctx.polling[key]


async def polling_info(ctx: PopContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    refused = _check_queue(ctx, cmd, topic, queue_id, -1) if queue_id >= 0 else None
    if refused is None and ctx.topics.get(topic) is None:
        refused = _check_queue(ctx, cmd, topic, 0, -1)
    if refused is not None:
        return refused
    refused = _group_refusal(ctx, cmd, group)  # auto-created, as RocketMQ finds it
    if refused is not None:
        return refused
    return cmd.response(ResponseCode.SUCCESS,
                        {"pollingNum": ctx.polling.get((topic, group, queue_id), 0)})
