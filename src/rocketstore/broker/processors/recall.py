"""RECALL_MESSAGE (370): cancel a timer message that is not due yet, as RocketMQ 5.3.3 does.

Theory of operation. A send of a timer message (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS``) answers a ``recallHandle`` (``recall_handle``): RocketMQ's ``HandleV1``,
URL-safe base64 of ``"v1 <topic> <brokerName> <wheel slot ms + 1> <UNIQ_KEY>"``. RECALL_MESSAGE
with that handle puts a *delete* message for the same slot — body ``"0"``, tag
``_RECALL_TAG_``, ``TIMER_DEL_UNIQKEY`` = ``<topic>+<UNIQ_KEY>`` — through the put path; the timer
store (``store/timer``) then drops the message when the slot is delivered. Refusals are
RocketMQ's: ``recallMessageEnable`` off NO_PERMISSION; a slave SLAVE_NOT_AVAILABLE; an unknown
topic TOPIC_NOT_EXIST; a handle that does not decode, names another topic or broker, or a time
already past (a delivered message) or beyond ``timerMaxDelaySec`` ILLEGAL_OPERATION.
"""
from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING, Any

from ...format.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, Message
from ...format.timer_layout import (PROPERTY_TIMER_DEL_UNIQKEY, PROPERTY_TIMER_DELAY_MS,
                                    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELIVER_MS,
                                    TIMER_PROPERTIES, build_delete_key)
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand

if TYPE_CHECKING:
    from ..contexts import SendContext

RECALL_TAG = "_RECALL_TAG_"
_RETRY_PREFIX = "%RETRY%"


def _slot_ms(props: dict[str, str], now_ms: int, precision_ms: int) -> int | None:
    """The wheel slot the timer store files a timer message under (``transform``'s rule)."""
    try:
        if PROPERTY_TIMER_DELAY_SEC in props:
            deliver = now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        elif PROPERTY_TIMER_DELAY_MS in props:
            deliver = now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
        else:
            deliver = int(props[PROPERTY_TIMER_DELIVER_MS])
    except (KeyError, ValueError):
        return None
    if deliver <= now_ms:
        return None
    return deliver - precision_ms if deliver % precision_ms == 0 \
        else deliver // precision_ms * precision_ms


def recall_handle(ctx: SendContext, topic: str, props: dict[str, str], now_ms: int) -> str | None:
    """The ``recallHandle`` a send of this message answers (None: not a timer message)."""
    if topic.startswith(_RETRY_PREFIX) or not any(k in props for k in TIMER_PROPERTIES) \
            or props.get("DELAY"):
        return None
    uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    slot = _slot_ms(props, now_ms, ctx.store_config.timer_precision_ms)
    if not uniq or slot is None:
        return None
    raw = " ".join(("v1", topic, ctx.config.broker_name, str(slot + 1), uniq))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode(handle: str) -> list[str] | None:
    if not handle:
        return None
    try:
        raw = base64.urlsafe_b64decode(handle.encode() + b"=" * (-len(handle) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    items = raw.split(" ")
    return items if len(items) >= 5 and items[0] == "v1" else None


async def recall(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    handle = cmd.get_str("recallHandle") or ""
    if not getattr(ctx.config, "recall_message_enable", False):
        return cmd.response(ResponseCode.NO_PERMISSION, remark="recall failed, operation is forbidden")
    if getattr(ctx.store_config, "broker_role", "ASYNC_MASTER") == "SLAVE":
        return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE,
                            remark="recall failed, broker service not available")
    if ctx.topics.get(topic) is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                            remark=f"recall failed, the topic[{topic}] not exist")
    items = _decode(handle)
    if items is None:
        return cmd.response(ResponseCode.ILLEGAL_OPERATION, remark="recall handle is invalid")
    _v, h_topic, h_broker, ts, uniq = items[:5]
    if h_topic != topic:
        return cmd.response(ResponseCode.ILLEGAL_OPERATION, remark="recall failed, topic not match")
    if h_broker != ctx.config.broker_name:
        return cmd.response(ResponseCode.ILLEGAL_OPERATION,
                            remark="recall failed, broker service not available")
    try:
        left = int(ts) - int(time.time() * 1000)
    except ValueError:
        left = -1
    if left <= 0 or left >= ctx.store_config.timer_max_delay_sec * 1000:
        return cmd.response(ResponseCode.ILLEGAL_OPERATION, remark="recall failed, timestamp invalid")
    props = {PROPERTY_TIMER_DEL_UNIQKEY: build_delete_key(topic, uniq),
             PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, PROPERTY_TIMER_DELIVER_MS: ts}
    producer_group = cmd.get_str("producerGroup")
    if producer_group:
        props["PGROUP"] = producer_group
    msg = Message(topic=topic, body=b"0", tags=RECALL_TAG, properties=props, queue_id=0,
                  born_timestamp=int(time.time() * 1000), born_host=conn.peer)
    try:
        r = await ctx.puts.put(msg)
    except ValueError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"recall failed, {exc}")
    if r.status.name not in ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
                             "SLAVE_NOT_AVAILABLE"):
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark="recall failed, execute error")
    return cmd.response(ResponseCode.SUCCESS, {"msgId": uniq})
