"""Admin requests the broker answers by asking a live consumer client (RocketMQ 4.9.7
``AdminBrokerProcessor.callConsumer`` / ``Broker2Client``).

====  ======================================  ===========================================
code  request (header)                        what the broker does
====  ======================================  ===========================================
 307  GET_CONSUMER_RUNNING_INFO               forwards to the client's connection (same
      {consumerGroup, clientId, jstackEnable}  header and body, 10 s) and relays its answer:
                                              a ``ConsumerRunningInfo`` body
 309  CONSUME_MESSAGE_DIRECTLY                the same, with the stored record of ``msgId``
      {consumerGroup, clientId, msgId}        as the body and ``brokerName`` added
 223  INVOKE_BROKER_TO_GET_CONSUMER_STATUS    asks every client of ``group`` (or only
      {topic, group, clientAddr}              ``clientAddr``) GET_CONSUMER_STATUS_FROM_CLIENT
                                              (221, 5 s each); ``GetConsumerStatusBody``
                                              {consumerTable: clientId → {MessageQueue →
                                              offset}, messageQueueTable: {}}
====  ======================================  ===========================================

Errors as RocketMQ words them: a client that is not connected → SYSTEM_ERROR "The Consumer
<group> <clientId> not online"; one older than V3_1_8_SNAPSHOT → SYSTEM_ERROR; no answer in
time → CONSUME_MSG_TIMEOUT "consumer <group> <clientId> Timeout: ..."; a dropped connection →
SYSTEM_ERROR "invoke consumer <group> <clientId> Exception: ...".

Theory of operation: the server connection a client heartbeats on is kept by the
``ConsumerManager``; ``call`` on it sends a server-initiated request and waits for the response
with the same opaque. Only the awaiting request task waits: the event loop, and every other
request, go on meanwhile. Java consumers answer these natively; the Python push consumer
answers all three (``rocketstore.client.running_info``).
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ...format.message import parse_message_id
from ...remoting import fastjson
from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...format.message import record_bytes

if TYPE_CHECKING:
    from ..contexts import AdminContext

log = logging.getLogger(__name__)
CALL_CLIENT_TIMEOUT_S = 10.0  # Broker2Client.callClient
CONSUMER_STATUS_TIMEOUT_S = 5.0  # Broker2Client.getConsumeStatus
V3_1_8_SNAPSHOT = 77  # MQVersion ordinals: the oldest client that answers 307 / 309
V3_0_7_SNAPSHOT = 28  # ... and 221


async def call_consumer(consumers: Any, cmd: RemotingCommand, code: int, group: str,
                        client_id: str, body: bytes | None = None,
                        timeout_s: float = CALL_CLIENT_TIMEOUT_S) -> RemotingCommand:
    """Forward ``cmd`` (its header, and ``body`` or its own) to one client; its answer,
    re-addressed to ``cmd``."""
    info = consumers.group(group)
    ch = info.channels.get(client_id) if info is not None else None
    if ch is None or not hasattr(ch.connection, "call"):
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"The Consumer <{group}> <{client_id}> not online")
    if ch.version < V3_1_8_SNAPSHOT:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"The Consumer <{client_id}> Version <{ch.version}> too low "
                                   "to finish, please upgrade it to V3_1_8_SNAPSHOT")
    ask = RemotingCommand.request(code, cmd.ext_fields, cmd.body if body is None else body,
                                  language="JAVA")
    try:
        answer = await ch.connection.call(ask, timeout_s)
    except (TimeoutError, asyncio.TimeoutError) as exc:
        return cmd.response(ResponseCode.CONSUME_MSG_TIMEOUT,
                            remark=f"consumer <{group}> <{client_id}> Timeout: "
                                   f"{exc or f'no answer in {timeout_s:.0f} s'}")
    except (ConnectionError, OSError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
    return cmd.response(answer.code, answer.ext_fields, remark=answer.remark, body=answer.body)


async def running_info(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return await call_consumer(ctx.consumers, cmd, RequestCode.GET_CONSUMER_RUNNING_INFO,
                               cmd.require_str("consumerGroup"), cmd.require_str("clientId"))


async def consume_directly(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group, client_id = cmd.require_str("consumerGroup"), cmd.require_str("clientId")
    cmd.ext_fields["brokerName"] = ctx.config.broker_name
    body = b""
    try:
        _, offset = parse_message_id(cmd.require_str("msgId"))
        m = await ctx.run(ctx.store.look_message_by_offset, offset)
        body = record_bytes(m) if m is not None else b""
    except ValueError:  # RocketMQ sends the request on without a body
        pass
    return await call_consumer(ctx.consumers, cmd, RequestCode.CONSUME_MESSAGE_DIRECTLY, group,
                               client_id, body)


async def consumer_status(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic, group = cmd.require_str("topic"), cmd.require_str("group")
    only = (cmd.get_str("clientAddr") or "").strip()
    info = ctx.consumers.group(group)
    if info is None or not info.channels:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"No Any Consumer online in the consumer group: [{group}]")
    targets = [ch for cid, ch in sorted(info.channels.items()) if not only or cid == only]
    too_old = [ch for ch in targets if ch.version < V3_0_7_SNAPSHOT]
    if too_old:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark="the client does not support this feature. "
                                   f"version={too_old[0].version}")

    async def ask(ch: Any) -> tuple[str, Any]:
        req = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
                                      {"topic": topic, "group": group}, language="JAVA")
        try:
            resp = await ch.connection.call(req, CONSUMER_STATUS_TIMEOUT_S)
            if resp.code == ResponseCode.SUCCESS and resp.body:
                return ch.client_id, fastjson.loads(resp.body).get("messageQueueTable") or {}
        except (TimeoutError, asyncio.TimeoutError, ConnectionError, OSError,
                ValueError, AttributeError) as exc:
            log.warning("consumer status of %s in %s: %s", ch.client_id, group, exc)
        return ch.client_id, None

    answers = await asyncio.gather(*(ask(ch) for ch in targets
                                     if hasattr(ch.connection, "call")))
    table = {cid: mqs for cid, mqs in answers if mqs is not None}
    body = fastjson.dumps({"consumerTable": table, "messageQueueTable": {}})
    return cmd.response(ResponseCode.SUCCESS, body=body.encode("utf-8"))


__all__ = ["call_consumer"]
