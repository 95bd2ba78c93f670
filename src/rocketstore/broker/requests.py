"""Which processor answers which request code: the broker's and the name server's tables.

Each row is ``code: (context kind, processor)``; a processor is a module-level
``async def name(ctx, conn, cmd)`` (see ``contexts``). To find, read or test the processor of
a request code, look it up here and open its module: nothing else decides the routing. Codes
missing here get REQUEST_CODE_NOT_SUPPORTED (``server``).
"""
from __future__ import annotations

from functools import partial
from typing import Any, Awaitable, Callable

from ..remoting.codes import RequestCode as C
from .acl import service as acl
from .admin import configs, consumers as admin_consumers, groups, runtime, topics
from .namesrv import admin as namesrv_admin, processors as namesrv
from .processors import (assignment, client, locks, pop, pull, recall, reply, send, sql92,
                         transaction)

Handler = Callable[[Any, Any], Awaitable[Any]]  # (conn, cmd) -> response | None

BROKER: dict[int, tuple[str, Callable[..., Awaitable[Any]]]] = {
    # producers (SendContext)
    C.SEND_MESSAGE: ("send", send.send),
    C.SEND_MESSAGE_V2: ("send", send.send),
    C.SEND_BATCH_MESSAGE: ("send", send.send),
    C.CONSUMER_SEND_MSG_BACK: ("send", send.send_back),
    C.SEND_REPLY_MESSAGE: ("send", reply.send_reply),
    C.SEND_REPLY_MESSAGE_V2: ("send", reply.send_reply),
    C.END_TRANSACTION: ("send", transaction.end_transaction),
    C.RECALL_MESSAGE: ("send", recall.recall),
    # consumers (PullContext)
    C.PULL_MESSAGE: ("pull", pull.pull),
    C.LITE_PULL_MESSAGE: ("pull", pull.pull),  # RocketMQ 5's DefaultLitePullConsumer
    C.CHECK_CLIENT_CONFIG: ("pull", sql92.check_config),
    # RocketMQ 5 pop consumers (PopContext; one pop state with the gRPC door)
    C.POP_MESSAGE: ("pop", pop.pop),
    C.ACK_MESSAGE: ("pop", pop.ack),
    C.BATCH_ACK_MESSAGE: ("pop", pop.batch_ack),
    C.CHANGE_MESSAGE_INVISIBLETIME: ("pop", pop.change_invisible),
    C.NOTIFICATION: ("pop", pop.notification),
    C.POLLING_INFO: ("pop", pop.polling_info),
    C.PEEK_MESSAGE: ("pop", pop.peek),
    # RocketMQ 5 server-side rebalance (AssignmentContext)
    C.QUERY_ASSIGNMENT: ("assignment", assignment.query_assignment),
    C.SET_MESSAGE_REQUEST_MODE: ("assignment", assignment.set_request_mode),
    # clients: heartbeat, offsets, queries, queue locks (ClientContext)
    C.HEART_BEAT: ("client", client.heartbeat),
    C.UNREGISTER_CLIENT: ("client", client.unregister),
    C.GET_CONSUMER_LIST_BY_GROUP: ("client", client.consumer_list),
    C.QUERY_CONSUMER_OFFSET: ("client", client.query_offset),
    C.UPDATE_CONSUMER_OFFSET: ("client", client.update_offset),
    C.SEARCH_OFFSET_BY_TIMESTAMP: ("client", client.queue_offset),
    C.GET_MAX_OFFSET: ("client", client.queue_offset),
    C.GET_MIN_OFFSET: ("client", client.queue_offset),
    C.GET_EARLIEST_MSG_STORETIME: ("client", client.earliest_time),
    C.QUERY_MESSAGE: ("client", client.query_message),
    C.VIEW_MESSAGE_BY_ID: ("client", client.view_by_id),
    C.UPDATE_AND_CREATE_TOPIC: ("client", client.create_topic),
    C.LOCK_BATCH_MQ: ("client", locks.lock),
    C.UNLOCK_BATCH_MQ: ("client", locks.unlock),
    # operators: mqadmin and the console (AdminContext)
    C.GET_ALL_TOPIC_CONFIG: ("admin", topics.all_topic_config),
    C.GET_TOPIC_STATS_INFO: ("admin", topics.topic_stats),
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ("admin", topics.topic_list),
    C.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: ("admin", topics.system_topics),
    C.DELETE_TOPIC_IN_BROKER: ("admin", topics.delete_topic),
    C.CLEAN_UNUSED_TOPIC: ("admin", topics.clean_unused_topic),
    C.QUERY_TOPIC_CONSUME_BY_WHO: ("admin", topics.consume_by_who),
    C.QUERY_CONSUME_QUEUE: ("admin", topics.query_consume_queue),
    C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ("admin", groups.update_group),
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: ("admin", groups.all_groups),
    C.DELETE_SUBSCRIPTIONGROUP: ("admin", groups.delete_group),
    C.GET_CONSUMER_CONNECTION_LIST: ("admin", groups.consumer_connection),
    C.GET_PRODUCER_CONNECTION_LIST: ("admin", groups.producer_connection),
    C.GET_CONSUME_STATS: ("admin", groups.consume_stats),
    C.GET_ALL_CONSUMER_OFFSET: ("admin", groups.all_consumer_offsets),
    C.GET_ALL_DELAY_OFFSET: ("admin", groups.all_delay_offsets),
    C.INVOKE_BROKER_TO_RESET_OFFSET: ("admin", groups.reset_offset),
    C.GET_TOPIC_CONFIG: ("admin", configs.topic_config),
    C.GET_SUBSCRIPTIONGROUP_CONFIG: ("admin", configs.group_config),
    C.GET_BROKER_RUNTIME_INFO: ("admin", runtime.runtime_info),
    C.GET_BROKER_CONFIG: ("admin", runtime.get_config),
    C.UPDATE_BROKER_CONFIG: ("admin", runtime.update_config),
    C.GET_CONSUMER_RUNNING_INFO: ("admin", admin_consumers.running_info),
    C.CONSUME_MESSAGE_DIRECTLY: ("admin", admin_consumers.consume_directly),
    C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: ("admin", admin_consumers.consumer_status),
    # ACL accounts and white lists (AclContext)
    C.UPDATE_AND_CREATE_ACL_CONFIG: ("acl", acl.update_acl),
    C.DELETE_ACL_CONFIG: ("acl", acl.delete_acl),
    C.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: ("acl", acl.update_global_white),
    C.GET_BROKER_CLUSTER_ACL_INFO: ("acl", acl.acl_version),
    C.GET_BROKER_CLUSTER_ACL_CONFIG: ("acl", acl.acl_config),
}

