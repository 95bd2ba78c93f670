"""``serve --namesrv``: brokers register at outside name servers (ours and RocketMQ's), and our
name server serves several brokers' routes, Java brokers' included."""
from __future__ import annotations

import json
import time
import zlib

import pytest

from rocketstore.broker.namesrv.routes import RouteTable
from rocketstore.client import ClientInstance, Producer, PullConsumer
from rocketstore.client._sync import LoopThread
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.jsonbody import load_json_text

from .conftest import start_cluster_broker, start_namesrv, wait_for
from .java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv


def _ask(namesrv: str, code: int, fields=None, body: bytes = b"", ok=(ResponseCode.SUCCESS,)):
    ci = ClientInstance(namesrv)
    try:
        return LoopThread.shared().run(ci.invoke(namesrv, code, fields, body, ok=ok))
    finally:
        ci.close()


def _route_brokers(namesrv: str, topic: str) -> dict[str, int]:
    """broker name -> write queue count of ``topic`` as the name server answers."""
    resp = _ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
    if resp.code != ResponseCode.SUCCESS:
        return {}
    data = load_json_text(resp.body.decode())
    return {q["brokerName"]: q["writeQueueNums"] for q in data["queueDatas"]}


def _send_all(namesrv: str, topic: str, n: int) -> list:
    with Producer("cluster-pg", namesrv) as p:
        return [p.send(topic, b"m-%d" % i, keys=[f"k{i}"]) for i in range(n)]


