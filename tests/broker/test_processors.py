"""Every processor module called directly: a real store in a temp dir, the broker's own state
managers and contexts (``Broker.build_contexts``), no sockets. What each answers is checked
against the store and the state files, read back through their own public faces."""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker import requests
from rocketstore.broker.acl import service as acl
from rocketstore.broker.admin import consumers as admin_consumers, groups, runtime, topics
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.wiring import Broker
from rocketstore.broker.namesrv import admin as namesrv_admin, context as namesrv_context
from rocketstore.broker.namesrv import processors as namesrv
from rocketstore.broker.processors import client, locks, pull, reply, send, sql92, transaction
from rocketstore.broker.services.longpoll import PullHoldService
from rocketstore.broker.services.puts import Puts
from rocketstore.format.message import (PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, decode_message,
                                        properties_to_string)
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode


@dataclass
class Peer:
    """The far end of a connection: what a processor reads of it (its address) and what the
    broker sends back on it (oneway notifications)."""
    peer: str = "127.0.0.1:40000"
    notified: list = field(default_factory=list)
    closed: bool = False

    def notify(self, cmd: RemotingCommand) -> None:
        self.notified.append(cmd)


class World:
    """A broker's parts, opened the way ``Broker.start`` opens them, minus the sockets."""

    def __init__(self, tmp_path: Any, **broker_options: Any) -> None:
        self.cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                               mapped_file_size_commitlog=1 << 20,
                               mapped_file_size_consume_queue=20 * 1000,
                               max_hash_slot_num=1000, max_index_num=4000,
                               store_host="127.0.0.1:10911")
        self.broker = Broker(self.cfg, BrokerConfig(**broker_options))
        self.conn = Peer()

    async def __aenter__(self) -> "World":
        b = self.broker
        b.loop = asyncio.get_running_loop()
        b.store = MessageStore(self.cfg)
        b.hold = PullHoldService(b.loop)
        b.store.add_arrival_listener(b.hold.arrival)
        b.puts = Puts(b.store, b.run)
        b._start_transactions()
        self.ctx = b.build_contexts()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        b = self.broker
        b.hold.wake_all()
        await b.run(b.store.shutdown)
        b.executor.shutdown(wait=True)

    async def call(self, fn: Any, kind: str, code: int, fields: dict | None = None,
                   body: bytes = b"") -> RemotingCommand:
        return await fn(self.ctx[kind], self.conn, RemotingCommand.request(code, fields or {},
                                                                          body))

    async def read(self, topic: str, queue_id: int = 0, offset: int = 0) -> list:
        s = self.broker.store
        await self.broker.run(s.wait_dispatched, 10)
        return (await self.broker.run(s.get_message, "check", topic, queue_id, offset, 32)).messages


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def send_fields(topic: str, queue_id: int = 0, props: dict | None = None) -> dict:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 1,
            "flag": 0, "properties": properties_to_string(props or {}), "reconsumeTimes": 0}


# -- processors ---------------------------------------------------------------------------------
def test_send_stores_the_message_with_a_uniq_key_and_the_store_host(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            r = await w.call(send.send, "send", RequestCode.SEND_MESSAGE,
                             send_fields("T", 1, {"TAGS": "a"}), b"hello")
            assert r.code == ResponseCode.SUCCESS
            assert r.ext_fields["queueId"] == "1" and r.ext_fields["queueOffset"] == "0"
            [m] = await w.read("T", 1)
            assert m.body == b"hello" and m.tags == "a" and m.born_host == "127.0.0.1:40000"
            assert m.store_host == "127.0.0.1:10911"
            assert len(m.properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]) == 32
            assert r.ext_fields["msgId"] == m.msg_id
            refused = await w.call(send.send, "send", RequestCode.SEND_MESSAGE,
                                   send_fields("SCHEDULE_TOPIC_XXXX"), b"x")
            assert refused.code == ResponseCode.NO_PERMISSION
            bad_queue = await w.call(send.send, "send", RequestCode.SEND_MESSAGE,
                                     send_fields("T", 9), b"x")
            assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[9]" in bad_queue.remark
    run(go())


def test_send_back_puts_a_retry_copy_with_the_next_delay_level(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields("T"), b"m")
            [m] = await w.read("T")
            r = await w.call(send.send_back, "send", RequestCode.CONSUMER_SEND_MSG_BACK,
                             {"offset": m.commitlog_offset, "group": "G", "delayLevel": 0})
            assert r.code == ResponseCode.SUCCESS
            [held] = await w.read("SCHEDULE_TOPIC_XXXX", 2)  # level 3 waits in queue 2
            assert held.properties["REAL_TOPIC"] == "%RETRY%G" and held.body == b"m"
            assert held.properties["RETRY_TOPIC"] == "T" and held.reconsume_times == 1
    run(go())


