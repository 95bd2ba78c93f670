"""PULL_MESSAGE (11) and RocketMQ 5's LITE_PULL_MESSAGE (361, the same request from a
``DefaultLitePullConsumer``; refused when ``litePullMessageEnable`` is off) with tag
subscriptions, the commit-offset flag and long polling.

Theory of operation: the handler reads the queue through ``store.get_message`` on the executor
and maps the store's ``GetStatus`` to RocketMQ's pull response codes (as 4.9's
``PullMessageProcessor``). When nothing is there and the request carries the SUSPEND flag, the
coroutine parks in the ``PullHoldService`` until the reput reports an arrival on that queue or
``suspendTimeoutMillis`` passes, then answers with what the reput thread read for it (or reads
again); a timeout answers PULL_NOT_FOUND. Arrivals the subscription (tags or SQL92) rejects do
not end the hold — as RocketMQ's hold service checks an arrival against the request's filter
before waking it — the read position moves past them and the request waits on. The COMMIT_OFFSET flag commits ``commitOffset`` for the group on
the first pass, before any hold. Every response carries ``suggestWhichBrokerId``,
``nextBeginOffset``, ``minOffset`` and ``maxOffset`` as strings; a FOUND body is the stored
records byte for byte, one after another.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...remoting.codes import (PERM_READ, PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_SUBSCRIPTION,
                               PULL_FLAG_SUSPEND, RequestCode, ResponseCode)
from ...remoting.command import RemotingCommand
from ..replication import suggest_broker_id
from .sql92 import PullRefused, pull_subscription

if TYPE_CHECKING:
    from ..contexts import PullContext

MAX_PULL_MSGS = 1024  # cap of maxMsgNums
FORBIDDEN_BROKER = 1  # ForbiddenType.BROKER_FORBIDDEN


def topic_refusal(cmd: RemotingCommand, topic: str, tc: Any, reading: str | None = None
                  ) -> RemotingCommand | None:
    """RocketMQ's answer to a request naming ``topic`` whose config ``tc`` the broker has not
    (TOPIC_NOT_EXIST), or — ``reading``: "pulling", "peeking" — cannot be read (NO_PERMISSION);
    None to go on. Pull, pop and peek, and the pop acks (existence only), ask here."""
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                            remark=f"topic[{topic}] not exist, apply first please!")
    if reading is not None and not tc.perm & PERM_READ:
        return cmd.response(ResponseCode.NO_PERMISSION,
                            remark=f"the topic[{topic}] {reading} message is forbidden")
    return None


def pull_code(status_name: str, queue_offset: int) -> int:
    if status_name == "FOUND":
        return ResponseCode.SUCCESS
    if status_name in ("MESSAGE_WAS_REMOVING", "NO_MATCHED_MESSAGE"):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status_name in ("NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"):
        return ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status_name in ("OFFSET_FOUND_NULL", "OFFSET_OVERFLOW_ONE"):
        return ResponseCode.PULL_NOT_FOUND
    if status_name in ("OFFSET_OVERFLOW_BADLY", "OFFSET_TOO_SMALL"):
        return ResponseCode.PULL_OFFSET_MOVED
    return ResponseCode.SYSTEM_ERROR


# statuses whose nextBeginOffset a master corrects and a slave leaves at the request's offset
_SLAVE_KEEPS_OFFSET = frozenset({"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "NO_MESSAGE_IN_QUEUE",
                                 "NO_MATCHED_LOGIC_QUEUE", "OFFSET_FOUND_NULL"})


async def pull(ctx: PullContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    started = time.monotonic()
    group = cmd.require_str("consumerGroup")
    topic = cmd.require_str("topic")
    queue_id = cmd.require_int("queueId")
    offset = cmd.require_int("queueOffset")
    max_nums = max(1, min(cmd.get_int("maxMsgNums", 32) or 32, MAX_PULL_MSGS))
    sys_flag = cmd.get_int("sysFlag", 0) or 0
    if cmd.code == RequestCode.LITE_PULL_MESSAGE and not ctx.config.lite_pull_message_enable:
        return cmd.response(ResponseCode.NO_PERMISSION, {"forbiddenType": FORBIDDEN_BROKER},
                            remark=f"the broker[{ctx.config.host}] for lite pull consumer is "
                                   f"forbidden")
    tc = ctx.topics.get(topic)
    refused = topic_refusal(cmd, topic, tc, "pulling")
    if refused is not None:
        return refused
    if not 0 <= queue_id < tc.read_queue_nums:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
    try:
        psub = pull_subscription(ctx, cmd, group, topic)
    except PullRefused as exc:
        return cmd.response(exc.code, remark=exc.remark)
    expr, message_filter = psub.tags, psub.message_filter
    if sys_flag & PULL_FLAG_COMMIT_OFFSET and not ctx.is_slave:  # a slave never commits
        commit = cmd.get_int("commitOffset", -1)
        if commit is not None and commit >= 0:
            ctx.offsets.commit(group, topic, queue_id, commit)
    hold_s = 0.0
    if sys_flag & PULL_FLAG_SUSPEND:
        if ctx.config.long_polling_enable:
            hold_s = (cmd.get_int("suspendTimeoutMillis", 15_000) or 0) / 1000.0
        else:
            hold_s = ctx.config.short_polling_time_ms / 1000.0
    deadline = started + hold_s
    store = ctx.store

    at = offset  # where the next read starts (moves on past arrivals the filter rejects)

    def read() -> Any:
        return store.get_message(group, topic, queue_id, at, max_nums, expr, decode=False,
                                 message_filter=message_filter)
    g = await ctx.run(read)
    held = False
    while True:
        code = pull_code(g.status.name, at)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or ctx.hold.closed:
            break
        if code == ResponseCode.PULL_RETRY_IMMEDIATELY and held and \
                g.status.name == "NO_MATCHED_MESSAGE" and g.next_begin_offset > at:
            # what arrived while held does not match the subscription: RocketMQ's hold
            # service only wakes a request for a matching arrival, so keep holding
            at = g.next_begin_offset
        elif code != ResponseCode.PULL_NOT_FOUND:
            break
        held = True
        woken = await ctx.hold.wait(topic, queue_id, at, remaining, read)
        # the reput thread may have read for us; otherwise read again on the executor
        g = woken if hasattr(woken, "status") else await ctx.run(read)
    group_cfg = ctx.subgroups.get(group) if ctx.subgroups is not None else None
    suggest = suggest_broker_id(ctx.config.slave_read_enable,
                                getattr(g, "suggest_pulling_from_slave", False), group_cfg)
    next_begin = g.next_begin_offset
    if ctx.is_slave and g.status.name in _SLAVE_KEEPS_OFFSET:
        # offsetCheckInSlave=false: a slave never moves a consumer's offset
        next_begin = offset
        if code == ResponseCode.PULL_OFFSET_MOVED:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = int(getattr(group_cfg, "broker_id", 0))
    fields = {"suggestWhichBrokerId": suggest, "nextBeginOffset": next_begin,
              "minOffset": g.min_offset, "maxOffset": g.max_offset}
    body = b"".join(g.buffers) if code == ResponseCode.SUCCESS else b""
    ctx.stats.record_get(group, topic, len(g.buffers) if body else 0, len(body))
    if code == ResponseCode.SUCCESS:
        return cmd.response(code, fields, body=body)
    return cmd.response(code, fields, remark=g.status.name)
