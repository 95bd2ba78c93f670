"""RocketMQ 5's server-side rebalance: QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401).

A 5.x remoting consumer that leaves rebalancing to the broker (``setClientRebalance(false)``,
and every consumer of a group set to POP by ``mqadmin setConsumeMode``) asks one broker which
queues are its own (``QueryAssignmentRequestBody``: topic, consumerGroup, clientId,
strategyName, messageModel) and whether to pull or pop them. As 5.3.3's
``QueryAssignmentProcessor``:

- the mode is what SET_MESSAGE_REQUEST_MODE stored for (topic, group) (``request_modes``), else
  PULL (``defaultMessageRequestMode``); a retry topic is always PULL;
- the queues are the topic's readable queues across the cluster (the route at the name servers,
  ``AssignmentContext.route_queues``), sorted as ``MessageQueue.compareTo`` sorts them;
- BROADCASTING: all of them; CLUSTERING: the strategy's share for the client among the group's
  clients (sorted ids) — ``AVG`` (``AllocateMessageQueueAveragely``) or ``AVG_BY_CIRCLE``; an
  unknown strategy, an unknown topic or a group without clients answer no assignment at all
  (``{}``: the client keeps what it has); in POP mode with ``popShareQueueNum`` <= 0 (or >= the
  clients - 1) each client pops every broker's queue -1 ("any queue"), else its share plus the
  shares of the next ``popShareQueueNum`` clients (fewer clients than queues), or one queue each.

SET_MESSAGE_REQUEST_MODE refuses a retry topic (NO_PERMISSION "retry topic is not allowed to set
mode"), an unknown topic (TOPIC_NOT_EXIST "topic[T] not exist") and a group that does not exist
and is not auto-created (SUBSCRIPTION_GROUP_NOT_EXIST "subscription group does not exist").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...remoting import fastjson
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.jsonbody import load_json_text
from ..state.topics import RETRY_PREFIX

if TYPE_CHECKING:
    from ..contexts import AssignmentContext

MessageQueue = tuple[str, str, int]  # topic, broker name, queue id: MessageQueue.compareTo order


def allocate_avg(mq_all: list[MessageQueue], cid_all: list[str], cid: str) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragely``: consecutive blocks, the first clients one more."""
    if cid not in cid_all or not mq_all:
        return []
    index, n, c = cid_all.index(cid), len(mq_all), len(cid_all)
    mod = n % c
    if n <= c:
        size = 1
    else:
        size = n // c + 1 if mod > 0 and index < mod else n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [mq_all[(start + i) % n] for i in range(min(size, n - start))]


def allocate_by_circle(mq_all: list[MessageQueue], cid_all: list[str],
                       cid: str) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragelyByCircle``: every client-count-th queue."""
    if cid not in cid_all:
        return []
    return mq_all[cid_all.index(cid)::len(cid_all)]


STRATEGIES = {"AVG": allocate_avg, "AVG_BY_CIRCLE": allocate_by_circle}


def allocate_for_pop(strategy: Any, mq_all: list[MessageQueue], cid_all: list[str], cid: str,
                     share: int) -> list[MessageQueue]:
    """``allocate4Pop``."""
    if share <= 0 or share >= len(cid_all) - 1:
        seen: list[MessageQueue] = []
        for t, b, _q in mq_all:
            if (t, b, -1) not in seen:
                seen.append((t, b, -1))
        return seen
    if len(cid_all) <= len(mq_all):
        out = strategy(mq_all, cid_all, cid)
        if cid in cid_all:
            index = cid_all.index(cid)
            for _ in range(share):
                index = (index + 1) % len(cid_all)
                out = out + strategy(mq_all, cid_all, cid_all[index])
        return out
    if cid not in cid_all:
        return []
    return [mq_all[cid_all.index(cid) % len(mq_all)]]


def _mode(ctx: AssignmentContext, topic: str, group: str) -> tuple[str, int]:
    stored = ctx.modes.get(topic, group)
    if stored is not None:
        return stored["mode"], int(stored.get("popShareQueueNum") or 0)
    if topic.startswith(RETRY_PREFIX):
        return "PULL", 0
    return ctx.default_mode, ctx.default_pop_share_queue_num


async def query_assignment(ctx: AssignmentContext, conn: Any,
                           cmd: RemotingCommand) -> RemotingCommand:
    try:
        body = load_json_text((cmd.body or b"").decode("utf-8")) or {}
    except (ValueError, UnicodeDecodeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"bad QueryAssignmentRequestBody: {exc}")
    topic = str(body.get("topic") or "")
    group = str(body.get("consumerGroup") or "")
    cid = str(body.get("clientId") or "")
    model = str(body.get("messageModel") or "CLUSTERING")
    strategy_name = str(body.get("strategyName") or "")
    mode, share = _mode(ctx, topic, group)
    queues = await _assign(ctx, topic, group, cid, model, strategy_name, mode, share)
    if queues is None:
        return cmd.response(ResponseCode.SUCCESS, body=b"{}")
    assignments = [{"messageQueue": {"brokerName": b, "queueId": q, "topic": t}, "mode": mode}
                   for t, b, q in dict.fromkeys(queues)]
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(
        {"messageQueueAssignments": assignments}).encode("utf-8"))


async def _assign(ctx: AssignmentContext, topic: str, group: str, cid: str, model: str,
                  strategy_name: str, mode: str, share: int) -> list[MessageQueue] | None:
    route = await ctx.route_queues(topic) if topic else None
    if route is None:
        return None
    mq_all = sorted((topic, broker, q) for broker, n in route for q in range(n))
    if model == "BROADCASTING":
        return mq_all
    if not ctx.server_load_balancer_enable:
        return mq_all
    cid_all = ctx.consumers.client_ids(group)
    if not cid_all:
        return None
    strategy = STRATEGIES.get(strategy_name)
    if strategy is None or not mq_all:
        return None
    if mode == "POP":
        return allocate_for_pop(strategy, mq_all, cid_all, cid, share)
    return strategy(mq_all, cid_all, cid)


async def set_request_mode(ctx: AssignmentContext, conn: Any,
                           cmd: RemotingCommand) -> RemotingCommand:
    try:
        body = load_json_text((cmd.body or b"").decode("utf-8")) or {}
    except (ValueError, UnicodeDecodeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"bad SetMessageRequestModeRequestBody: {exc}")
    topic = str(body.get("topic") or "")
    group = str(body.get("consumerGroup") or "")
    if topic.startswith(RETRY_PREFIX):
        return cmd.response(ResponseCode.NO_PERMISSION,
                            remark="retry topic is not allowed to set mode")
    if ctx.topics.get(topic) is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
    if await ctx.run(ctx.subgroups.ensure, group) is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                            remark="subscription group does not exist")
    await ctx.run(ctx.modes.set, topic, group, str(body.get("mode") or "PULL"),
                  int(body.get("popShareQueueNum") or 0))
    return cmd.response(ResponseCode.SUCCESS)
