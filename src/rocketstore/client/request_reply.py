"""Request-reply for the Python client (RocketMQ's ``DefaultMQProducer.request`` and
``MessageUtil.createReplyMessage``).

Theory of operation. A request is an ordinary message with three properties:
``CORRELATION_ID`` (a fresh id), ``REPLY_TO_CLIENT`` (the requester's client id) and ``TTL``
(the timeout in ms). The requester heartbeats as a producer first, so the broker knows which
connection belongs to that client id. The responder — any consumer — builds the reply with
:func:`reply_properties` (``<CLUSTER>_REPLY_TOPIC``, same correlation id and reply-to,
``MSG_TYPE=reply``) and sends it with SEND_REPLY_MESSAGE_V2; the broker pushes it back to the
requester's connection (PUSH_REPLY_MESSAGE_TO_CLIENT), where :class:`ReplyWaiter` answers the
push and completes the request whose correlation id it carries.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from ..format.message import PROPERTY_CLUSTER, string_to_properties
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand

PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_TTL = "TTL"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_FLAG = "reply"


@dataclass
class ReplyMessage:
    """A reply as pushed by the broker."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    born_host: str
    store_host: str
    store_timestamp: int

    @property
    def correlation_id(self) -> str | None:
        return self.properties.get(PROPERTY_CORRELATION_ID)


def request_properties(client_id: str, timeout_ms: int) -> dict[str, str]:
    return {PROPERTY_CORRELATION_ID: str(uuid.uuid4()), PROPERTY_REPLY_TO_CLIENT: client_id,
            PROPERTY_TTL: str(int(timeout_ms))}


def reply_properties(request_properties_: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``MessageUtil.createReplyMessage``: (reply topic, properties) for a request message's
    properties; raises ValueError when the request lacks ``CLUSTER`` (as RocketMQ)."""
    cluster = request_properties_.get(PROPERTY_CLUSTER)
    if cluster is None:
        raise ValueError(f"create reply message fail, requestMessage error, "
                         f"property[{PROPERTY_CLUSTER}] is null.")
    props = {PROPERTY_MESSAGE_TYPE: REPLY_MESSAGE_FLAG}
    for name in (PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT, PROPERTY_TTL):
        if request_properties_.get(name) is not None:
            props[name] = request_properties_[name]
    return f"{cluster}_REPLY_TOPIC", props


class ReplyWaiter:
    """Answers PUSH_REPLY_MESSAGE_TO_CLIENT and completes the matching pending request."""

    def __init__(self, instance) -> None:
        self.instance = instance
        self.pending: dict[str, asyncio.Future] = {}
        instance.on_broker_request.append(self._on_request)

    def expect(self, correlation_id: str) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = fut
        return fut

    def forget(self, correlation_id: str) -> None:
        self.pending.pop(correlation_id, None)

    def _on_request(self, addr: str, cmd: RemotingCommand) -> None:
        if cmd.code != RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT:
            return
        props = string_to_properties(cmd.get_str("properties") or "")
        msg = ReplyMessage(cmd.get_str("topic") or "", cmd.body, props,
                           cmd.get_int("queueId", 0) or 0, cmd.get_str("bornHost") or "",
                           cmd.get_str("storeHost") or "",
                           cmd.get_int("storeTimestamp", 0) or int(time.time() * 1000))
        fut = self.pending.pop(msg.correlation_id or "", None)
        if fut is not None and not fut.done():
            fut.set_result(msg)
        asyncio.get_running_loop().create_task(self._answer(addr, cmd))

    async def _answer(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            client = await self.instance.pool.get(addr)
            client._write(cmd.response(ResponseCode.SUCCESS))
        except (ConnectionError, OSError):
            pass