def test_pull_reads_what_was_stored_and_commits_the_offset(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            for body in (b"a", b"b"):
                await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields("T"), body)
            await w.read("T")
            r = await w.call(pull.pull, "pull", RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": "T", "queueId": 0, "queueOffset": 0,
                "maxMsgNums": 32, "sysFlag": 1, "commitOffset": 0})
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["nextBeginOffset"] == "2"
            first = decode_message(r.body, 0)
            assert first.body == b"a"
            assert w.broker.offsets.query("G", "T", 0) == 0
            missing = await w.call(pull.pull, "pull", RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": "Nope", "queueId": 0, "queueOffset": 0})
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    run(go())


def test_client_heartbeat_offsets_and_queries(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            hb = {"clientID": "c1", "consumerDataSet": [{
                "groupName": "G", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "subscriptionDataSet": [
                    {"topic": "T", "subString": "*", "expressionType": "TAG"}]}]}
            r = await w.call(client.heartbeat, "client", RequestCode.HEART_BEAT,
                             body=json.dumps(hb).encode())
            assert r.code == ResponseCode.SUCCESS
            assert w.broker.topics.get("%RETRY%G") is not None  # created for the group
            ids = await w.call(client.consumer_list, "client",
                               RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
            assert json.loads(ids.body) == {"consumerIdList": ["c1"]}
            await w.call(client.update_offset, "client", RequestCode.UPDATE_CONSUMER_OFFSET,
                         {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 5})
            q = await w.call(client.query_offset, "client", RequestCode.QUERY_CONSUMER_OFFSET,
                             {"consumerGroup": "G", "topic": "T", "queueId": 0})
            assert q.ext_fields["offset"] == "5"
            await w.call(send.send, "send", RequestCode.SEND_MESSAGE,
                         send_fields("T", 0, {"KEYS": "k1"}), b"x")
            await w.read("T")
            mx = await w.call(client.queue_offset, "client", RequestCode.GET_MAX_OFFSET,
                              {"topic": "T", "queueId": 0})
            assert mx.ext_fields["offset"] == "1"
            found = await w.call(client.query_message, "client", RequestCode.QUERY_MESSAGE,
                                 {"topic": "T", "key": "k1", "maxNum": 8, "beginTimestamp": 0,
                                  "endTimestamp": 2**62})
            assert found.code == ResponseCode.SUCCESS
            assert decode_message(found.body, 0).body == b"x"
    run(go())


def test_locks_give_a_queue_to_one_client_of_a_group(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            def body(cid: str) -> bytes:
                return json.dumps({"consumerGroup": "G", "clientId": cid, "mqSet": [
                    {"topic": "T", "brokerName": "broker-a", "queueId": 0}]}).encode()
            a = await w.call(locks.lock, "client", RequestCode.LOCK_BATCH_MQ, body=body("a"))
            b = await w.call(locks.lock, "client", RequestCode.LOCK_BATCH_MQ, body=body("b"))
            assert len(json.loads(a.body)["lockOKMQSet"]) == 1
            assert json.loads(b.body)["lockOKMQSet"] == []
            await w.call(locks.unlock, "client", RequestCode.UNLOCK_BATCH_MQ, body=body("a"))
            b = await w.call(locks.lock, "client", RequestCode.LOCK_BATCH_MQ, body=body("b"))
            assert len(json.loads(b.body)["lockOKMQSet"]) == 1
    run(go())


def test_sql92_check_client_config(tmp_path):
    async def go():
        async with World(tmp_path, enable_property_filter=True) as w:
            def sub(expr: str) -> bytes:
                return json.dumps({"subscriptionData": {"expressionType": "SQL92",
                                                        "subString": expr}}).encode()
            ok = await w.call(sql92.check_config, "pull", RequestCode.CHECK_CLIENT_CONFIG,
                              body=sub("a > 1"))
            bad = await w.call(sql92.check_config, "pull", RequestCode.CHECK_CLIENT_CONFIG,
                               body=sub("a >"))
            assert ok.code == ResponseCode.SUCCESS
            assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    run(go())


def test_reply_without_a_requester_still_stores_the_reply(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            topic = reply.reply_topic(w.broker.config.cluster_name)
            reply.create_reply_topic(w.broker.topics, w.broker.config)
            r = await w.call(reply.send_reply, "send", RequestCode.SEND_REPLY_MESSAGE,
                             send_fields(topic, 0, {"REPLY_TO_CLIENT": "gone",
                                                    "CORRELATION_ID": "c"}), b"answer")
            assert r.code == ResponseCode.SYSTEM_ERROR and "not found" in r.remark
            [m] = await w.read(topic)
            assert m.body == b"answer" and r.ext_fields["msgId"] == m.msg_id
    run(go())


def test_end_transaction_commits_the_half_message(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            s = await w.call(send.send, "send", RequestCode.SEND_MESSAGE,
                             send_fields("T", 0, {"TRAN_MSG": "true", "PGROUP": "PG"}), b"tx")
            assert s.code == ResponseCode.SUCCESS
            assert await w.read("T") == []  # a half message: no consumer sees it yet
            [half] = await w.read("RMQ_SYS_TRANS_HALF_TOPIC")
            r = await w.call(transaction.end_transaction, "send", RequestCode.END_TRANSACTION, {
                "producerGroup": "PG", "tranStateTableOffset": half.queue_offset,
                "commitLogOffset": half.commitlog_offset, "commitOrRollback": 8,
                "msgId": half.msg_id, "transactionId": half.uniq_key, "fromTransactionCheck": False})
            assert r.code == ResponseCode.SUCCESS
            [m] = await w.read("T")
            assert m.body == b"tx" and m.uniq_key == half.uniq_key
    run(go())


# -- admin --------------------------------------------------------------------------------------
def test_admin_topics_list_stats_and_delete(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields("T"), b"x")
            await w.read("T")
            listed = await w.call(topics.topic_list, "admin",
                                  RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert "T" in json.loads(listed.body)["topicList"]
            stats = await w.call(topics.topic_stats, "admin", RequestCode.GET_TOPIC_STATS_INFO,
                                 {"topic": "T"})
            assert stats.code == ResponseCode.SUCCESS
            await w.call(topics.delete_topic, "admin", RequestCode.DELETE_TOPIC_IN_BROKER,
                         {"topic": "T"})
            assert w.broker.topics.get("T") is None
    run(go())


def test_admin_groups_update_and_delete(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            r = await w.call(groups.update_group, "admin",
                             RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                             body=json.dumps({"groupName": "G2", "retryMaxTimes": 3}).encode())
            assert r.code == ResponseCode.SUCCESS and w.broker.subgroups.get("G2").retry_max_times == 3
            all_groups = await w.call(groups.all_groups, "admin",
                                      RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            assert "G2" in json.loads(all_groups.body)["subscriptionGroupTable"]
            await w.call(groups.delete_group, "admin", RequestCode.DELETE_SUBSCRIPTIONGROUP,
                         {"groupName": "G2"})
            assert w.broker.subgroups.get("G2") is None
    run(go())


def test_admin_runtime_config_get_and_live_update(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            r = await w.call(runtime.update_config, "admin", RequestCode.UPDATE_BROKER_CONFIG,
                             body=b"defaultTopicQueueNums=7\n")
            assert r.code == ResponseCode.SUCCESS and w.broker.config.default_topic_queue_nums == 7
            got = await w.call(runtime.get_config, "admin", RequestCode.GET_BROKER_CONFIG)
            assert "defaultTopicQueueNums=7" in got.body.decode().splitlines()
            assert json.loads(got.ext_fields["version"])["counter"] == 1
            info = await w.call(runtime.runtime_info, "admin",
                                RequestCode.GET_BROKER_RUNTIME_INFO)
            assert "commitLogDiskRatio" in json.loads(info.body)["table"]
    run(go())


def test_admin_consumers_refuses_a_client_that_is_not_online(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            r = await w.call(admin_consumers.running_info, "admin",
                             RequestCode.GET_CONSUMER_RUNNING_INFO,
                             {"consumerGroup": "G", "clientId": "nobody"})
            assert r.code == ResponseCode.SYSTEM_ERROR and "not online" in r.remark
    run(go())


def test_acl_requests_answer_that_acl_is_off(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            r = await w.call(acl.acl_version, "acl", RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
            assert r.code == ResponseCode.SYSTEM_ERROR and "aclEnable" in r.remark
    run(go())


# -- name server --------------------------------------------------------------------------------
def test_namesrv_routes_kv_and_settings(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            b = w.broker
            local = namesrv_context.LocalBroker(b.config, b.store_config, b.topics)
            ctx = namesrv_context.build(local)
            conn = Peer()

            async def call(fn: Any, code: int, fields: dict | None = None) -> RemotingCommand:
                return await fn(ctx, conn, RemotingCommand.request(code, fields or {}))
            route = await call(namesrv.get_route, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               {"topic": "NewTopic"})  # a lookup never creates (RocketMQ)
            assert route.code == ResponseCode.TOPIC_NOT_EXIST and b.topics.get("NewTopic") is None
            b.topics.create("NewTopic")
            route = await call(namesrv.get_route, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               {"topic": "NewTopic"})
            assert json.loads(route.body)["queueDatas"][0]["writeQueueNums"] == 4
            await call(namesrv.put_kv, RequestCode.PUT_KV_CONFIG,
                       {"namespace": "NS", "key": "k", "value": "v"})
            got = await call(namesrv.get_kv, RequestCode.GET_KV_CONFIG,
                             {"namespace": "NS", "key": "k"})
            assert got.ext_fields["value"] == "v"
            cfg = await call(namesrv.get_namesrv_config, RequestCode.GET_NAMESRV_CONFIG)
            assert "orderMessageEnable=false" in cfg.body.decode().splitlines()
            clusters = await call(namesrv_admin.topics_by_cluster,
                                  RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
            assert "NewTopic" in json.loads(clusters.body)["topicList"]
    run(go())


def test_every_request_code_has_one_processor_that_takes_its_context(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            handlers = requests.broker_handlers(w.ctx)
            assert set(handlers) == set(requests.BROKER)
            for code, (kind, fn) in requests.BROKER.items():
                annotation = fn.__annotations__["ctx"]
                assert annotation == type(w.ctx[kind]).__name__, (code, fn)
    run(go())


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE])
def test_bad_headers_are_refused_by_the_processor_not_the_store(tmp_path, code):
    async def go():
        async with World(tmp_path) as w:
            kind, fn = requests.BROKER[code]
            with pytest.raises(ValueError):
                await w.call(fn, kind, code, {"topic": "T", "queueId": "x"})
    run(go())


def test_lite_pull_is_a_pull_and_lite_pull_message_enable_refuses_it(tmp_path):
    """LITE_PULL_MESSAGE (361, RocketMQ 5's DefaultLitePullConsumer) answers as PULL_MESSAGE;
    with ``litePullMessageEnable`` off it is refused with NO_PERMISSION, as RocketMQ's broker."""
    fields = {"consumerGroup": "G", "topic": "T", "queueId": 0, "queueOffset": 0,
              "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0}

    async def go(enabled: bool):
        async with World(tmp_path / str(enabled), lite_pull_message_enable=enabled) as w:
            await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields("T"), b"lp")
            await w.read("T")
            kind, fn = requests.BROKER[RequestCode.LITE_PULL_MESSAGE]
            return await w.call(fn, kind, RequestCode.LITE_PULL_MESSAGE, fields)

    r = run(go(True))
    assert r.code == ResponseCode.SUCCESS and decode_message(r.body, 0).body == b"lp"
    r = run(go(False))
    assert r.code == ResponseCode.NO_PERMISSION and "lite pull consumer is forbidden" in r.remark


def test_clean_unused_topic_drops_the_queues_of_topics_no_longer_in_the_table(tmp_path):
    async def go():
        async with World(tmp_path) as w:
            for t in ("Kept", "Gone"):
                await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields(t), b"x")
                await w.read(t)
            w.broker.topics.delete("Gone")  # the table forgot it, its queues are still there
            kind, fn = requests.BROKER[RequestCode.CLEAN_UNUSED_TOPIC]
            r = await w.call(fn, kind, RequestCode.CLEAN_UNUSED_TOPIC)
            assert r.code == ResponseCode.SUCCESS
            queues = w.broker.store.topics()
            assert "Gone" not in queues and "Kept" in queues
            assert [m.body for m in await w.read("Kept")] == [b"x"]
    run(go())


def test_peek_reads_without_popping(tmp_path):
    """PEEK_MESSAGE (200052): the records from where the group's pops stand, twice the same;
    PULL_NOT_FOUND on an empty queue; TOPIC_NOT_EXIST, INVALID_PARAMETER as RocketMQ 5.3.3."""
    async def go():
        async with World(tmp_path) as w:
            for body in (b"p0", b"p1"):
                await w.call(send.send, "send", RequestCode.SEND_MESSAGE, send_fields("T"), body)
            await w.read("T")
            kind, fn = requests.BROKER[RequestCode.PEEK_MESSAGE]

            async def peek(topic: str, qid: int) -> RemotingCommand:
                return await w.call(fn, kind, RequestCode.PEEK_MESSAGE, {
                    "consumerGroup": "G", "topic": topic, "queueId": qid, "maxMsgNums": 32})

            for _ in range(2):
                r = await peek("T", -1)
                assert r.code == ResponseCode.SUCCESS
                first = decode_message(r.body, 0)
                second = decode_message(r.body, first.store_size)
                assert (first.body, second.body) == (b"p0", b"p1")
            assert (await peek("T", 1)).code == ResponseCode.PULL_NOT_FOUND
            assert (await peek("Nope", -1)).code == ResponseCode.TOPIC_NOT_EXIST
            assert (await peek("T", 9)).code == ResponseCode.INVALID_PARAMETER
            assert w.broker.offsets.query("G", "T", 0) < 0  # nothing committed
    run(go())
