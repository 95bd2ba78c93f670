"""The name server's processors: routes (105), cluster info (106), topic list (206), the brokers'
REGISTER_BROKER (103) / UNREGISTER_BROKER (104), an operator's WIPE_WRITE_PERM_OF_BROKER (205) /
ADD_WRITE_PERM_OF_BROKER (327), the KV config (100-102, 219) and the name server's own settings
(318, 319). Each takes the ``NamesrvContext`` (``context``); what they answer from is in
``routes`` (the route table), ``kvconfig`` and ``settings``, whose docstrings give the rules.
"""
from __future__ import annotations

import json
import logging
import zlib
from typing import TYPE_CHECKING, Any

from ...config import parse_properties
from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from .kvconfig import ORDER_TOPIC_CONFIG, kv_table_body
from .routes import local_broker_addrs, parse_register_body, route_body
from .settings import LIVE, PATHS

if TYPE_CHECKING:
    from .context import NamesrvContext

log = logging.getLogger(__name__)


async def get_route(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    # a route lookup never creates a topic (RocketMQ 4.9.7): only a send may, with
    # ``autoCreateTopicEnable``, after the client followed TBW102's route
    tc = ctx.local.topics.get(topic) if ctx.local is not None else None
    if tc is None and topic not in ctx.table.topic_names():
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                            remark=f"No topic route info in name server for the topic: {topic}")
    return cmd.response(ResponseCode.SUCCESS,
                        body=route_body(ctx.local, tc, ctx.table, topic, ctx.perms,
                                        ctx.order_conf if ctx.settings.order_message_enable else None))


async def cluster_info(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    addr_table: dict[str, dict] = {}
    clusters: dict[str, set[str]] = {}
    for name, (cluster, addrs) in ctx.table.brokers().items():
        addr_table[name] = {"brokerAddrs": {str(k): v for k, v in addrs.items()},
                            "brokerName": name, "cluster": cluster}
        clusters.setdefault(cluster, set()).add(name)
    if ctx.local is not None:
        cfg = ctx.local.config
        addr_table[cfg.broker_name] = {"brokerAddrs": local_broker_addrs(ctx.local, ctx.table),
                                       "brokerName": cfg.broker_name,
                                       "cluster": cfg.cluster_name}
        clusters.setdefault(cfg.cluster_name, set()).add(cfg.broker_name)
    body = {"brokerAddrTable": addr_table,
            "clusterAddrTable": {c: sorted(n) for c, n in clusters.items()}}
    return cmd.response(ResponseCode.SUCCESS,
                        body=json.dumps(body, separators=(",", ":")).encode())


async def topic_list(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    names = ctx.table.topic_names()
    if ctx.local is not None:
        names |= {t.topic_name for t in ctx.local.topics.topics()}
    return cmd.response(ResponseCode.SUCCESS,
                        body=json.dumps({"topicList": sorted(names)}).encode())


async def register(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    crc = cmd.get_int("bodyCrc32", 0) or 0
    if crc and (zlib.crc32(cmd.body or b"") & 0x7FFFFFFF) != crc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark="crc32 not match")
    try:
        topics, version = parse_register_body(cmd.body or b"", cmd.get_bool("compressed"))
    except (ValueError, UnicodeDecodeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"Failed to decode RegisterBrokerBody: {exc}")
    name = cmd.require_str("brokerName")
    broker_id = cmd.get_int("brokerId", 0) or 0
    ctx.table.register(cmd.require_str("clusterName"), cmd.require_str("brokerAddr"), name,
                       broker_id, topics, version, cmd.get_str("haServerAddr") or "", channel=conn)
    order = ctx.kv.namespace(ORDER_TOPIC_CONFIG)  # RegisterBrokerResult.kvTable; none: no body
    answer: dict[str, str] = {}  # a slave learns its master (RocketMQ: absent when none)
    if broker_id != 0:
        local = ctx.local
        master: tuple[str, str] | None
        if local is not None and name == local.config.broker_name and \
                getattr(local.config, "broker_id", 0) == 0:
            ha = local.ha_server_addr() if local.ha_server_addr is not None else None
            master = (ha or "", local.config.broker_addr)
        else:
            master = ctx.table.master_of(name)
        if master is not None:
            if master[0]:
                answer["haServerAddr"] = master[0]
            answer["masterAddr"] = master[1]
    return cmd.response(ResponseCode.SUCCESS, answer,
                        body=kv_table_body(order) if order is not None else b"")


async def unregister(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ctx.table.unregister(cmd.require_str("brokerAddr"), cmd.require_str("brokerName"),
                     cmd.get_int("brokerId", 0) or 0)
    return cmd.response(ResponseCode.SUCCESS)


async def write_perm(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.require_str("brokerName")
    wipe = cmd.code == RequestCode.WIPE_WRITE_PERM_OF_BROKER
    count = ctx.table.operate_write_perm(name, wipe)
    if ctx.local is not None and ctx.perms is not None and name == ctx.local.config.broker_name:
        count += ctx.perms.operate(ctx.local.topics, wipe)
    log.info("%s write perm of broker %s from %s: %d topics",
             "wipe" if wipe else "add", name, getattr(conn, "peer", "?"), count)
    return cmd.response(ResponseCode.SUCCESS,
                        {"wipeTopicCount" if wipe else "addTopicCount": count})


async def put_kv(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ns, key = cmd.get_str("namespace"), cmd.get_str("key")
    if ns is None or key is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark="namespace or key is null")
    value = cmd.get_str("value")
    if value is None:  # RocketMQ's header check (@CFNotNull); an empty value is a value
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark="the custom field <value> is null")
    ctx.kv.put(ns, key, value)
    log.info("KV config put: namespace %s key %s value %s", ns, key, value)
    ctx.kv_changed(ns)
    return cmd.response(ResponseCode.SUCCESS)


async def get_kv(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ns, key = cmd.require_str("namespace"), cmd.require_str("key")
    value = ctx.kv.get(ns, key)
    if value is None:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            remark=f"No config item, Namespace: {ns} Key: {key}")
    return cmd.response(ResponseCode.SUCCESS, {"value": value})


async def delete_kv(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ns, key = cmd.require_str("namespace"), cmd.require_str("key")
    ctx.kv.delete(ns, key)
    log.info("KV config delete: namespace %s key %s", ns, key)
    ctx.kv_changed(ns)
    return cmd.response(ResponseCode.SUCCESS)


async def kv_list(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ns = cmd.require_str("namespace")
    table = ctx.kv.namespace(ns)
    if table is None:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                            remark=f"No config item, Namespace: {ns}")
    return cmd.response(ResponseCode.SUCCESS, body=kv_table_body(table))


async def get_namesrv_config(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, body=ctx.settings.to_properties().encode("utf-8"))


async def update_namesrv_config(ctx: NamesrvContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    try:
        props = parse_properties((cmd.body or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"string2Properties error: {exc}")
    if any(k in props for k in PATHS):
        return cmd.response(ResponseCode.NO_PERMISSION, remark="Can not update config path")
    refused = sorted(k for k in props if k not in LIVE)
    if refused:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"name server settings that cannot change live: "
                                   f"{', '.join(refused)} (can: {', '.join(LIVE)})")
    value = props.get("orderMessageEnable")
    if value is not None:
        if value.lower() not in ("true", "false"):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"orderMessageEnable must be true or false, not {value!r}")
        ctx.settings.order_message_enable = value.lower() == "true"
    return cmd.response(ResponseCode.SUCCESS)
