"""One topic's or one group's config, as RocketMQ 5's proxy and admin tools read them: 351, 352.

====  ====================================  ===============================================
code  request                               body of the answer
====  ====================================  ===============================================
 351  GET_TOPIC_CONFIG {topic, lo}           TopicConfigAndQueueMapping: the TopicConfig
                                            (``attributes`` included) + ``mappingDetail``
 352  GET_SUBSCRIPTIONGROUP_CONFIG {group}   SubscriptionGroupConfig
====  ====================================  ===============================================

RocketMQ 5's proxy (cluster mode) asks 351 for a topic's ``message.type`` before it routes or
accepts a send (a topic it cannot read is UNSPECIFIED: clients refuse its route), and 352 for a
group's ``consumeMessageOrderly`` and ``retryMaxTimes`` before FIFO pops and retries. Answers as
5.3.3's ``AdminBrokerProcessor``: TOPIC_NOT_EXIST "No topic in this broker. topic: T"; a group
that does not exist is created when ``autoCreateSubscriptionGroup`` (as
``findSubscriptionGroupConfig``), else SUBSCRIPTION_GROUP_NOT_EXIST "No group in this broker".
No static-topic mapping is kept here: ``mappingDetail`` is always null (left out, as fastjson does).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...remoting import fastjson
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand

if TYPE_CHECKING:
    from ..contexts import AdminContext


async def topic_config(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    tc = ctx.topics.get(topic)
    if tc is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                            remark=f"No topic in this broker. topic: {topic}")
    body = dict(tc.to_json(), attributes=dict(tc.attributes))  # null mappingDetail: omitted
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(body).encode("utf-8"))


async def group_config(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("group")
    sg = await ctx.run(ctx.subgroups.ensure, group)
    if sg is None:
        return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                            remark="No group in this broker")
    return cmd.response(ResponseCode.SUCCESS, body=fastjson.dumps(sg.to_json()).encode("utf-8"))
