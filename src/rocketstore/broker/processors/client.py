"""Offsets, queries, clients and topics: request codes 12, 14, 15, 17, 29-35, 38.

Theory of operation: small handlers, each a direct translation of one request header into one
store or manager call. Two RocketMQ rules matter to real clients and are kept exactly:
QUERY_CONSUMER_OFFSET answers ``offset 0`` for a group that never committed on a queue whose
first message is still at offset 0 and still in memory (``check_in_disk_by_consume_offset``:
within ``access_message_in_memory_max_ratio`` % of RAM from the CommitLog's end), so a new push
consumer with CONSUME_FROM_LAST_OFFSET still sees messages produced just before it started but
does not replay the whole history of a big queue; otherwise QUERY_NOT_FOUND. HEART_BEAT
creates ``%RETRY%<group>`` for every consumer group it registers. Every response field is a string; bodies are JSON or raw records.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...format.message import record_bytes
from ...remoting.codes import PERM_RW, RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.jsonbody import load_json_text
from ..state import topic_attributes
from ..state.topics import RETRY_PREFIX, TopicConfig, ensure_topic
from ..state.limits import validate_group

if TYPE_CHECKING:
    from ..contexts import ClientContext


async def query_offset(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group, topic = cmd.require_str("consumerGroup"), cmd.require_str("topic")
    qid = cmd.require_int("queueId")
    off = ctx.offsets.query(group, topic, qid)
    if off >= 0:
        return cmd.response(ResponseCode.SUCCESS, {"offset": off})
    s = ctx.store

    def first_in_memory() -> bool:  # RocketMQ: min offset 0 and that message still cached
        return s.get_min_offset_in_queue(topic, qid) <= 0 and \
            not s.check_in_disk_by_consume_offset(topic, qid, 0)
    if await ctx.run(first_in_memory):
        return cmd.response(ResponseCode.SUCCESS, {"offset": 0})
    return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                        remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


async def update_offset(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ctx.offsets.commit(cmd.require_str("consumerGroup"), cmd.require_str("topic"),
                          cmd.require_int("queueId"), cmd.require_int("commitOffset"))
    return cmd.response(ResponseCode.SUCCESS)


async def queue_offset(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic, qid = cmd.require_str("topic"), cmd.require_int("queueId")
    s = ctx.store
    if cmd.code == RequestCode.GET_MAX_OFFSET:
        off = await ctx.run(s.get_max_offset_in_queue, topic, qid)
    elif cmd.code == RequestCode.GET_MIN_OFFSET:
        off = await ctx.run(s.get_min_offset_in_queue, topic, qid)
    else:
        off = await ctx.run(s.get_offset_in_queue_by_time, topic, qid,
                               cmd.require_int("timestamp"))
    return cmd.response(ResponseCode.SUCCESS, {"offset": off})


async def earliest_time(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    ts = await ctx.run(ctx.store.get_earliest_message_time, cmd.require_str("topic"),
                          cmd.require_int("queueId"))
    return cmd.response(ResponseCode.SUCCESS, {"timestamp": ts if ts is not None else -1})


async def query_message(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic, key = cmd.require_str("topic"), cmd.require_str("key")
    max_num = cmd.get_int("maxNum", 32) or 32
    begin = cmd.get_int("beginTimestamp", 0) or 0
    end = cmd.get_int("endTimestamp", None)
    q = await ctx.run(ctx.store.query_message, topic, key, max_num, begin, end)
    fields = {"indexLastUpdateTimestamp": q.index_last_update_timestamp,
              "indexLastUpdatePhyoffset": q.index_last_update_phyoffset}
    if not q.messages:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, fields,
                            remark="can not find message, maybe time range not correct")
    body = b"".join(record_bytes(m) for m in q.messages)
    return cmd.response(ResponseCode.SUCCESS, fields, body=body)


async def view_by_id(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    offset = cmd.require_int("offset")
    m = await ctx.run(ctx.store.look_message_by_offset, offset)
    if m is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"can not find message by the offset, {offset}")
    return cmd.response(ResponseCode.SUCCESS, body=record_bytes(m))


async def heartbeat(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    data = load_json_text(cmd.body.decode("utf-8")) if cmd.body else {}
    if not isinstance(data, dict):
        raise ValueError("heartbeat body is not a JSON object")
    client_id = str(data.get("clientID") or conn.peer)
    for ds in ("consumerDataSet", "producerDataSet"):  # nothing registered from a bad one
        for d in data.get(ds) or []:
            if isinstance(d, dict) and (ds == "consumerDataSet" or d.get("groupName")):
                validate_group(d.get("groupName"))
    # heartbeat v2 (RocketMQ 5): a fingerprint of the client's subscriptions; while it is the one
    # the broker has, the client sends none (withoutSub) and what it sent before stays
    fingerprint = int(data.get("heartbeatFingerprint") or 0)
    without_sub = bool(data.get("withoutSub") or data.get("isWithoutSub")) and fingerprint != 0
    sub_change = fingerprint == 0  # a v1 heartbeat always carries its subscriptions
    for cd in data.get("consumerDataSet") or []:
        if not isinstance(cd, dict):
            continue
        group = str(cd.get("groupName"))
        old = ctx.consumers.fingerprints.get(group)
        if fingerprint != 0 and old is not None and old != fingerprint:
            sub_change = True
        ctx.consumers.fingerprints[group] = fingerprint
        changed = ctx.consumers.register(cd, client_id, conn, language=cmd.language,
                                            version=cmd.version)
        if not without_sub:
            ctx.filters.register_group(group, [s for s in cd.get("subscriptionDataSet") or []
                                                  if isinstance(s, dict)])
        ensure_topic(ctx.topics, ctx.config, RETRY_PREFIX + group, 1)
        ctx.subgroups.ensure(group)
        if changed:
            ctx.events.ids_changed(group)
    for pd in data.get("producerDataSet") or []:
        if isinstance(pd, dict) and pd.get("groupName"):
            ctx.producers.register(str(pd["groupName"]), conn, client_id,
                                      language=cmd.language, version=cmd.version)
    return cmd.response(ResponseCode.SUCCESS, {"IS_SUPPORT_HEART_BEAT_V2": "true",
                                               "IS_SUB_CHANGE": "true" if sub_change else "false"})


async def unregister(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    client_id = cmd.get_str("clientID") or ""
    group = cmd.get_str("consumerGroup")
    if group and ctx.consumers.unregister(group, client_id):
        ctx.events.ids_changed(group)
        ctx.events.group_changed(group)
    producer_group = cmd.get_str("producerGroup")
    if producer_group:
        ctx.producers.unregister(producer_group, client_id, conn)
    return cmd.response(ResponseCode.SUCCESS)


async def consumer_list(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    group = cmd.require_str("consumerGroup")
    ids = ctx.consumers.client_ids(group)
    if not ids:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            remark=f"no consumer for this group, {group}")
    return cmd.response(ResponseCode.SUCCESS,
                        body=json.dumps({"consumerIdList": ids}).encode())


async def create_topic(ctx: ClientContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    topic = cmd.require_str("topic")
    n = cmd.get_int("writeQueueNums", ctx.config.default_topic_queue_nums)
    tc = TopicConfig(topic, cmd.get_int("readQueueNums", n) or n, n or 1,
                     cmd.get_int("perm", PERM_RW) or PERM_RW,
                     cmd.get_str("topicFilterType") or "SINGLE_TAG",
                     cmd.get_int("topicSysFlag", 0) or 0, cmd.get_bool("order"))
    current = ctx.topics.get(topic)  # RocketMQ 5: attributes change by +key=value / -key
    changes = topic_attributes.parse(cmd.get_str("attributes"))
    if changes.get("+message.type") == "MIXED":  # enableMixedMessageType is off
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            remark="MIXED message type is not supported.")
    tc.attributes = topic_attributes.alter(current.attributes if current else {}, changes,
                                           create=current is None)
    if tc.write_queue_nums <= 0 or tc.read_queue_nums <= 0:
        raise ValueError("queue numbers must be positive")
    await ctx.run(ctx.topics.update, tc)
    if ctx.events.topics_changed is not None:  # as RocketMQ: answered once registered, so
        await ctx.events.topics_changed()      # `updatetopic && consume` finds the route
    return cmd.response(ResponseCode.SUCCESS)
