"""Name-server admin requests (RocketMQ 4.9.7 ``DefaultRequestProcessor``).

====  ==================================  ==============================================
code  request                             answer
====  ==================================  ==============================================
 216  DELETE_TOPIC_IN_NAMESRV {topic}     SUCCESS (routes come from the broker's table,
                                          which DELETE_TOPIC_IN_BROKER already cleaned)
 224  GET_TOPICS_BY_CLUSTER {cluster}     TopicList; SYSTEM_ERROR for another cluster
 304  GET_SYSTEM_TOPIC_LIST_FROM_NS       TopicList {topicList: cluster and broker names,
                                          brokerAddr}
====  ==================================  ==============================================

They complete ``namesrv.handlers`` (routes, cluster info, topic list, registration, write
perms; the KV config of ``kvconfig``) for the
name server that ``rocketstore serve`` runs beside its broker; answers are about that broker.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from . import admin_views as views
from .admin_topics import topic_list_body

if TYPE_CHECKING:
    from .controller import Broker


def handlers(broker: "Broker") -> dict[int, Any]:
    cfg = broker.config

    async def topics_by_cluster(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cluster = cmd.require_str("cluster")
        if cluster != cfg.cluster_name:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"cluster {cluster} not exist")
        return cmd.response(ResponseCode.SUCCESS,
                            body=topic_list_body(views.topic_names(broker.topics)))

    async def system_topics(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS,
                            body=topic_list_body([cfg.broker_name, cfg.cluster_name],
                                                 cfg.broker_addr))

    async def delete_topic(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cmd.require_str("topic")
        return cmd.response(ResponseCode.SUCCESS)

    return {
        RequestCode.GET_TOPICS_BY_CLUSTER: topics_by_cluster,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: system_topics,
        RequestCode.DELETE_TOPIC_IN_NAMESRV: delete_topic,
    }


__all__ = ["handlers"]
