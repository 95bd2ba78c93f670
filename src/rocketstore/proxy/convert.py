"""Between the gRPC ``Message`` and the store's ``Message`` / ``MessageExt``.

Theory of operation: a 5.x client names every message itself (``system_properties.message_id``)
and that id becomes the record's ``UNIQ_KEY`` — the id 4.x remoting clients show as ``msgId``,
so one message has one id on both protocols. System properties map to RocketMQ's property names
exactly as the 5.x proxy stores them: tag → ``TAGS``, keys → ``KEYS``, message group →
``__SHARDINGKEY``, delivery time → ``TIMER_DELIVER_MS`` (the store's timer wheel delivers it at
that time, ``store/timer/``; a ``DELAY`` level only with ``use_delay_level``, RocketMQ's
``useDelayLevel``, off by default), transaction → ``TRAN_MSG``. Anything else a client sets is a user property. Going back, a
stored record becomes a gRPC message with its CRC32 body digest, delivery attempt
(``reconsume_times + 1``), and a retry copy shows its original topic.

Validation follows the 5.x proxy's ``SendMessageActivity`` and returns its codes:
``ValidationError(code, message)``.
"""
from __future__ import annotations

import time
import zlib
from typing import Any, Sequence

from ..format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_PRODUCER_GROUP,
                              PROPERTY_RECONSUME_TIME, PROPERTY_RETRY_TOPIC, PROPERTY_TAGS,
                              PROPERTY_TRANSACTION_PREPARED, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                              Message, MessageExt)
from .protocol import pb, to_duration, to_timestamp

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

from ..format.message import SYSTEM_PROPERTY_NAMES  # noqa: E402  (RocketMQ's reserved names)

# the 5.x proxy's defaults (ProxyConfig)
USER_PROPERTY_MAX_NUM = 128
MAX_USER_PROPERTY_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64
MAX_DELAY_TIME_MS = 40 * 24 * 3600 * 1000