NAMESRV: dict[int, Callable[..., Awaitable[Any]]] = {  # all take a NamesrvContext
    C.GET_ROUTEINFO_BY_TOPIC: namesrv.get_route,
    C.GET_BROKER_CLUSTER_INFO: namesrv.cluster_info,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: namesrv.topic_list,
    C.REGISTER_BROKER: namesrv.register,
    C.UNREGISTER_BROKER: namesrv.unregister,
    C.WIPE_WRITE_PERM_OF_BROKER: namesrv.write_perm,
    C.ADD_WRITE_PERM_OF_BROKER: namesrv.write_perm,
    C.PUT_KV_CONFIG: namesrv.put_kv,
    C.GET_KV_CONFIG: namesrv.get_kv,
    C.DELETE_KV_CONFIG: namesrv.delete_kv,
    C.GET_KVLIST_BY_NAMESPACE: namesrv.kv_list,
    C.GET_NAMESRV_CONFIG: namesrv.get_namesrv_config,
    C.UPDATE_NAMESRV_CONFIG: namesrv.update_namesrv_config,
    C.GET_TOPICS_BY_CLUSTER: namesrv_admin.topics_by_cluster,
    C.GET_SYSTEM_TOPIC_LIST_FROM_NS: namesrv_admin.system_topics,
    C.DELETE_TOPIC_IN_NAMESRV: namesrv_admin.delete_topic,
}


def broker_handlers(contexts: dict[str, Any]) -> dict[int, Handler]:
    """The broker's ``code -> handler(conn, cmd)``: each processor bound to its context
    (``contexts``: kind -> context, as ``wiring`` builds them)."""
    return {code: partial(fn, contexts[kind]) for code, (kind, fn) in BROKER.items()
            if kind in contexts}


def namesrv_handlers(ctx: Any) -> dict[int, Handler]:
    """The name server's ``code -> handler(conn, cmd)`` over one ``NamesrvContext``."""
    return {code: partial(fn, ctx) for code, fn in NAMESRV.items()}
