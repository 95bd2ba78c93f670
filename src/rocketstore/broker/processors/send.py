"""Producer-facing requests: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320)
and CONSUMER_SEND_MSG_BACK (36).

Theory of operation: a send header is normalised to V1 field names, checked (``send_topic``: the
topic may be sent to, exists or is auto-created and is writable; ``pick_queue_id``: the queue is
in range), turned into store ``Message``s and handed to ``services.puts`` — the one way into the
store, whose put path gives every message without one a ``UNIQ_KEY`` (so the id a client sees is
stable across retries, delay and retry topics) and the broker's store host. A ``DELAY`` level reroutes
the message through ``SCHEDULE_TOPIC_XXXX`` (see ``schedule``). The response carries the offset
message id(s) (``msgId``, comma-joined for a batch), ``queueId`` and ``queueOffset``, all strings.

CONSUMER_SEND_MSG_BACK re-reads the consumed message by CommitLog offset and stores a copy on
``%RETRY%<group>`` with ``reconsume_times + 1`` (also in ``RECONSUME_TIME``), ``RETRY_TOPIC``
and ``ORIGIN_MESSAGE_ID``, delayed by level ``3 + reconsume_times`` unless the consumer asked for
another; once ``maxReconsumeTimes`` is reached (or the level is negative) the copy goes to the
dead-letter topic ``%DLQ%<group>`` instead.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...format.message import (PROPERTY_CLUSTER, PROPERTY_DELAY_TIME_LEVEL,
                               PROPERTY_MAX_RECONSUME_TIMES, PROPERTY_ORIGIN_MESSAGE_ID,
                               PROPERTY_RECONSUME_TIME, PROPERTY_RETRY_TOPIC,
                               PROPERTY_TRANSACTION_PREPARED,
                               PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as UNIQ_KEY, Message,
                               string_to_properties)
from ...remoting.codes import PERM_WRITE, RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.header import send_header_v1
from ...remoting.message_batch import decode_batch
from ..state.topics import DLQ_PREFIX, RETRY_PREFIX, TopicConfig, TopicConfigManager, ensure_topic
from ..state.topic_validator import is_not_allowed_send_topic, send_forbidden_remark
from ..services.transaction import is_transactional
from .recall import recall_handle

if TYPE_CHECKING:
    from ..contexts import SendContext

_PUT_CODES = {
    "PUT_OK": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE,
    "SERVICE_NOT_AVAILABLE": ResponseCode.SERVICE_NOT_AVAILABLE,
    "CREATE_MAPPED_FILE_FAILED": ResponseCode.SYSTEM_ERROR,
    "MESSAGE_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL,
    "PROPERTIES_SIZE_EXCEEDED": ResponseCode.MESSAGE_ILLEGAL,
    "OS_PAGE_CACHE_BUSY": ResponseCode.SYSTEM_BUSY,
    "UNKNOWN_ERROR": ResponseCode.SYSTEM_ERROR,
    "WHEEL_TIMER_MSG_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL,  # RocketMQ 5's answers
    "WHEEL_TIMER_FLOW_CONTROL": ResponseCode.SYSTEM_ERROR,
    "WHEEL_TIMER_NOT_ENABLE": ResponseCode.SYSTEM_ERROR,
}


def put_code(status: Any) -> int:
    return _PUT_CODES.get(getattr(status, "name", str(status)), ResponseCode.SYSTEM_ERROR)


def status_ok(code: int) -> bool:
    # RocketMQ answers FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE with the result: the message is stored
    return code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                    ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)


@dataclass
class Refused:
    """Why a message cannot be sent to a topic: the response code and remark."""
    code: int
    remark: str


def send_topic(topics: TopicConfigManager, config: Any, topic: str,
               queue_nums: int | None = None) -> TopicConfig | Refused:
    """The topic a message is sent to, with every check a send makes (RocketMQ's
    ``AbstractSendMessageProcessor.msgCheck``): not a system topic no client may send to,
    existing or auto-created, writable. Send, send-reply and the gRPC SendMessage ask here."""
    if is_not_allowed_send_topic(topic):
        return Refused(ResponseCode.NO_PERMISSION, send_forbidden_remark(topic))
    try:
        tc = ensure_topic(topics, config, topic, queue_nums)
    except ValueError as exc:
        return Refused(ResponseCode.SYSTEM_ERROR, str(exc))
    if tc is None:
        return Refused(ResponseCode.TOPIC_NOT_EXIST,
                       f"topic[{topic}] not exist, apply first please!")
    if not tc.perm & PERM_WRITE:
        return Refused(ResponseCode.NO_PERMISSION,
                       f"the topic[{topic}] sending message is forbidden")
    return tc


def pick_queue_id(tc: Any, topic: str, queue_id: int) -> int | str:
    """The queue a send goes to, as RocketMQ's send processors pick it: a negative id means any
    (by the clock), an id past the topic's write queues is refused (the remark is returned)."""
    if queue_id < 0:
        return int(time.time() * 1000) % tc.write_queue_nums
    if queue_id >= tc.write_queue_nums:
        return (f"request queueId[{queue_id}] is illegal, topic {topic} "
                f"has {tc.write_queue_nums} write queues")
    return queue_id


