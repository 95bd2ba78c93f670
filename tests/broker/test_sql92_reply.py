"""SQL92 filtering and request-reply through a real ``rocketstore serve`` with our client."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from rocketstore.broker.state.files import load_json_lenient
from rocketstore.client import MessageSelector, Producer, PullConsumer, PushConsumer
from rocketstore.errors import BrokerError
from rocketstore.remoting import RequestCode, ResponseCode

from .conftest import start_server
from .test_client_broker import raw, wait_max

FILTER_CONF = """enablePropertyFilter=true
enableCalcFilterBitMap=true
enableConsumeQueueExt=true
mappedFileSizeConsumeQueueExt=65536
brokerClusterName=TestCluster
"""


@pytest.fixture(scope="module")
def fserver(tmp_path_factory):
    d = tmp_path_factory.mktemp("sql92")
    conf = d / "broker.conf"
    conf.write_text(FILTER_CONF)
    srv = start_server(str(d / "store"), "--config", str(conf))
    yield srv
    assert srv.stop() == 0, srv.log()


def check_config(addr: str, expr: str, expr_type: str = "SQL92"):
    body = json.dumps({"clientId": "c1", "group": "G", "subscriptionData": {
        "topic": "T", "subString": expr, "expressionType": expr_type, "subVersion": 1}}).encode()
    return raw(addr, RequestCode.CHECK_CLIENT_CONFIG, {}, body)


def test_check_client_config_answers_as_rocketmq(fserver):
    assert check_config(fserver.broker, "a > 5 AND b IN ('x')").code == ResponseCode.SUCCESS
    assert check_config(fserver.broker, "TagA || TagB", "TAG").code == ResponseCode.SUCCESS
    bad = check_config(fserver.broker, "a >")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert bad.remark.startswith("Invalid MessageSelector. ")
    assert check_config(fserver.broker, "NOT a > 5").code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_sql92_pull_filters_by_properties(fserver):
    with Producer("PG", fserver.namesrv) as p:
        for i in range(60):
            p.send("SqlPull", b"m%d" % i, queue_id=0,
                   properties={"a": str(i), "color": "red" if i % 2 else "blue"})
    with PullConsumer("PullG", fserver.namesrv) as c:
        wait_max(c, "SqlPull", 0, 60)
        got, off = [], 0
        while True:
            r = c.pull("SqlPull", 0, off, 32, subscription="a >= 50 AND color = 'red'",
                       expression_type="SQL92")
            got += [m.body for m in r.messages]
            if r.status == "NO_NEW_MSG" or r.next_begin_offset == off:
                break
            off = r.next_begin_offset
        assert got == [b"m%d" % i for i in range(51, 60, 2)]
        with pytest.raises(BrokerError) as err:
            c.pull("SqlPull", 0, 0, 32, subscription="a >", expression_type="SQL92")
        assert err.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_sql92_push_consumer_with_bitmap_and_registry(fserver):
    got: list[bytes] = []
    done = threading.Event()

    def listener(m):
        got.append(m.body)
        if len(got) >= 5:
            done.set()
        return True

    pc = PushConsumer("PushSqlG", fserver.namesrv, {"SqlPush": MessageSelector.by_sql("a < 5")},
                      listener, consume_from="first")
    pc.start()
    try:
        time.sleep(0.2)  # registered before the messages: they get the group's bitmap bits
        with Producer("PG", fserver.namesrv) as p:
            for i in range(40):
                p.send("SqlPush", b"p%d" % i, properties={"a": str(i)})
        assert done.wait(20), got
        time.sleep(0.5)
        assert sorted(got) == sorted(b"p%d" % i for i in range(5))
    finally:
        pc.shutdown()
    ext_dir = os.path.join(fserver.store, "consumequeue_ext", "SqlPush")
    assert os.path.isdir(ext_dir) and os.listdir(ext_dir)


def test_consumer_filter_json_persisted(fserver):
    with Producer("PG", fserver.namesrv) as p:  # (the topic exists before the subscription)
        p.send("SqlPersist", b"x", properties={"a": "1"})
    pc = PushConsumer("PersistSqlG", fserver.namesrv,
                      {"SqlPersist": MessageSelector.by_sql("a < 5")}, lambda m: True)
    pc.start()
    try:
        deadline = time.monotonic() + 40  # (written by the broker's periodic persist)
        path = os.path.join(fserver.store, "config", "consumerFilter.json")
        data = None
        while time.monotonic() < deadline:
            data = load_json_lenient(path) if os.path.exists(path) else None
            if data and "SqlPersist" in data.get("filterDataByTopic", {}):
                break
            time.sleep(0.2)
    finally:
        pc.shutdown()
    entry = data["filterDataByTopic"]["SqlPersist"]["groupFilterData"]["PersistSqlG"]
    assert entry["expression"] == "a < 5" and entry["expressionType"] == "SQL92"
    assert entry["bloomFilterData"]["bitNum"] == 112 and len(entry["bloomFilterData"]["bitPos"]) == 3


def test_request_reply_round_trip_and_cluster_property(fserver):
    seen = {}

    with Producer("Responder", fserver.namesrv) as responder:
        def listener(m):
            seen["cluster"] = m.properties.get("CLUSTER")
            responder.reply(m, b"pong:" + m.body)
            return True

        pc = PushConsumer("SvcG", fserver.namesrv, {"Svc": "*"}, listener, consume_from="first")
        pc.start()
        try:
            with Producer("Requester", fserver.namesrv) as req:
                reply = req.request("Svc", b"ping", timeout_s=15)
            assert reply.body == b"pong:ping"
            assert reply.topic == "TestCluster_REPLY_TOPIC"
            assert seen["cluster"] == "TestCluster"
        finally:
            pc.shutdown()


def test_reply_to_a_gone_requester_gets_rocketmqs_error(fserver):
    from rocketstore.format.message import MessageExt
    req = MessageExt(topic="Svc", body=b"", properties={
        "CLUSTER": "TestCluster", "REPLY_TO_CLIENT": "10.0.0.1@1#gone", "CORRELATION_ID": "c",
        "TTL": "3000"}, queue_id=0, queue_offset=0, commitlog_offset=0, store_size=0, body_crc=0,
        flag=0, sys_flag=0, born_timestamp=0, born_host="", store_timestamp=0, store_host="",
        reconsume_times=0, prepared_transaction_offset=0)
    with Producer("Responder2", fserver.namesrv) as p:
        with pytest.raises(BrokerError) as err:
            p.reply(req, b"late")
    assert err.value.code == ResponseCode.SYSTEM_ERROR
    assert "channel of <10.0.0.1@1#gone> not found" in str(err.value)


def test_sql92_refused_when_property_filter_is_off(server):
    r = check_config(server.broker, "a > 1")
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "The broker does not support consumer to filter message by SQL92"
    with Producer("PG", server.namesrv) as p:
        p.send("Off", b"x", queue_id=0, properties={"a": "2"})
    with PullConsumer("G", server.namesrv) as c:
        wait_max(c, "Off", 0, 1)
        with pytest.raises(BrokerError) as err:
            c.pull("Off", 0, 0, 32, subscription="a > 1", expression_type="SQL92")
        assert err.value.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("sub,expr_type", [("a = 'hit'", "SQL92"), ("hit", "TAG")])
def test_long_poll_waits_for_a_matching_arrival(fserver, sub, expr_type):
    """A held pull is not answered by arrivals its filter rejects: it answers with the first
    matching message (RocketMQ's hold service checks each arrival against the filter)."""
    topic = "Hold" + expr_type
    with Producer("HoldP", fserver.namesrv) as p, PullConsumer("HoldG", fserver.namesrv) as c:
        p.send(topic, b"first", queue_id=0, tags="miss", properties={"a": "miss"})
        wait_max(c, topic, 0, 1)
        result = {}

        def held_pull():
            t0 = time.monotonic()
            result["r"] = c.pull(topic, 0, 1, 32, subscription=sub, expression_type=expr_type,
                                 suspend_ms=20_000)
            result["s"] = time.monotonic() - t0
        th = threading.Thread(target=held_pull)
        th.start()
        time.sleep(0.5)  # the pull is held by now (the hit comes long after the misses anyway)
        for i in range(3):
            p.send(topic, b"miss%d" % i, queue_id=0, tags="miss", properties={"a": "miss"})
        wait_max(c, topic, 0, 4)
        time.sleep(1.0)
        assert th.is_alive(), result  # not answered by the misses
        p.send(topic, b"hit", queue_id=0, tags="hit", properties={"a": "hit"})
        th.join(30)
        r = result["r"]
        assert r.status == "FOUND" and [m.body for m in r.messages] == [b"hit"]
        assert r.next_begin_offset == 5
