"""Request-reply: SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325), as RocketMQ 4.9's
``ReplyMessageProcessor``.

Theory of operation. A requester (``DefaultMQProducer.request``) sends an ordinary message that
carries ``CORRELATION_ID``, ``REPLY_TO_CLIENT`` (its client id) and ``TTL``; the broker stamps
``CLUSTER`` on it (``send``). The responder builds the reply on ``<CLUSTER>_REPLY_TOPIC`` with
the same correlation id and reply-to and sends it with code 324/325. The broker then:

1. finds the requester among live producer connections by ``REPLY_TO_CLIENT`` and calls it with
   PUSH_REPLY_MESSAGE_TO_CLIENT (326): a ``ReplyMessageRequestHeader`` (topic, queueId,
   properties with ``PUSH_REPLY_TIME`` added, bornHost, storeHost, storeTimestamp…) and the
   reply's body. The answer decides the response: SUCCESS (``msgId`` "0", ``queueOffset`` 0) or
   SYSTEM_ERROR with RocketMQ's remark — ``push reply message fail, channel of <id> not found.``
   when the requester is gone, ``reply message properties[REPLY_TO_CLIENT] is null`` when the
   reply names nobody, ``push reply message to <id>fail.`` when the push failed;
2. stores the reply on its topic when ``storeReplyMessageEnable`` (the default), which then
   fills ``msgId``/``queueOffset`` of the response — also after a failed push, as RocketMQ does.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ...format.message import Message, properties_to_string, string_to_properties
from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.header import send_header_v1
from ..state.topics import TopicConfigManager
from .send import Refused, pick_queue_id, send_topic

if TYPE_CHECKING:
    from ..contexts import SendContext

log = logging.getLogger(__name__)

PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
PUSH_TIMEOUT_S = 3.0


def reply_topic(cluster: str) -> str:
    """``MixAll.getReplyTopic``."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


async def push_reply(ctx: SendContext, conn: Any, h: dict, props: dict[str, str],
                     body: bytes) -> tuple[bool, str | None]:
    sender = props.get(PROPERTY_REPLY_TO_CLIENT)
    if sender is None:
        return False, f"reply message properties[{PROPERTY_REPLY_TO_CLIENT}] is null"
    channel = ctx.producers.find_connection(sender)
    if channel is None or getattr(channel, "closed", False) or not hasattr(channel, "call"):
        return False, f"push reply message fail, channel of <{sender}> not found."
    pushed = dict(props)
    pushed[PROPERTY_PUSH_REPLY_TIME] = str(int(time.time() * 1000))
    fields = {"producerGroup": h.get("producerGroup"), "topic": h.get("topic"),
              "defaultTopic": h.get("defaultTopic"),
              "defaultTopicQueueNums": h.get("defaultTopicQueueNums"),
              "queueId": h.get("queueId"), "sysFlag": h.get("sysFlag"),
              "bornTimestamp": h.get("bornTimestamp"), "flag": h.get("flag"),
              "properties": properties_to_string(pushed), "reconsumeTimes": h.get("reconsumeTimes"),
              "unitMode": h.get("unitMode") or "false", "bornHost": conn.peer,
              "storeHost": ctx.store_config.store_host, "storeTimestamp": int(time.time() * 1000)}
    req = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT,
                                  {k: v for k, v in fields.items() if v is not None}, body=body,
                                  language="JAVA")
    try:
        answer = await channel.call(req, PUSH_TIMEOUT_S)
    except (ConnectionError, TimeoutError, OSError) as exc:
        log.warning("push reply message to %s failed: %r", sender, exc)
        return False, f"push reply message to {sender}fail."
    if answer.code != ResponseCode.SUCCESS:
        log.warning("push reply message to %s failed: %s %s", sender, answer.code, answer.remark)
        return False, f"push reply message to {sender}fail."
    return True, None


def create_reply_topic(topics: TopicConfigManager, config: Any) -> None:
    """The cluster's reply topic, a system topic every broker has (``MixAll.getReplyTopic``)."""
    if topics.get(reply_topic(config.cluster_name)) is None:
        topics.create(reply_topic(config.cluster_name), 1)


async def send_reply(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    h = cmd.ext_fields if "topic" in cmd.ext_fields else send_header_v1(cmd.ext_fields)
    topic = h.get("topic") or ""
    tc = send_topic(ctx.topics, ctx.config, topic, None)
    if isinstance(tc, Refused):
        return cmd.response(tc.code, remark=tc.remark)
    queue_id = pick_queue_id(tc, topic, int(h.get("queueId") or 0))
    if isinstance(queue_id, str):
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=queue_id)
    props = string_to_properties(h.get("properties") or "")
    ok, remark = await push_reply(ctx, conn, h, props, cmd.body)
    fields: dict[str, Any] = {"msgId": "0", "queueId": queue_id, "queueOffset": 0,
                              "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
    code = ResponseCode.SUCCESS if ok else ResponseCode.SYSTEM_ERROR
    if ctx.config.store_reply_message_enable:
        msg = Message(topic=topic, body=cmd.body, properties=props, queue_id=queue_id,
                      flag=int(h.get("flag") or 0), sys_flag=int(h.get("sysFlag") or 0),
                      born_timestamp=int(h.get("bornTimestamp") or time.time() * 1000),
                      born_host=conn.peer, reconsume_times=int(h.get("reconsumeTimes") or 0))
        r = await ctx.puts.put(msg)
        if r.status.name in ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
                             "SLAVE_NOT_AVAILABLE"):
            fields.update(msgId=r.msg_id, queueOffset=r.queue_offset)
    return cmd.response(code, fields, remark=remark)
