"""Name-server requests: GET_ROUTEINFO_BY_TOPIC (105) and GET_BROKER_CLUSTER_INFO (106).

Theory of operation: the name server runs in the broker's process (its own port) and answers
from the broker's own topic table:
one broker (id 0, master) holds every queue. An unknown topic is created with
``default_topic_queue_nums`` queues when ``auto_create_topic_enable`` is on (``%RETRY%`` and
``%DLQ%`` topics get one queue), as a broker with ``autoCreateTopicEnable`` would after the
client's first send through ``TBW102``; otherwise TOPIC_NOT_EXIST. Route bodies are standard
JSON (string map keys), which every checked client parses.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand

if TYPE_CHECKING:
    from .controller import Broker

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def queue_nums_for(broker: "Broker", topic: str) -> int:
    if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
        return 1
    return broker.config.default_topic_queue_nums


def ensure_topic(broker: "Broker", topic: str, queue_nums: int | None = None):
    """The topic's config, auto-creating it if allowed; None when it does not exist."""
    tc = broker.topics.get(topic)
    if tc is None and (broker.config.auto_create_topic_enable or topic.startswith(RETRY_PREFIX)
                       or topic.startswith(DLQ_PREFIX)):
        n = queue_nums or queue_nums_for(broker, topic)
        tc = broker.topics.create(topic, min(n, 1024) if n > 0 else queue_nums_for(broker, topic))
    return tc


def route_body(broker: "Broker", tc: Any) -> bytes:
    cfg = broker.config
    route = {
        "brokerDatas": [{"brokerAddrs": {"0": cfg.broker_addr}, "brokerName": cfg.broker_name,
                         "cluster": cfg.cluster_name}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": cfg.broker_name, "perm": tc.perm,
                        "readQueueNums": tc.read_queue_nums, "topicSysFlag": tc.topic_sys_flag,
                        "topicSynFlag": tc.topic_sys_flag,
                        "writeQueueNums": tc.write_queue_nums}],
    }
    if tc.order:
        route["orderTopicConf"] = f"{cfg.broker_name}:{tc.write_queue_nums}"
    return json.dumps(route, separators=(",", ":")).encode("utf-8")


def handlers(broker: "Broker") -> dict[int, Any]:
    async def get_route(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.require_str("topic")
        try:
            tc = ensure_topic(broker, topic)
        except ValueError:
            tc = None
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                remark=f"No topic route info in name server for the topic: {topic}")
        return cmd.response(ResponseCode.SUCCESS, body=route_body(broker, tc))

    async def cluster_info(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        cfg = broker.config
        body = {"brokerAddrTable": {cfg.broker_name: {
                    "brokerAddrs": {"0": cfg.broker_addr}, "brokerName": cfg.broker_name,
                    "cluster": cfg.cluster_name}},
                "clusterAddrTable": {cfg.cluster_name: [cfg.broker_name]}}
        return cmd.response(ResponseCode.SUCCESS,
                            body=json.dumps(body, separators=(",", ":")).encode())

    return {RequestCode.GET_ROUTEINFO_BY_TOPIC: get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: cluster_info}