class ValidationError(ValueError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _has_control(s: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in s)


def check_tag(tag: str) -> None:
    if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
        raise ValidationError(pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is illegal")


def delay_level_for(deliver_ms: int, now_ms: int, levels_ms: Sequence[int]) -> int:
    """The first delay level whose delay covers ``deliver_ms - now`` (the highest if none)."""
    wait = deliver_ms - now_ms
    if wait <= 0 or not levels_ms:
        return 0
    for i, d in enumerate(levels_ms):
        if wait <= d:
            return i + 1
    return len(levels_ms)


def to_store_message(m: Any, *, producer_group: str, born_host: str, max_body: int,
                     levels_ms: Sequence[int], now_ms: int | None = None,
                     use_delay_level: bool = False) -> Message:
    """Build the store message for one gRPC message (topic and queue are set by the caller)."""
    sp = m.system_properties
    if not m.body:
        raise ValidationError(pb.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(m.body) > max_body:
        raise ValidationError(pb.MESSAGE_BODY_TOO_LARGE,
                              f"message body cannot exceed the max {max_body}")
    user = dict(m.user_properties)
    if len(user) > USER_PROPERTY_MAX_NUM:
        raise ValidationError(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"too many user properties, max is {USER_PROPERTY_MAX_NUM}")
    size = 0
    for k, v in user.items():
        if k in SYSTEM_PROPERTY_NAMES:
            raise ValidationError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {k}")
        if _has_control(k) or _has_control(v):
            raise ValidationError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                  "the key or value of a property cannot contain control characters")
        size += len(k.encode()) + len(v.encode())
    props = user
    tag = sp.tag if sp.HasField("tag") else ""
    check_tag(tag)
    size += len(tag.encode())
    for key in sp.keys:
        if not key.strip() or _has_control(key):
            raise ValidationError(pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} is illegal")
        size += len(key.encode())
    if size > MAX_USER_PROPERTY_SIZE:
        raise ValidationError(pb.MESSAGE_PROPERTIES_TOO_LARGE,
                              f"the total size of user property is too large, max is "
                              f"{MAX_USER_PROPERTY_SIZE}")
    if not sp.message_id.strip():
        raise ValidationError(pb.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    sys_flag = 0
    if sp.message_type == pb.TRANSACTION:
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(
                sp.orphaned_transaction_recovery_duration.seconds)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if sp.HasField("delivery_timestamp"):
        deliver = sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000
        if deliver - now > MAX_DELAY_TIME_MS:
            raise ValidationError(pb.ILLEGAL_DELIVERY_TIME,
                                  f"the max delay time of message is too large, max is "
                                  f"{MAX_DELAY_TIME_MS}")
        level = delay_level_for(deliver, now, levels_ms) if use_delay_level else 0
        if level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver)
    props[PROPERTY_RECONSUME_TIME] = str(sp.delivery_attempt)
    props[PROPERTY_PRODUCER_GROUP] = producer_group
    if sp.HasField("message_group") and sp.message_group:
        group = sp.message_group
        if len(group) > MAX_MESSAGE_GROUP_SIZE or _has_control(group):
            raise ValidationError(pb.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is illegal")
        props[PROPERTY_SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    host = sp.born_host or _host_only(_host_port(born_host) or "")
    if host:
        props[PROPERTY_BORN_HOST] = host
    born_ts = 0
    if sp.HasField("born_timestamp"):
        born_ts = sp.born_timestamp.seconds * 1000 + sp.born_timestamp.nanos // 1_000_000
        props[PROPERTY_BORN_TIMESTAMP] = str(born_ts)
    return Message(topic=m.topic.name, body=bytes(m.body), tags=tag or None,
                   keys=list(sp.keys) or None, properties=props, sys_flag=sys_flag,
                   born_timestamp=born_ts or now, born_host=_host_port(born_host))


def _host_port(peer: str) -> str | None:
    """A gRPC peer (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``) → ``host:port`` for the record."""
    if not peer:
        return None
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):]
    return peer if ":" in peer else None


def message_type_of(props: dict[str, str]) -> int:
    if props.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        return pb.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if PROPERTY_DELAY_TIME_LEVEL in props or PROPERTY_TIMER_DELIVER_MS in props:
        return pb.DELAY
    return pb.NORMAL


_HIDDEN = SYSTEM_PROPERTY_NAMES


def to_grpc_message(ext: MessageExt, *, topic: str | None = None, receipt_handle: str | None = None,
                    invisible_ms: int | None = None, attempt: int | None = None) -> Any:
    """A stored record as the gRPC ``Message`` a consumer receives."""
    props = ext.properties
    sp = pb.SystemProperties(
        message_id=props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or ext.msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=format(zlib.crc32(ext.body) & 0xFFFFFFFF,
                                                            "08X")),
        body_encoding=pb.IDENTITY, message_type=message_type_of(props),
        born_timestamp=to_timestamp(ext.born_timestamp),
        born_host=props.get(PROPERTY_BORN_HOST) or _host_only(ext.born_host),
        store_timestamp=to_timestamp(ext.store_timestamp), store_host=ext.store_host,
        queue_id=ext.queue_id, queue_offset=ext.queue_offset,
        delivery_attempt=attempt or ext.reconsume_times + 1)
    if props.get(PROPERTY_TAGS):
        sp.tag = props[PROPERTY_TAGS]
    if props.get(PROPERTY_KEYS):
        sp.keys.extend(k for k in props[PROPERTY_KEYS].split(" ") if k)
    if PROPERTY_SHARDING_KEY in props:
        sp.message_group = props[PROPERTY_SHARDING_KEY]
    if PROPERTY_TIMER_DELIVER_MS in props:
        try:
            sp.delivery_timestamp.CopyFrom(to_timestamp(int(props[PROPERTY_TIMER_DELIVER_MS])))
        except ValueError:
            pass
    if props.get(PROPERTY_TRACE_CONTEXT):
        sp.trace_context = props[PROPERTY_TRACE_CONTEXT]
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(to_duration(invisible_ms))
    if PROPERTY_DLQ_ORIGIN_TOPIC in props:
        sp.dead_letter_queue.topic = props[PROPERTY_DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID, "")
    user = {k: v for k, v in props.items() if k not in _HIDDEN}
    name = topic or props.get(PROPERTY_RETRY_TOPIC) or ext.topic
    return pb.Message(topic=pb.Resource(name=name), user_properties=user, system_properties=sp,
                      body=ext.body)


def _host_only(host: str) -> str:
    return host.rsplit(":", 1)[0] if host else ""
