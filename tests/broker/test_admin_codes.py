"""Every admin request code mqadmin's everyday commands use, over a real socket, without Java.

Requests are built as RocketMQ 4.9.7's tools build them (header field names from its
``*RequestHeader`` classes); bodies are checked against the shapes of its Java classes
(``admin_wire``) and against numbers known independently: what this test sent, when, and
where the send results say each message went.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from rocketstore.client import Producer
from rocketstore.format.message import decode_message, parse_message_id
from rocketstore.remoting import fastjson

from . import admin_wire as w
from .conftest import start_server

TOPIC = "AdminT"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("admin")
    srv = start_server(str(base / "store"))
    try:
        w.call(srv.broker, 17, {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4,
                                "perm": 6})
        t0 = int(time.time() * 1000)
        sent = []
        with Producer("AdminPG", srv.namesrv) as p:
            for i in range(10):
                sent.append(p.send(TOPIC, b"body-%d" % i, tags="TagA", keys=[f"k{i}"],
                                   queue_id=i % 2))
        t1 = int(time.time() * 1000)
        w.wait_dispatched(srv.broker, TOPIC, {0: 5, 1: 5})
        held = w.HeldClient(srv.broker, "127.0.0.1@admin-test", producer_groups=["AdminPG"],
                            consumer_groups=[w.consumer_data("AdminCG", TOPIC, "TagA || TagB")])
        assert held.heartbeat().code == 0
        for qid, off in ((0, 2), (1, 5)):
            assert w.call(srv.broker, 15, {"consumerGroup": "AdminCG", "topic": TOPIC,
                                           "queueId": qid, "commitOffset": off}).code == 0
        yield {"srv": srv, "sent": sent, "t0": t0, "t1": t1, "held": held}
        held.close()
    finally:
        rc = srv.stop()
    assert rc == 0, srv.log()


def _mq(key) -> tuple:
    w.check_shape(dict(key), w.MESSAGE_QUEUE, where="MessageQueue")
    return key["topic"], key["brokerName"], key["queueId"]


def test_topic_stats_202(env):
    r = w.call(env["srv"].broker, 202, {"topic": TOPIC})
    assert r.code == 0
    b = w.body(r)
    w.check_shape(b, {"offsetTable": w.OBJ})
    rows = {}
    for key, val in b["offsetTable"].items():
        assert isinstance(key, fastjson.ObjectKey), "offsetTable keys are MessageQueue objects"
        w.check_shape(val, w.TOPIC_OFFSET, where="TopicOffset")
        rows[_mq(key)] = val
    assert sorted(q for _, _, q in rows) == [0, 1, 2, 3]
    for (_, broker_name, qid), v in rows.items():
        assert broker_name == "broker-a"
        expected_max = 5 if qid < 2 else 0
        assert (v["minOffset"], v["maxOffset"]) == (0, expected_max)
        if expected_max:
            assert env["t0"] <= v["lastUpdateTimestamp"] <= env["t1"] + 1000
        else:
            assert v["lastUpdateTimestamp"] == 0
    missing = w.call(env["srv"].broker, 202, {"topic": "NoSuchTopic"})
    assert missing.code == 17 and missing.remark == "topic[NoSuchTopic] not exist"


def test_topic_lists_206_224_304(env):
    srv = env["srv"]
    for addr in (srv.namesrv, srv.broker):
        b = w.body(w.call(addr, 206))
        w.check_shape(b, w.TOPIC_LIST, w.TOPIC_LIST_OPTIONAL)
        assert TOPIC in b["topicList"] and "%RETRY%AdminCG" in b["topicList"]
    b = w.body(w.call(srv.namesrv, 224, {"cluster": "DefaultCluster"}))
    w.check_shape(b, w.TOPIC_LIST, w.TOPIC_LIST_OPTIONAL)
    assert TOPIC in b["topicList"]
    b = w.body(w.call(srv.namesrv, 304))
    w.check_shape(b, w.TOPIC_LIST, w.TOPIC_LIST_OPTIONAL)
    assert set(b["topicList"]) == {"broker-a", "DefaultCluster"} and b["brokerAddr"] == srv.broker


def test_cluster_info_106(env):
    srv = env["srv"]
    b = w.body(w.call(srv.namesrv, 106))
    w.check_shape(b, w.CLUSTER_INFO)
    w.check_shape(b["brokerAddrTable"]["broker-a"], w.BROKER_DATA)
    addrs = b["brokerAddrTable"]["broker-a"]["brokerAddrs"]
    assert {int(k): v for k, v in addrs.items()} == {0: srv.broker}
    assert b["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_runtime_info_28(env):
    b = w.body(w.call(env["srv"].broker, 28))
    w.check_shape(b, w.KV_TABLE)
    table = b["table"]
    assert all(isinstance(v, str) for v in table.values()), "KVTable values are strings"
    for k in w.RUNTIME_NUMERIC_KEYS:
        int(table[k])  # mqadmin Long.parseLong()s these
    for k in w.RUNTIME_TPS_KEYS:
        float(table[k].split(" ")[0])  # clusterList: Double.parseDouble(split(" ")[0])
    for k in w.RUNTIME_OTHER_KEYS:
        assert k in table, k
    float(table["commitLogDiskRatio"])
    assert table["brokerVersionDesc"] == "V4_9_7"
    assert int(table["msgPutTotalTodayNow"]) >= 10  # the ten sends of the fixture
    assert int(table["commitLogMaxOffset"]) >= sum(1 for _ in env["sent"]) * 100
    earliest = int(table["earliestMessageTimeStamp"])
    assert env["t0"] <= earliest <= env["t1"] + 1000


def test_consume_stats_208(env):
    srv = env["srv"]
    for fields in ({"consumerGroup": "AdminCG"}, {"consumerGroup": "AdminCG", "topic": TOPIC}):
        b = w.body(w.call(srv.broker, 208, fields))
        w.check_shape(b, w.CONSUME_STATS)
        assert isinstance(b["consumeTps"], float), "a Java double is written with a point"
        rows = {}
        for key, val in b["offsetTable"].items():
            w.check_shape(val, w.OFFSET_WRAPPER, where="OffsetWrapper")
            rows[_mq(key)[2]] = val
        assert sorted(rows) == [0, 1, 2, 3]
        assert (rows[0]["brokerOffset"], rows[0]["consumerOffset"]) == (5, 2)
        assert (rows[1]["brokerOffset"], rows[1]["consumerOffset"]) == (5, 5)
        assert (rows[2]["brokerOffset"], rows[2]["consumerOffset"]) == (0, 0)
        assert env["t0"] <= rows[0]["lastTimestamp"] <= env["t1"] + 1000
        assert rows[2]["lastTimestamp"] == 0
    b = w.body(w.call(srv.broker, 208, {"consumerGroup": "NeverSeen"}))
    assert b == {"consumeTps": 0.0, "offsetTable": {}}


def test_consumer_and_producer_connections_203_204(env):
    srv = env["srv"]
    b = w.body(w.call(srv.broker, 203, {"consumerGroup": "AdminCG"}))
    w.check_shape(b, w.CONSUMER_CONNECTION)
    [conn] = b["connectionSet"]
    w.check_shape(conn, w.CONNECTION, where="Connection")
    assert conn["clientId"] == "127.0.0.1@admin-test" and conn["language"] == "JAVA"
    assert conn["version"] == 401
    assert conn["clientAddr"] == "127.0.0.1:%d" % env["held"].sock.getsockname()[1]
    assert (b["consumeType"], b["messageModel"], b["consumeFromWhere"]) == \
        ("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    sub = b["subscriptionTable"][TOPIC]
    w.check_shape(sub, w.SUBSCRIPTION_DATA, where="SubscriptionData")
    assert sub["subString"] == "TagA || TagB" and sorted(sub["tagsSet"]) == ["TagA", "TagB"]
    # String.hashCode of "TagA" / "TagB", as the Java client computes codeSet
    assert sorted(sub["codeSet"]) == [2598919, 2598920]
    r = w.call(srv.broker, 203, {"consumerGroup": "Offline"})
    assert r.code == 206 and r.remark == "the consumer group[Offline] not online"

    b = w.body(w.call(srv.broker, 204, {"producerGroup": "AdminPG"}))
    w.check_shape(b, w.PRODUCER_CONNECTION)
    [conn] = b["connectionSet"]
    w.check_shape(conn, w.CONNECTION, where="Connection")
    assert conn["clientId"] == "127.0.0.1@admin-test"
    r = w.call(srv.broker, 204, {"producerGroup": "NoProducers"})
    assert r.code == 1 and r.remark == "the producer group[NoProducers] not exist"


def test_query_topic_consume_by_who_300(env):
    b = w.body(w.call(env["srv"].broker, 300, {"topic": TOPIC}))
    w.check_shape(b, w.GROUP_LIST)
    assert b["groupList"] == ["AdminCG"]
    assert w.body(w.call(env["srv"].broker, 300, {"topic": "Nobody"})) == {"groupList": []}


def test_view_message_by_id_33(env):
    first = env["sent"][0]
    _, phys = parse_message_id(first.offset_msg_id)
    r = w.call(env["srv"].broker, 33, {"offset": phys})
    assert r.code == 0
    m = decode_message(r.body, 0)
    assert (m.topic, m.body, m.keys, m.queue_offset) == (TOPIC, b"body-0", ["k0"], 0)
    r = w.call(env["srv"].broker, 33, {"offset": 1 << 40})
    assert r.code == 1 and "can not find message by the offset" in r.remark


def test_query_consume_queue_321(env):
    srv = env["srv"]
    q0 = [parse_message_id(s.offset_msg_id)[1] for s in env["sent"]
          if s.message_queue.queue_id == 0]
    r = w.call(srv.broker, 321, {"topic": TOPIC, "queueId": 0, "index": 1, "count": 3,
                                 "consumerGroup": "AdminCG"})
    assert r.code == 0
    b = w.body(r)
    w.check_shape(b, w.QUERY_CONSUME_QUEUE_BODY, w.QUERY_CONSUME_QUEUE_OPTIONAL)
    assert (b["minQueueIndex"], b["maxQueueIndex"]) == (0, 5)
    w.check_shape(b["subscriptionData"], w.SUBSCRIPTION_DATA)
    assert [d["physicOffset"] for d in b["queueData"]] == q0[1:4]
    for d in b["queueData"]:
        w.check_shape(d, w.CONSUME_QUEUE_DATA, w.CONSUME_QUEUE_DATA_OPTIONAL)
        assert d["tagsCode"] == 2598919 and d["physicSize"] > 0
    b = w.body(w.call(srv.broker, 321, {"topic": TOPIC, "queueId": 0, "index": 0, "count": 2}))
    assert "subscriptionData" not in b and len(b["queueData"]) == 2
    b = w.body(w.call(srv.broker, 321, {"topic": TOPIC, "queueId": 0, "index": 0, "count": 2,
                                        "consumerGroup": "Offline"}))
    assert b["filterData"] == f"Offline@{TOPIC} is not online!"
    r = w.call(srv.broker, 321, {"topic": TOPIC, "queueId": 9, "index": 0, "count": 1})
    assert r.code == 1 and r.remark == f"9@{TOPIC} is not exist!"


def test_all_topic_config_21(env):
    b = w.body(w.call(env["srv"].broker, 21))
    w.check_shape(b, w.TOPIC_CONFIG_WRAPPER)
    w.check_shape(b["dataVersion"], w.DATA_VERSION)
    for name, tc in b["topicConfigTable"].items():
        w.check_shape(tc, w.TOPIC_CONFIG, where=name)
    assert b["topicConfigTable"][TOPIC]["writeQueueNums"] == 4


def test_subscription_groups_200_201_207(env):
    srv = env["srv"]
    cfg = {"groupName": "SubG", "consumeEnable": True, "consumeFromMinEnable": False,
           "consumeBroadcastEnable": False, "retryQueueNums": 1, "retryMaxTimes": 3,
           "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
           "notifyConsumerIdsChangedEnable": True}
    assert w.call(srv.broker, 200, {}, json.dumps(cfg).encode()).code == 0
    b = w.body(w.call(srv.broker, 201))
    w.check_shape(b, w.SUBSCRIPTION_GROUP_WRAPPER)
    w.check_shape(b["dataVersion"], w.DATA_VERSION)
    for name, g in b["subscriptionGroupTable"].items():
        w.check_shape(g, w.SUBSCRIPTION_GROUP_CONFIG, where=name)
    assert b["subscriptionGroupTable"]["SubG"] == cfg
    assert "AdminCG" in b["subscriptionGroupTable"]  # created by the heartbeat, as RocketMQ
    with open(os.path.join(srv.store, "config", "subscriptionGroup.json")) as fh:
        assert json.load(fh)["subscriptionGroupTable"]["SubG"]["retryMaxTimes"] == 3
    counter = b["dataVersion"]["counter"]
    bad = w.call(srv.broker, 200, {}, b'{"consumeEnable": true}')
    assert bad.code == 1 and "groupName" in bad.remark
    assert w.call(srv.broker, 207, {"groupName": "SubG", "removeOffset": "false"}).code == 0
    b = w.body(w.call(srv.broker, 201))
    assert "SubG" not in b["subscriptionGroupTable"]
    assert b["dataVersion"]["counter"] > counter


def test_broker_config_26_25(env):
    srv = env["srv"]
    r = w.call(srv.broker, 26)
    assert r.code == 0
    version = json.loads(r.ext_fields["version"])
    w.check_shape(version, w.DATA_VERSION)
    props = dict(line.split("=", 1) for line in r.body.decode().splitlines())
    assert props["fileReservedTime"] == "72" and props["brokerName"] == "broker-a"
    assert props["flushDiskType"] == "ASYNC_FLUSH"
    assert props["listenPort"] == srv.broker.split(":")[1]
    assert w.call(srv.broker, 25, {}, b"fileReservedTime=49\ndeleteWhen=05\n").code == 0
    r2 = w.call(srv.broker, 26)
    props = dict(line.split("=", 1) for line in r2.body.decode().splitlines())
    assert (props["fileReservedTime"], props["deleteWhen"]) == ("49", "05")
    assert json.loads(r2.ext_fields["version"])["counter"] == version["counter"] + 1
    # a key that is read only at start-up, an unknown key, a bad value: refused, nothing applied
    for bad in (b"fileReservedTime=50\nmappedFileSizeCommitLog=1024\n", b"noSuchKey=1\n",
                b"fileReservedTime=soon\n"):
        r = w.call(srv.broker, 25, {}, bad)
        assert r.code == 1 and r.remark, bad
    props = dict(line.split("=", 1) for line in w.call(srv.broker, 26).body.decode().splitlines())
    assert props["fileReservedTime"] == "49"


def test_unknown_code_still_not_supported(env):
    r = w.call(env["srv"].broker, 9999)
    assert r.code == 3 and r.remark == " request type 9999 not supported"
    r = w.call(env["srv"].namesrv, 9999)
    assert r.code == 3


def test_reset_offset_222_notifies_220(env):
    srv, held = env["srv"], env["held"]
    r = w.call(srv.broker, 222, {"topic": TOPIC, "group": "AdminCG", "timestamp": -1,
                                 "isForce": "true"})
    assert r.code == 0, r.remark
    b = w.body(r)
    w.check_shape(b, w.RESET_OFFSET_BODY)
    offsets = {_mq(k)[2]: v for k, v in b["offsetTable"].items()}
    assert offsets == {0: 5, 1: 5, 2: 0, 3: 0}  # -1 = every queue's max offset
    note = held.wait(lambda c: c.code == 220 and not c.is_response)
    assert note.is_oneway
    assert (note.ext_fields["topic"], note.ext_fields["group"], note.ext_fields["timestamp"]) == \
        (TOPIC, "AdminCG", "-1")
    sent = {_mq(k)[2]: v for k, v in fastjson.loads(note.body)["offsetTable"].items()}
    assert sent == offsets
    q = w.call(srv.broker, 14, {"consumerGroup": "AdminCG", "topic": TOPIC, "queueId": 0})
    assert q.ext_fields["offset"] == "5"
    # by time: the first message stored at or after the middle send's store time
    mid = env["sent"][4]
    _, phys = parse_message_id(mid.offset_msg_id)
    ts = decode_message(w.call(srv.broker, 33, {"offset": phys}).body, 0).store_timestamp
    b = w.body(w.call(srv.broker, 222, {"topic": TOPIC, "group": "AdminCG", "timestamp": ts,
                                        "isForce": "true"}))
    offsets = {_mq(k)[2]: v for k, v in b["offsetTable"].items()}
    assert offsets[mid.message_queue.queue_id] <= mid.queue_offset
    assert offsets[2] == 0
    r = w.call(srv.broker, 222, {"topic": TOPIC, "group": "Offline", "timestamp": -1,
                                 "isForce": "true"})
    assert r.code == 206  # mqadmin then resets through 208/29/15 itself
    r = w.call(srv.broker, 222, {"topic": "NoSuchTopic", "group": "AdminCG", "timestamp": -1})
    assert r.code == 1 and "no topic in this broker" in r.remark


def test_connections_gone_after_close(env):
    srv = env["srv"]
    extra = w.HeldClient(srv.broker, "127.0.0.1@second", producer_groups=["PG2"])
    assert extra.heartbeat().code == 0
    assert w.call(srv.broker, 204, {"producerGroup": "PG2"}).code == 0
    extra.close()
    deadline = time.monotonic() + 90
    while w.call(srv.broker, 204, {"producerGroup": "PG2"}).code == 0:
        assert time.monotonic() < deadline, "producer stayed registered after its close"
        time.sleep(0.1)


def test_delete_topic_215_216(env):
    srv = env["srv"]
    w.call(srv.broker, 17, {"topic": "DoomedT", "readQueueNums": 1, "writeQueueNums": 1})
    with Producer("DoomPG", srv.namesrv) as p:
        assert p.send("DoomedT", b"a", queue_id=0).queue_offset == 0
        assert p.send("DoomedT", b"b", queue_id=0).queue_offset == 1
    w.wait_dispatched(srv.broker, "DoomedT", {0: 2})
    cq_dir = os.path.join(srv.store, "consumequeue", "DoomedT")
    assert os.path.isdir(cq_dir)
    assert w.call(srv.broker, 215, {"topic": "DoomedT"}).code == 0
    assert w.call(srv.namesrv, 216, {"topic": "DoomedT"}).code == 0
    assert w.call(srv.broker, 202, {"topic": "DoomedT"}).code == 17
    assert not os.path.exists(cq_dir)
    assert "DoomedT" not in w.body(w.call(srv.namesrv, 206))["topicList"]
    r = w.call(srv.broker, 215, {"topic": "SCHEDULE_TOPIC_XXXX"})
    assert r.code == 1 and "conflict with system topic" in r.remark
    # created again, its queue starts at offset 0 as in RocketMQ
    w.call(srv.broker, 17, {"topic": "DoomedT", "readQueueNums": 1, "writeQueueNums": 1})
    with Producer("DoomPG", srv.namesrv) as p:
        assert p.send("DoomedT", b"c", queue_id=0).queue_offset == 0


def test_push_consumer_follows_reset(env):
    """resetOffsetByTime on a live rocketstore PushConsumer: it re-consumes from the new offsets."""
    import threading

    from rocketstore.client import PushConsumer

    srv = env["srv"]
    seen: list[bytes] = []
    lock = threading.Lock()

    def listener(m):
        with lock:
            seen.append(m.body)

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 90
        while True:
            with lock:
                if len(seen) >= n:
                    return
            assert time.monotonic() < deadline, f"only {len(seen)} of {n} consumed"
            time.sleep(0.05)

    with PushConsumer("ResetCG", srv.namesrv, {TOPIC: "*"}, listener, consume_from="first",
                      commit_interval_s=0.2, rebalance_interval_s=1.0) as c:
        wait_for(10)
        assert sorted(seen) == sorted(b"body-%d" % i for i in range(10))
        r = w.call(srv.broker, 222, {"topic": TOPIC, "group": "ResetCG", "timestamp": 0,
                                     "isForce": "true"})
        assert r.code == 0, r.remark
        wait_for(20)
        assert sorted(seen[10:]) == sorted(b"body-%d" % i for i in range(10))
        assert c.offsets  # still running
