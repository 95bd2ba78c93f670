"""Producer-facing requests: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
and CONSUMER_SEND_MSG_BACK (36).

Theory of operation: ``send`` asks the send rule (``send_rule.plan_send``, the one place that
decides a send: header, topic and queue checks, batch, delay, timer, transaction, retry/DLQ,
record layout) and carries out its plan: a ``Refused`` is answered as it is; a ``Put`` (a plain
message, its record encoded) goes in through ``services.puts``'s record way; a ``Whole`` becomes
store ``Message``s (a batch's entries decoded, a transactional one made a half message) for the
store's put path, which applies delay levels (``SCHEDULE_TOPIC_XXXX``), the timer wheel and batch
encoding. The response carries the offset message id(s) (``msgId``, comma-joined for a batch),
``queueId`` and ``queueOffset`` (``send_rule.send_answer_header``), or the failure remark
(``send_rule.put_failure_remark``). The fast paths (``workers/``) plan with the same function.

CONSUMER_SEND_MSG_BACK re-reads the consumed message by CommitLog offset and stores a copy on
``%RETRY%<group>`` with ``reconsume_times + 1`` (also in ``RECONSUME_TIME``), ``RETRY_TOPIC``
and ``ORIGIN_MESSAGE_ID``, delayed by level ``3 + reconsume_times`` unless the consumer asked for
another; once ``maxReconsumeTimes`` is reached (or the level is negative) the copy goes to the
dead-letter topic ``%DLQ%<group>`` instead.
"""
from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from ...format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_MAX_RECONSUME_TIMES,
                               PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME,
                               PROPERTY_RETRY_TOPIC, PROPERTY_TRANSACTION_PACKED,
                               PROPERTY_TRANSACTION_PREPARED,
                               PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as UNIQ_KEY, Message)
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.message_batch import decode_batch
from ...store.results import PutStatus
from ..send_rule import (BadHeader, Put, Refused, SendRules, pick_queue_id, plan_send, put_code,
                         put_failure_remark, send_answer_header, send_topic, status_ok)
from ..state.topics import DLQ_PREFIX, RETRY_PREFIX, ensure_topic
from .recall import recall_handle

__all__ = ["Refused", "pick_queue_id", "put_code", "send", "send_back", "send_topic",
           "status_ok"]

if TYPE_CHECKING:
    from ..contexts import SendContext

def send_rules(ctx: SendContext) -> SendRules:
    """The send rule's view of the broker now (its config may change while it runs)."""
    return SendRules(cluster_name=ctx.config.cluster_name,
                     store_host=ctx.store_config.store_host,
                     generate_uniq_key=ctx.store_config.generate_uniq_key,
                     max_message_size=ctx.store_config.max_message_size,
                     fast_sends=True, max_reconsume_times=ctx.config.max_reconsume_times,
                     reject_transaction_message=ctx.config.reject_transaction_message)


async def send(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    plan = plan_send(cmd.code, cmd.ext_fields, cmd.body, conn.peer, send_rules(ctx),
                     partial(send_topic, ctx.topics, ctx.config))
    if isinstance(plan, BadHeader):  # answered as any request whose header does not decode
        raise ValueError(plan.remark)
    if isinstance(plan, Refused):
        return cmd.response(plan.code, remark=plan.remark)
    if isinstance(plan, Put):  # a plain message, its record encoded
        rec = plan.record
        r = (await ctx.puts.put_records([rec]))[0]
        code = put_code(r.status)
        ctx.stats.record_put(rec.topic, 1, plan.body_len, status_ok(code))
        if not status_ok(code):
            return cmd.response(code, remark=put_failure_remark(r.status, r.error))
        return cmd.response(code, send_answer_header(r.msg_id or "", rec.queue_id,
                                                     r.queue_offset))
    msg = base = plan.message  # (the answer and the stats name the topic and queue sent to)
    if plan.dlq:
        ensure_topic(ctx.topics, ctx.config, msg.topic, 1)
    try:
        if plan.batch:
            return await _send_batch(ctx, cmd, msg, plan.transactional)
        recall = None if plan.transactional else \
            recall_handle(ctx, msg.topic, msg.properties or {}, int(time.time() * 1000))
        packed = None
        if plan.transactional:  # stored as a half message (transaction.py)
            assert ctx.transactions is not None
            if PROPERTY_TRANSACTION_PACKED in (msg.properties or {}):  # a batch in one half
                if not ctx.config.transaction_pack_enable:
                    return cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark=(
                        "packed half messages are off (transactionPackEnable)"))
                msg, packed = ctx.transactions.packed_half(
                    msg, ctx.store_config.max_message_size)
            else:
                msg = ctx.transactions.half_message(msg)
        r = await ctx.puts.put(msg)
    except ValueError as exc:  # oversize body, bad property, a malformed packed batch...
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
    code = put_code(r.status)
    ctx.stats.record_put(base.topic, 1, len(cmd.body), status_ok(code))
    if not status_ok(code):
        return cmd.response(code, remark=put_failure_remark(r.status, r.error))
    if packed is not None:
        assert ctx.transactions is not None
        ctx.transactions.remember_packed(msg, r, packed)
    return cmd.response(code, send_answer_header(r.msg_id or "", plan.answered_queue_id,
                                                 r.queue_offset,
                                                 recall, (msg.properties or {}).get(UNIQ_KEY)))