def test_two_brokers_one_name_server(two_brokers):
    ns, (a, b) = two_brokers
    info = json.loads(_ask(ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": a.broker}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": b.broker}
    # a new topic: the name server does not know it; the producer follows TBW102 to both
    # brokers, which create it and register it at once
    assert _route_brokers(ns.addr, "Orders") == {}
    results = _send_all(ns.addr, "Orders", 16)
    assert {r.message_queue.broker_name for r in results} >= {"broker-a"}
    assert wait_for(lambda: len(_route_brokers(ns.addr, "Orders")) == 2
                    or set(_route_brokers(ns.addr, "Orders")) ==
                    {r.message_queue.broker_name for r in results})
    routes = _route_brokers(ns.addr, "Orders")
    assert set(routes) == {r.message_queue.broker_name for r in results}
    topics = json.loads(_ask(ns.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
    assert "Orders" in topics["topicList"] and "TBW102" in topics["topicList"]
    # every message can be pulled back from the broker that owns its queue
    with PullConsumer("cluster-cg", ns.addr) as c:
        got = set()
        for mq in c.queues("Orders"):
            addr = LoopThread.shared().run(c.instance.broker_addr(mq))
            assert addr == {"broker-a": a.broker, "broker-b": b.broker}[mq.broker_name]
        for r in results:
            mq = r.message_queue
            pr = c.pull_from(mq, r.queue_offset, 1)
            got.update(m.body for m in pr.messages)
    assert got == {b"m-%d" % i for i in range(16)}
    # a broker that shuts down unregisters: its queues leave the route at once
    assert a.stop() == 0
    assert "broker-a" not in _route_brokers(ns.addr, "TBW102")
    info = json.loads(_ask(ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-b"]}


def test_serve_name_server_takes_other_brokers(tmp_path):
    """The name server inside ``serve`` answers for its own broker and registered ones."""
    from tests.broker.conftest import start_server
    a = start_server(str(tmp_path / "a"), "--broker-name", "broker-a")
    b = None
    try:
        b = start_cluster_broker(str(tmp_path), a.namesrv, "broker-b")
        assert set(_route_brokers(a.namesrv, "TBW102")) == {"broker-a", "broker-b"}
        # a topic created on broker-b only (admin request to that broker) is routed to it
        ci = ClientInstance(a.namesrv)
        LoopThread.shared().run(ci.invoke(b.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                          {"topic": "OnlyB", "readQueueNums": 2,
                                           "writeQueueNums": 2, "perm": 6}))
        ci.close()
        assert wait_for(lambda: _route_brokers(a.namesrv, "OnlyB") == {"broker-b": 2})
    finally:
        if b is not None:
            b.stop()
        a.stop()


def test_broker_registers_again_at_a_restarted_name_server(tmp_path):
    """A name server that restarts (empty) learns the broker again without waiting 30 s: the
    lost connection is noticed and the broker registers anew."""
    ns = start_namesrv()
    port = int(ns.addr.rsplit(":", 1)[1])
    b = start_cluster_broker(str(tmp_path), ns.addr, "broker-r")
    try:
        assert "broker-r" in _route_brokers(ns.addr, "TBW102")
        assert ns.stop() == 0
        ns = start_namesrv(port)
        assert wait_for(lambda: "broker-r" in _route_brokers(ns.addr, "TBW102"), timeout=30)
    finally:
        b.stop()
        ns.stop()


def test_register_broker_checks_crc_and_body():
    ns = start_namesrv()
    try:
        body = json.dumps({"topicConfigSerializeWrapper": {
            "dataVersion": {"counter": 1, "timestamp": 1},
            "topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 3,
                                       "writeQueueNums": 3, "perm": 6}}}}).encode()
        hdr = {"brokerName": "bx", "brokerAddr": "127.0.0.1:1", "clusterName": "C",
               "brokerId": 0, "compressed": False}
        bad = _ask(ns.addr, RequestCode.REGISTER_BROKER,
                   dict(hdr, bodyCrc32=(zlib.crc32(body) & 0x7FFFFFFF) ^ 1), body,
                   ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "crc32" in bad.remark
        assert _route_brokers(ns.addr, "T") == {}
        junk = _ask(ns.addr, RequestCode.REGISTER_BROKER, hdr, b"{not json",
                    ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        assert junk.code == ResponseCode.SYSTEM_ERROR
        # a broker keeps its connection: the name server forgets a broker whose connection
        # closes (RocketMQ's onChannelDestroy)
        ci = ClientInstance(ns.addr)
        try:
            ok = LoopThread.shared().run(ci.invoke(
                ns.addr, RequestCode.REGISTER_BROKER,
                dict(hdr, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF), body))
            assert ok.code == ResponseCode.SUCCESS
            assert _route_brokers(ns.addr, "T") == {"bx": 3}
            LoopThread.shared().run(ci.invoke(
                ns.addr, RequestCode.UNREGISTER_BROKER,
                {"brokerName": "bx", "brokerAddr": "127.0.0.1:1", "clusterName": "C", "brokerId": 0}))
            assert _route_brokers(ns.addr, "T") == {}
            LoopThread.shared().run(ci.invoke(
                ns.addr, RequestCode.REGISTER_BROKER,
                dict(hdr, bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF), body))
            assert _route_brokers(ns.addr, "T") == {"bx": 3}
        finally:
            ci.close()
        wait_for_routes = time.monotonic() + 10
        while _route_brokers(ns.addr, "T") and time.monotonic() < wait_for_routes:
            time.sleep(0.05)
        assert _route_brokers(ns.addr, "T") == {}  # its connection closed: gone at once
    finally:
        ns.stop()


def test_route_table_expiry_and_data_version():
    t = RouteTable(expiry_s=0.0)
    t.register("C", "h:1", "b", 0, {"T": {"readQueueNums": 2, "writeQueueNums": 2}}, "v1")
    assert t.topic_names() == set()  # silent longer than the expiry: gone
    t = RouteTable()
    t.register("C", "h:1", "b", 0, {"T": {"readQueueNums": 2, "writeQueueNums": 2}}, "v1")
    # same data version: the queue data is not replaced (RocketMQ's rule)
    t.register("C", "h:1", "b", 0, {"T": {"readQueueNums": 5, "writeQueueNums": 5}}, "v1")
    assert t.route("T")[1][0]["writeQueueNums"] == 2
    t.register("C", "h:1", "b", 0, {"T": {"readQueueNums": 5, "writeQueueNums": 5}}, "v2")
    assert t.route("T")[1][0]["writeQueueNums"] == 5


@pytest.mark.timeout(300)
def test_serve_registers_at_java_name_server(tmp_path):
    home = rocketmq_home()
    ns = start_java_namesrv(home, str(tmp_path / "jns"))
    ours = None
    try:
        ours = start_cluster_broker(str(tmp_path), ns.addr, "broker-py")
        info = load_json_text(_ask(ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body.decode())
        assert info["brokerAddrTable"]["broker-py"]["brokerAddrs"] in ({"0": ours.broker},)
        results = _send_all(ns.addr, "ViaJavaNs", 6)
        assert {r.message_queue.broker_name for r in results} == {"broker-py"}
        assert wait_for(lambda: _route_brokers(ns.addr, "ViaJavaNs") == {"broker-py": 4})
        assert _pulled_bodies(ns.addr, results) == {b"m-%d" % i for i in range(6)}
        assert ours.stop() == 0
        assert wait_for(lambda: _route_brokers(ns.addr, "ViaJavaNs") == {}, timeout=10)
    finally:
        if ours is not None:
            ours.stop()
        ns.stop()


def _pulled_bodies(namesrv: str, results) -> set[bytes]:
    """The body at each send result's queue and offset (pulled again until all are there: a
    broker's reput dispatches on its own time, and a loaded machine can ask first)."""
    bodies: set[bytes] = set()
    with PullConsumer("cg", namesrv) as c:
        def pulled() -> bool:
            for r in results:
                bodies.update(m.body for m in
                              c.pull_from(r.message_queue, r.queue_offset, 1).messages)
            return len(bodies) == len(results)
        wait_for(pulled, timeout=30)
    return bodies


@pytest.mark.timeout(300)
def test_java_broker_registers_at_our_name_server(tmp_path):
    home = rocketmq_home()
    ns = start_namesrv()
    jb = None
    try:
        jb = start_java_broker(home, str(tmp_path / "jb"), ns.addr, "broker-java")
        assert wait_for(lambda: "broker-java" in _route_brokers(ns.addr, "TBW102"), timeout=60)
        results = _send_all(ns.addr, "JavaTopic", 6)
        assert {r.message_queue.broker_name for r in results} == {"broker-java"}
        assert wait_for(lambda: _route_brokers(ns.addr, "JavaTopic") == {"broker-java": 4})
        assert _pulled_bodies(ns.addr, results) == {b"m-%d" % i for i in range(6)}
    finally:
        if jb is not None:
            jb.stop()
        ns.stop()


def test_serve_refuses_a_bad_name_server_address(tmp_path):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                        str(tmp_path / "s"), "--namesrv", "127.0.0.1;nohost:x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "want HOST:PORT" in p.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was written