async def send(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    # 310 and 320 use SendMessageRequestHeaderV2's single-letter names
    h = cmd.ext_fields if "topic" in cmd.ext_fields else send_header_v1(cmd.ext_fields)
    batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE or \
        str(h.get("batch", "")).lower() in ("true", "1")
    topic = h.get("topic") or ""
    tc = send_topic(ctx.topics, ctx.config, topic, _int(h, "defaultTopicQueueNums", 0) or None)
    if isinstance(tc, Refused):
        return cmd.response(tc.code, remark=tc.remark)
    queue_id = pick_queue_id(tc, topic, _int(h, "queueId", 0))
    if isinstance(queue_id, str):
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=queue_id)
    base = dict(topic=topic, queue_id=queue_id, flag=_int(h, "flag", 0),
                sys_flag=_int(h, "sysFlag", 0), born_timestamp=_int(h, "bornTimestamp", 0)
                or int(time.time() * 1000), born_host=conn.peer,
                reconsume_times=_int(h, "reconsumeTimes", 0))
    props = string_to_properties(h.get("properties") or "")
    if topic.startswith(RETRY_PREFIX):
        max_times = _int(h, "maxReconsumeTimes", ctx.config.max_reconsume_times)
        if base["reconsume_times"] >= max_times:  # a client-side retry at the limit → DLQ
            dlq = DLQ_PREFIX + topic[len(RETRY_PREFIX):]
            ensure_topic(ctx.topics, ctx.config, dlq, 1)
            base["topic"], base["queue_id"] = dlq, 0
    try:
        if batch:
            return await _send_batch(ctx, cmd, base)
        props[PROPERTY_CLUSTER] = ctx.config.cluster_name  # as RocketMQ: request-reply needs it
        msg = Message(body=cmd.body, properties=props, **base)
        recall = None if is_transactional(msg) else \
            recall_handle(ctx, base["topic"], props, int(time.time() * 1000))
        if is_transactional(msg):  # stored as a half message (transaction.py)
            if ctx.config.reject_transaction_message:
                return cmd.response(ResponseCode.NO_PERMISSION,
                                    remark="sending transaction message is forbidden")
            msg = ctx.transactions.half_message(msg)
        r = await ctx.puts.put(msg)
    except ValueError as exc:  # oversize body, bad property...
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, remark=str(exc))
    code = put_code(r.status)
    ctx.stats.record_put(base["topic"], 1, len(cmd.body), status_ok(code))
    if not status_ok(code):
        if r.status.name.startswith("WHEEL_TIMER"):  # RocketMQ 5's remark as it is
            return cmd.response(code, remark=r.error or r.status.name)
        return cmd.response(code, remark=f"put message failed: {r.status.name} {r.error or ''}")
    return cmd.response(code, {"msgId": r.msg_id, "queueId": base["queue_id"],
                               "queueOffset": r.queue_offset,
                               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true",
                               "recallHandle": recall,
                               # RocketMQ 5: the uniq key; the 5.x proxy ends a transaction by it
                               "transactionId": msg.properties.get(UNIQ_KEY)})


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


async def _send_batch(ctx: SendContext, cmd: RemotingCommand, base: dict) -> RemotingCommand:
    if base["topic"].startswith(RETRY_PREFIX):
        raise ValueError("batch request does not support retry group topic")
    entries = decode_batch(cmd.body, max_bytes=ctx.store_config.max_message_size)
    if not entries:
        raise ValueError("empty message batch")
    msgs = []
    for e in entries:
        p = dict(e.properties)  # the header's properties describe the batch, not each message
        if PROPERTY_DELAY_TIME_LEVEL in p and p[PROPERTY_DELAY_TIME_LEVEL] not in ("", "0"):
            raise ValueError("a batch cannot carry delayed messages")
        if p.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
            raise ValueError("a batch cannot carry transactional messages")
        msgs.append(Message(body=e.body, properties=p, **{**base, "flag": e.flag}))
    r = await ctx.puts.put_batch(msgs)
    code = put_code(r.status)
    ctx.stats.record_put(base["topic"], len(msgs), sum(len(m.body) for m in msgs),
                            status_ok(code))
    if not status_ok(code):
        return cmd.response(code, remark=f"put messages failed: {r.status.name}")
    ids = getattr(r, "msg_ids", None) or [r.msg_id]
    return cmd.response(code, {"msgId": ",".join(ids), "queueId": base["queue_id"],
                               "queueOffset": r.queue_offset,
                               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})


def _int(h: dict[str, str], name: str, default: int) -> int:
    v = h.get(name)
    if v is None or v == "" or v == "null":
        return default
    try:
        return int(v)
    except ValueError:
        if v.lower() in ("true", "false"):
            return int(v.lower() == "true")
        raise ValueError(f"the {name} field must be an integer, not {v!r}") from None
