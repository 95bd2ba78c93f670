"""Topic admin requests: 21, 202, 206, 215, 300, 305, 321 (RocketMQ 4.9.7 ``AdminBrokerProcessor``).

====  ===============================  ==================================================
code  request                          body of the answer (fastjson, see ``fastjson``)
====  ===============================  ==================================================
  21  GET_ALL_TOPIC_CONFIG             TopicConfigSerializeWrapper {dataVersion, topicConfigTable}
 202  GET_TOPIC_STATS_INFO {topic}     TopicStatsTable {offsetTable: {MessageQueue: TopicOffset}}
 206  GET_ALL_TOPIC_LIST_FROM_NAMESRV  TopicList {topicList}        (also on the name server)
 215  DELETE_TOPIC_IN_BROKER {topic}   none; system topics refused
 300  QUERY_TOPIC_CONSUME_BY_WHO       GroupList {groupList}
 305  GET_SYSTEM_TOPIC_LIST_FROM_BROKER TopicList {topicList}
 321  QUERY_CONSUME_QUEUE              QueryConsumeQueueResponseBody
====  ===============================  ==================================================

Theory of operation: each handler reads the request header, computes the numbers with the pure
functions of ``views`` on the store executor, and encodes RocketMQ's bean with
``fastjson.dumps``. Missing things answer as RocketMQ does: TOPIC_NOT_EXIST for stats of an
unknown topic, SYSTEM_ERROR "<q>@<topic> is not exist!" for an unknown consume queue.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...remoting import fastjson
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from . import views
from ..state.topics import validate_topic

if TYPE_CHECKING:
    from ..contexts import AdminContext


def topic_stats_body(rows: list[views.QueueStats]) -> bytes:
    table = {fastjson.message_queue_key(q.topic, q.broker_name, q.queue_id):
             {"lastUpdateTimestamp": q.last_update_timestamp, "maxOffset": q.max_offset,
              "minOffset": q.min_offset} for q in rows}
    return fastjson.dumps({"offsetTable": table}).encode("utf-8")


def topic_list_body(names: list[str], broker_addr: str | None = None) -> bytes:
    return fastjson.dumps({"brokerAddr": broker_addr, "topicList": names}).encode("utf-8")


def topic_config_body(ctx: AdminContext) -> bytes:
    table = {tc.topic_name: tc.to_json() for tc in ctx.topics.topics()}
    counter = getattr(ctx.topics, "_counter", 0)
    return fastjson.dumps({"dataVersion": {"counter": counter, "timestamp": ctx.stats.boot_ms},
                           "topicConfigTable": table}).encode("utf-8")


async def all_topic_config(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=topic_config_body(ctx))


async def topic_stats(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    tc = ctx.topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist")
    rows = await ctx.run(views.topic_stats, ctx.store, tc, ctx.config.broker_name)
    return cmd.response(ResponseCode.SUCCESS, body=topic_stats_body(rows))


async def topic_list(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS,
                        body=topic_list_body(views.topic_names(ctx.topics)))


async def system_topics(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    names = [t for t in views.topic_names(ctx.topics) if views.is_system_topic(t, ctx.config)]
    return cmd.response(ResponseCode.SUCCESS, body=topic_list_body(names))


async def delete_topic(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    try:
        validate_topic(topic)
    except ValueError as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
    if views.is_system_topic(topic, ctx.config):
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"The topic[{topic}] is conflict with system topic.")
    await ctx.run(ctx.topics.delete, topic)
    await ctx.run(ctx.store.delete_topic, topic)
    return cmd.response(ResponseCode.SUCCESS)


async def clean_unused_topic(ctx: AdminContext, conn: Any, cmd: RemotingCommand
                             ) -> RemotingCommand:
    """CLEAN_UNUSED_TOPIC (316, ``mqadmin cleanUnusedTopic``), as RocketMQ's
    ``cleanUnusedTopic``: the ConsumeQueues of every topic the topic table no longer holds
    (system topics kept) are dropped, as ``delete_topic`` drops one; the CommitLog keeps the
    messages until they expire."""
    def clean() -> int:
        keep = {tc.topic_name for tc in ctx.topics.topics()}
        unused = [t for t in ctx.store.topics()
                  if t not in keep and not views.is_system_topic(t, ctx.config)]
        return sum(ctx.store.delete_topic(t) for t in unused)
    await ctx.run(clean)
    return cmd.response(ResponseCode.SUCCESS)


async def consume_by_who(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    groups = views.groups_of_topic(ctx.offsets, ctx.consumers, topic)
    return cmd.response(ResponseCode.SUCCESS,
                        body=fastjson.dumps({"groupList": groups}).encode("utf-8"))


async def query_consume_queue(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic, qid = cmd.require_str("topic"), cmd.require_int("queueId")
    index, count = cmd.get_int("index", 0) or 0, cmd.get_int("count", 10) or 0
    group = cmd.get_str("consumerGroup")
    s = ctx.store

    def read() -> tuple[Any, int, int]:
        units = s.read_consume_queue(topic, qid, index, min(count, 10_000))
        return (units, s.get_min_offset_in_queue(topic, qid),
                s.get_max_offset_in_queue(topic, qid))
    units, lo, hi = await ctx.run(read)
    if units is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{qid}@{topic} is not exist!")
    body: dict[str, Any] = {"maxQueueIndex": hi, "minQueueIndex": lo}
    if group is not None:
        info = ctx.consumers.group(group)
        sub = info.subscriptions.get(topic) if info is not None else None
        if sub is None:
            body["filterData"] = f"{group}@{topic} is not online!"
        else:
            body["subscriptionData"] = views.subscription_data(sub)
            body["filterData"] = "null"
    if not units:
        return cmd.response(ResponseCode.SUCCESS,
                            remark=f"Index {index} of {qid}@{topic} is not exist!")
    body["queueData"] = [{"eval": False, "physicOffset": off, "physicSize": size,
                          "tagsCode": tags} for off, size, tags in units]
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode("utf-8"))


__all__ = ["topic_stats_body", "topic_list_body"]