async def send_back(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    offset = cmd.require_int("offset")
    group = cmd.require_str("group")
    delay_level = cmd.get_int("delayLevel", 0) or 0
    max_times = cmd.get_int("maxReconsumeTimes", None)
    if max_times is None or max_times < 0:
        max_times = ctx.config.max_reconsume_times
    old = await ctx.run(ctx.store.look_message_by_offset, offset)
    if old is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"look message by offset failed, {offset}")
    props = dict(old.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, old.topic)
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    origin = cmd.get_str("originMsgId") or props.get(PROPERTY_ORIGIN_MESSAGE_ID) or old.msg_id
    props[PROPERTY_ORIGIN_MESSAGE_ID] = origin
    times = old.reconsume_times + 1
    props[PROPERTY_RECONSUME_TIME] = str(times)
    props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
    if old.reconsume_times >= max_times or delay_level < 0:
        topic = DLQ_PREFIX + group
    else:
        topic = RETRY_PREFIX + group
        level = delay_level if delay_level > 0 else 3 + old.reconsume_times
        props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    ensure_topic(ctx.topics, ctx.config, topic, 1)
    msg = Message(topic=topic, body=old.body, properties=props, queue_id=0, flag=old.flag,
                  sys_flag=old.sys_flag, born_timestamp=old.born_timestamp,
                  born_host=old.born_host, reconsume_times=times)
    r = await ctx.puts.put(msg)
    code = put_code(r.status)
    if not status_ok(code):
        return cmd.response(code, remark=f"send back failed: {r.status.name}")
    return cmd.response(ResponseCode.SUCCESS)


def batch_messages(base: Message, parts: list[tuple[bytes, dict[str, str], int]]
                   ) -> list[Message]:
    """``replace(base, body=, properties=, flag=)`` for each (body, properties, flag) of a
    plain batch, built positionally: a seventh of ``dataclasses.replace``'s cost a message."""
    t, tags, keys, qid, sf = base.topic, base.tags, base.keys, base.queue_id, base.sys_flag
    bt, bh, sh = base.born_timestamp, base.born_host, base.store_host
    rt, pto = base.reconsume_times, base.prepared_transaction_offset
    return [Message(t, b, tags, keys, p, qid, f, sf, bt, bh, sh, rt, pto) for b, p, f in parts]


async def _send_batch(ctx: SendContext, cmd: RemotingCommand, base: Message,
                      transactional: bool = False) -> RemotingCommand:
    """A batch; with ``transactional`` (the header says PREPARED) a batch of half messages,
    rocketstore's own (``transactionBatchEnable``): every entry must be prepared too, and each
    is stored as its own half message, in one append — END_TRANSACTION and the check then
    treat each as if it had been sent alone. RocketMQ refuses a prepared batch with
    MESSAGE_ILLEGAL; so do we when the option is off, and for a batch that mixes prepared and
    plain messages either way (a plain batch carrying a prepared entry included)."""
    if transactional and (ctx.transactions is None or not ctx.config.transaction_batch_enable):
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                            remark=put_failure_remark(PutStatus.MESSAGE_ILLEGAL, None, True))
    entries = decode_batch(cmd.body, max_bytes=ctx.store_config.max_message_size)
    if not entries:
        raise ValueError("empty message batch")
    parts = []
    for e in entries:
        p = e.properties  # the entry's own (a new dict each); the header's describe the batch
        if PROPERTY_DELAY_TIME_LEVEL in p and p[PROPERTY_DELAY_TIME_LEVEL] not in ("", "0"):
            raise ValueError("a batch cannot carry delayed messages")
        prepared = p.get(PROPERTY_TRANSACTION_PREPARED)
        if (prepared is not None and (prepared == "true" or prepared.lower() == "true")) \
                != transactional:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark=put_failure_remark(
                PutStatus.MESSAGE_ILLEGAL, None, True) + ": a batch mixes prepared and plain "
                "messages")
        parts.append((e.body, p, e.flag))
    if transactional:  # each entry's half record, built at once
        assert ctx.transactions is not None
        msgs = ctx.transactions.half_batch(base, parts)
    else:
        msgs = batch_messages(base, parts)
    r = await ctx.puts.put_batch(msgs)
    code = put_code(r.status)
    ctx.stats.record_put(base.topic, len(msgs), sum(len(m.body) for m in msgs),
                         status_ok(code))
    if not status_ok(code):
        return cmd.response(code, remark=put_failure_remark(r.status, r.error, batch=True))
    ids = r.msg_ids or [r.msg_id or ""]
    if transactional:
        assert ctx.transactions is not None
        ctx.transactions.remember_halves(msgs, r)
    return cmd.response(code, send_answer_header(",".join(ids), base.queue_id, r.queue_offset))
