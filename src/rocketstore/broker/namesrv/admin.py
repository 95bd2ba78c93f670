"""Name-server admin requests about topics and clusters (RocketMQ 4.9.7 ``DefaultRequestProcessor``
over ``RouteInfoManager``), on ``rocketstore namesrv`` and on the name server of ``serve``.

====  ==================================  ==============================================
code  request                             answer
====  ==================================  ==============================================
 216  DELETE_TOPIC_IN_NAMESRV {topic,     SUCCESS; the topic leaves the routes of the
      clusterName}                        cluster's registered brokers (of every broker
                                          without a cluster). ``serve``'s own broker routes
                                          from its topic table, which
                                          DELETE_TOPIC_IN_BROKER already cleaned
 224  GET_TOPICS_BY_CLUSTER {cluster}     TopicList of the cluster's brokers' topics;
                                          SYSTEM_ERROR "cluster X not exist" for a cluster
                                          no broker is in
 304  GET_SYSTEM_TOPIC_LIST_FROM_NS       TopicList {topicList: cluster and broker names,
                                          brokerAddr: a broker's address}
====  ==================================  ==============================================

They complete ``namesrv.handlers`` (routes, cluster info, topic list, registration, write
perms, settings; the KV config of ``kvconfig``). Answers cover every registered broker and,
on ``serve``, its own.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ..admin import views
from ..admin.topics import topic_list_body

if TYPE_CHECKING:
    from .context import NamesrvContext


def clusters(ctx: NamesrvContext) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, (cluster, _) in ctx.table.brokers().items():
        out.setdefault(cluster, set()).add(name)
    if ctx.local is not None:
        out.setdefault(ctx.local.config.cluster_name, set()).add(ctx.local.config.broker_name)
    return out


async def topics_by_cluster(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    cluster = cmd.require_str("cluster")
    names = clusters(ctx).get(cluster)
    if names is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"cluster {cluster} not exist")
    topics = set(ctx.table.topics_of(names))
    if ctx.local is not None and ctx.local.config.cluster_name == cluster:
        topics |= set(views.topic_names(ctx.local.topics))
    return cmd.response(ResponseCode.SUCCESS, body=topic_list_body(sorted(topics)))


async def system_topics(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    names: list[str] = []
    for cluster, brokers in sorted(clusters(ctx).items()):
        names += [cluster, *sorted(brokers)]
    addr = ctx.local.config.broker_addr if ctx.local is not None else None
    if addr is None:
        addrs = [a for _, (_, ids) in sorted(ctx.table.brokers().items()) for a in ids.values()]
        addr = addrs[0] if addrs else None
    return cmd.response(ResponseCode.SUCCESS, body=topic_list_body(names, addr))


async def delete_topic(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    cluster = (cmd.get_str("clusterName") or "").strip()
    ctx.table.delete_topic(topic, clusters(ctx).get(cluster, set()) if cluster else None)
    return cmd.response(ResponseCode.SUCCESS)


