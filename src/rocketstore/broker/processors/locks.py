"""Queue locks for orderly consumers: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).

Theory of operation (RocketMQ's ``RebalanceLockManager``): an orderly push consumer only consumes
a queue while it holds the broker's lock on it for its group, so two clients of a group never
consume one queue at once and per-queue order survives rebalancing. A lock belongs to a client id
and lapses ``LOCK_MAX_LIVE_MS`` (60 s) after its last renewal; clients renew every ~20 s. A lock
request answers the subset of queues now held by the caller (``lockOKMQSet``); unlock releases
only the caller's own locks.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.jsonbody import load_json_text

if TYPE_CHECKING:
    from ..contexts import ClientContext


def _mqs(body: dict) -> list[tuple[str, str, int]]:
    out = []
    for d in body.get("mqSet") or []:
        out.append((str(d["topic"]), str(d.get("brokerName", "")), int(d["queueId"])))
    return out


def _parse(cmd: RemotingCommand) -> tuple[str, str, list[tuple[str, str, int]]]:
    body = load_json_text(cmd.body.decode("utf-8")) if cmd.body else {}
    if not isinstance(body, dict) or not body.get("consumerGroup"):
        raise ValueError("lock request body needs consumerGroup, clientId and mqSet")
    try:
        return str(body["consumerGroup"]), str(body.get("clientId", "")), _mqs(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"bad mqSet in lock request: {exc}") from exc


async def lock(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group, client, mqs = _parse(cmd)
    ok = ctx.locks.try_lock(group, client, mqs)
    body = {"lockOKMQSet": [{"topic": t, "brokerName": b, "queueId": q} for t, b, q in ok]}
    return cmd.response(ResponseCode.SUCCESS, body=json.dumps(body).encode())


async def unlock(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group, client, mqs = _parse(cmd)
    ctx.locks.unlock(group, client, mqs)
    return cmd.response(ResponseCode.SUCCESS)
