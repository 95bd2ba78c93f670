"""Consumer/producer-group admin requests (RocketMQ 4.9.7 ``AdminBrokerProcessor``).

====  ====================================  ================================================
code  request                               body of the answer (fastjson)
====  ====================================  ================================================
  43  GET_ALL_CONSUMER_OFFSET               {offsetTable: {"topic@group": {queueId: offset}}}
  45  GET_ALL_DELAY_OFFSET                  {offsetTable: {level: offset}}
 200  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP   none (request body: SubscriptionGroupConfig)
 201  GET_ALL_SUBSCRIPTIONGROUP_CONFIG      SubscriptionGroupWrapper
 203  GET_CONSUMER_CONNECTION_LIST          ConsumerConnection; CONSUMER_NOT_ONLINE (206)
 204  GET_PRODUCER_CONNECTION_LIST          ProducerConnection; SYSTEM_ERROR when unknown
 207  DELETE_SUBSCRIPTIONGROUP              none ({groupName, removeOffset})
 208  GET_CONSUME_STATS {consumerGroup, topic?}  ConsumeStats {consumeTps, offsetTable}
 222  INVOKE_BROKER_TO_RESET_OFFSET         ResetOffsetBody {offsetTable: {MessageQueue: offset}}
====  ====================================  ================================================

Reset offset (mqadmin ``resetOffsetByTime``): the new offset of each write queue is the first
message stored at or after the timestamp (``-1`` = the max offset); unless forced, a queue
keeps its committed offset when that is already lower. The broker commits the new offsets and
sends RESET_CONSUMER_CLIENT_OFFSET (220, oneway, body ``ResetOffsetBody`` — or the list form
``ResetOffsetBodyForC`` that the C++ client parses) to every online client of the group, which
drops what it has in flight and pulls from there. RocketMQ picks the list form only when the
*requesting tool* is C++, so a C++ consumer never understands a reset from Java's mqadmin; here
each consumer gets the form for its own language, and a C++ tool gets the list form for all.
With nobody online it answers CONSUMER_NOT_ONLINE, which makes mqadmin fall back to committing
offsets itself (codes 208, 29, 15), exactly as against RocketMQ. One more deliberate difference:
RocketMQ refuses the whole reset when the group has never committed on one of the queues; here
such a queue is reset too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...remoting import fastjson
from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from . import views
from ..state.subgroups import SubscriptionGroupConfig

if TYPE_CHECKING:
    from ..contexts import AdminContext


def consume_stats_body(view: views.ConsumeStatsView) -> bytes:
    table = {fastjson.message_queue_key(q.topic, q.broker_name, q.queue_id):
             {"brokerOffset": q.broker_offset, "consumerOffset": q.consumer_offset,
              "lastTimestamp": q.last_timestamp} for q in view.queues}
    return fastjson.dumps({"consumeTps": float(view.consume_tps),
                           "offsetTable": table}).encode("utf-8")


def reset_offset_body(topic: str, broker_name: str, offsets: dict[int, int],
                      for_cpp: bool = False) -> bytes:
    if for_cpp:  # ResetOffsetBodyForC: a list of MessageQueueForC
        rows = [{"brokerName": broker_name, "offset": off, "queueId": qid, "topic": topic}
                for qid, off in sorted(offsets.items())]
        return fastjson.dumps({"offsetTable": rows}).encode("utf-8")
    table = {fastjson.message_queue_key(topic, broker_name, qid): off
             for qid, off in sorted(offsets.items())}
    return fastjson.dumps({"offsetTable": table}).encode("utf-8")


def reset_offsets(store: Any, offsets: Any, topic_config: Any, group: str, timestamp: int,
                  force: bool) -> dict[int, int]:
    """The offset each write queue of a topic is reset to (see the module doc)."""
    topic = topic_config.topic_name
    out = {}
    for qid in range(topic_config.write_queue_nums):
        if timestamp == -1:
            target = store.get_max_offset_in_queue(topic, qid)
        else:
            target = store.get_offset_in_queue_by_time(topic, qid, timestamp)
        target = max(0, target)
        committed = offsets.query(group, topic, qid)
        out[qid] = target if force or committed < 0 or target < committed else committed
    return out


async def update_group(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    if not cmd.body:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark="the request has no SubscriptionGroupConfig body")
    try:
        sg = SubscriptionGroupConfig.from_json(fastjson.loads(cmd.body))
    except (ValueError, UnicodeDecodeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"bad subscription group: {exc}")
    await ctx.run(ctx.subgroups.update, sg)
    return cmd.response(ResponseCode.SUCCESS)


async def all_groups(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS,
                        body=fastjson.dumps(ctx.subgroups.wrapper()).encode("utf-8"))


async def delete_group(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("groupName")
    await ctx.run(ctx.subgroups.delete, group)
    if cmd.get_bool("removeOffset"):
        ctx.offsets.remove_group(group)
        await ctx.run(ctx.offsets.persist)
    return cmd.response(ResponseCode.SUCCESS)


async def consumer_connection(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    data = views.consumer_connection(ctx.consumers, group)
    if data is None:
        return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                            remark=f"the consumer group[{group}] not online")
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(data).encode("utf-8"))


async def producer_connection(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("producerGroup")
    data = views.producer_connection(ctx.producers, group)
    if data is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"the producer group[{group}] not exist")
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(data).encode("utf-8"))


async def consume_stats(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    topic = (cmd.get_str("topic") or "").strip() or None
    view = await ctx.run(views.consume_stats, ctx.store, ctx.topics, ctx.offsets,
                            ctx.consumers, ctx.config.broker_name, group, topic, ctx.stats)
    return cmd.response(ResponseCode.SUCCESS, body=consume_stats_body(view))


async def all_consumer_offsets(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    body = {"offsetTable": ctx.offsets.table()}
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode("utf-8"))


async def all_delay_offsets(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    table = dict(getattr(ctx.delay_offsets, "_table", {}))
    return cmd.response(ResponseCode.SUCCESS,
                        body=fastjson.dumps({"offsetTable": table}).encode("utf-8"))


async def reset_offset(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic, group = cmd.require_str("topic"), cmd.require_str("group")
    timestamp = cmd.require_int("timestamp")
    force = cmd.get_bool("isForce", False)
    for_cpp = cmd.language == "CPP"  # RocketMQ: the list body when the requester is C++
    tc = ctx.topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark="[reset-offset] reset offset failed, no topic in this "
                                   f"broker. topic={topic}")
    conns = ctx.consumers.connections(group)
    if not conns:
        return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                            remark="Consumer not online, so can not reset offset, Group: "
                                   f"{group} Topic: {topic} Timestamp: {timestamp}")
    new = await ctx.run(reset_offsets, ctx.store, ctx.offsets, tc, group,
                           timestamp, force)
    for qid, off in new.items():
        ctx.offsets.commit(group, topic, qid, off)
    info = ctx.consumers.group(group)
    langs = {id(ch.connection): ch.language for ch in info.channels.values()} if info else {}
    for c in conns:
        notify = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            {"topic": topic, "group": group, "timestamp": timestamp, "isForce": False},
            reset_offset_body(topic, ctx.config.broker_name, new,
                              for_cpp or langs.get(id(c)) == "CPP"),
            oneway=True, language="JAVA")
        try:
            c.notify(notify)
        except Exception:  # a closing connection: it goes away by itself
            pass
    return cmd.response(ResponseCode.SUCCESS,
                        body=reset_offset_body(topic, ctx.config.broker_name, new))


__all__ = ["consume_stats_body", "reset_offset_body", "reset_offsets"]
