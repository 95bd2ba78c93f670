"""The plain ACL on the gRPC endpoint, as RocketMQ 5's proxy applies it (``AuthenticationInterceptor``
+ ``PlainAccessResource.parse(GeneratedMessageV3, AuthenticationHeader)``).

5.x clients sign each call with metadata ``x-mq-date-time`` and
``authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
Signature=<hex HmacSHA1(secretKey, date-time)>``. The same accounts, white addresses and
permissions as the 4.x remoting check (``broker.acl``) decide, from the same ``plain_acl.yml``;
each RPC needs: SendMessage ``PUB`` on its topic; QueryRoute any permission on the topic;
ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
QueryAssignment ``SUB`` on the topic and the group; a consumer Heartbeat and
NotifyClientTermination ``SUB`` on the group; EndTransaction ``PUB`` on the topic; a Telemetry
``settings`` command ``PUB`` on each published topic, ``SUB`` on the subscribed group and topics.
A refused call ends with gRPC status PERMISSION_DENIED, as the proxy's.

Stricter than RocketMQ 5: the signature covers only ``x-mq-date-time``, so a captured call could
be replayed for ever; a signed call whose ``x-mq-date-time`` is missing, unreadable or more than
``aclSignatureWindowSeconds`` (default 900) from the broker's clock is refused, with the reason.
"""
from __future__ import annotations

import base64
import binascii
import calendar
import time
from typing import Any, AsyncIterator

import grpc

from ..broker.acl.plain import ANY, PUB, RETRY_PREFIX, SUB, AccessRequest, validate
from ..broker.acl.address import AclError

_CONSUMER_TYPES = ("PUSH_CONSUMER", "SIMPLE_CONSUMER")


def _name(res: Any) -> str:
    ns = getattr(res, "resource_namespace", "")
    return f"{ns}%{res.name}" if ns else res.name


def _group(res: Any) -> str:
    return RETRY_PREFIX + _name(res)


def grpc_resources(method: str, req: Any) -> dict[str, int]:
    """The resources one 5.x request touches, with the permission each needs."""
    out: dict[str, int] = {}
    if method == "SendMessage":
        if not req.messages:
            raise AclError("SendMessageRequest, messageCount is zero")
        topic = _name(req.messages[0].topic)
        if any(_name(m.topic) != topic for m in req.messages):
            raise AclError("SendMessageRequest, messages' topic is not consistent")
        out[topic] = PUB
    elif method == "ReceiveMessage":
        out[_group(req.group)] = SUB
        out[_name(req.message_queue.topic)] = SUB
    elif method in ("AckMessage", "ForwardMessageToDeadLetterQueue", "ChangeInvisibleDuration",
                    "QueryAssignment"):
        out[_group(req.group)] = SUB
        out[_name(req.topic)] = SUB
    elif method == "EndTransaction":
        out[_name(req.topic)] = PUB
    elif method == "QueryRoute":
        out[_name(req.topic)] = ANY
    elif method == "Heartbeat":
        from .protocol import pb
        if pb.ClientType.Name(req.client_type) in _CONSUMER_TYPES:
            if not req.HasField("group"):
                raise AclError("Consumer heartbeat doesn't have group")
            out[_group(req.group)] = SUB
    elif method == "NotifyClientTermination":
        if req.HasField("group") and req.group.name:
            out[_group(req.group)] = SUB
    elif method == "Telemetry" and req.WhichOneof("command") == "settings":
        s = req.settings
        if not s.HasField("publishing") and not s.HasField("subscription"):
            raise AclError("settings command doesn't have publishing or subscription")
        for t in s.publishing.topics if s.HasField("publishing") else ():
            out[_name(t)] = PUB
        if s.HasField("subscription"):
            out[_group(s.subscription.group)] = SUB
            for e in s.subscription.subscriptions:
                out[_name(e.topic)] = SUB
    return out


DEFAULT_WINDOW_S = 900
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"  # the clients' x-mq-date-time, UTC


def check_date_time(value: str | None, window_s: float, now: float | None = None) -> None:
    """Raise ``AclError`` unless ``value`` (``yyyyMMdd'T'HHmmss'Z'``) is within ``window_s``
    seconds of ``now`` (the broker's clock), either way."""
    if not value:
        raise AclError("x-mq-date-time is missing: a signed call must carry its time")
    try:
        at = calendar.timegm(time.strptime(str(value), DATE_TIME_FORMAT))
    except ValueError:
        raise AclError(f"x-mq-date-time {value!r} is not yyyyMMddTHHmmssZ") from None
    skew = (time.time() if now is None else now) - at
    if abs(skew) > window_s:
        side = "old" if skew > 0 else "ahead of the broker's clock"
        raise AclError(f"x-mq-date-time {value} is {abs(skew):.0f} s {side}; signatures are "
                       f"accepted within {window_s:g} s of the broker's clock "
                       "(aclSignatureWindowSeconds)")


def _access(context: Any, method: str, req: Any,
            window_s: float = DEFAULT_WINDOW_S) -> AccessRequest:
    meta = {k: v for k, v in (context.invocation_metadata() or ())}
    peer = context.peer() or ""  # "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555"
    host = peer.split(":", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host in ("::1", "::ffff:127.0.0.1"):
        host = "127.0.0.1"
    out = AccessRequest(0, host, resources=grpc_resources(method, req),
                        content=str(meta.get("x-mq-date-time", "")).encode("utf-8"))
    auth = meta.get("authorization")
    if auth:
        parts = str(auth).split(" ", 1)
        if len(parts) != 2:
            raise AclError("authorization header is incorrect")
        for item in parts[1].split(","):
            key, sep, value = item.strip().partition("=")
            if not sep:
                raise AclError("authorization keyValues length is incorrect")
            if key == "Credential":
                out.access_key = value.split("/")[0]
            elif key == "Signature":
                try:
                    out.signature = base64.b64encode(binascii.unhexlify(value)).decode()
                except (binascii.Error, ValueError) as exc:
                    raise AclError(f"bad signature: {exc}") from exc
        check_date_time(meta.get("x-mq-date-time"), window_s)
    return out


class AclInterceptor(grpc.aio.ServerInterceptor):
    """Checks every MessagingService call against the broker's plain ACL."""

    def __init__(self, manager: Any, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.manager = manager
        self.window_s = window_s

    def _check(self, context: Any, method: str, req: Any) -> str | None:
        try:
            validate(self.manager.snapshot, _access(context, method, req, self.window_s))
        except AclError as exc:
            return exc.message
        return None

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method.rsplit("/", 1)[-1]
        check = self._check
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(req: Any, context: Any) -> Any:
                denied = check(context, method, req)
                if denied is not None:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied)
                return await inner(req, context)
            return grpc.unary_unary_rpc_method_handler(
                unary, handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            inner_s = handler.unary_stream

            async def stream(req: Any, context: Any) -> AsyncIterator[Any]:
                denied = check(context, method, req)
                if denied is not None:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied)
                async for resp in inner_s(req, context):
                    yield resp
            return grpc.unary_stream_rpc_method_handler(
                stream, handler.request_deserializer, handler.response_serializer)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def bidi(requests: Any, context: Any) -> AsyncIterator[Any]:
                async def checked() -> AsyncIterator[Any]:
                    async for req in requests:
                        denied = check(context, method, req)
                        if denied is not None:
                            await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied)
                        yield req
                async for resp in inner_ss(checked(), context):
                    yield resp
            return grpc.stream_stream_rpc_method_handler(
                bidi, handler.request_deserializer, handler.response_serializer)
        return handler


__all__ = ["AclInterceptor", "grpc_resources", "check_date_time"]
