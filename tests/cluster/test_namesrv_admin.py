"""Operators' name-server requests over real sockets, without Java: write perms of a broker
(WIPE_WRITE_PERM_OF_BROKER 205, ADD_WRITE_PERM_OF_BROKER 327) and the KV config (PUT 100, GET
101, DELETE 102, GET_KVLIST_BY_NAMESPACE 219) with ORDER_TOPIC_CONFIG, on ``rocketstore
namesrv`` (brokers registered by hand, as a Java broker registers) and on ``rocketstore serve``.

Expected values come from RocketMQ 4.9.7's ``RouteInfoManager`` / ``KVConfigManager`` rules:
wipe clears bit 2 of each of the broker's topics' perm, add sets perm to 6, the count is the
number of the broker's topics; a registration with the same data version keeps the wiped
perms, a new data version replaces them.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import zlib

import pytest

from rocketstore.client import AdminClient, ClientInstance
from rocketstore.client._sync import LoopThread
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import NEED_DATA, RemotingConnection

from ..broker import admin_wire as w
from ..broker.conftest import start_server
from .conftest import start_cluster_broker, start_namesrv, wait_for
from .java_rocketmq import rocketmq_home, start_java_broker

ORDER = "ORDER_TOPIC_CONFIG"


def _register(ns: str, name: str, addr: str, topics: dict[str, int], counter: int):
    """REGISTER_BROKER as a Java 4.9 broker sends it: topic → perm, 4 queues each."""
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": perm,
                 "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
             for t, perm in topics.items()}
    body = json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1}, "topicConfigTable": table}}).encode()
    fields = {"brokerName": name, "brokerAddr": addr, "clusterName": "DefaultCluster",
              "brokerId": 0, "haServerAddr": "", "compressed": "false",
              "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    return _call_kept_open(ns, addr, 103, fields, body)


def _call_kept_open(ns: str, addr: str, code: int, fields: dict, body: bytes = b""):
    """A broker's request on its connection kept open: a name server forgets a broker whose
    registration connection closes (RocketMQ's onChannelDestroy)."""
    host, port = ns.rsplit(":", 1)
    sock = _BROKER_CONNS.get((ns, addr))
    if sock is None:
        sock = _BROKER_CONNS[(ns, addr)] = socket.create_connection((host, int(port)), timeout=60)
    codec = RemotingConnection()
    sock.sendall(codec.send(RemotingCommand.request(code, fields, body, language="JAVA")))
    while True:
        r = codec.next_command()
        if r is not NEED_DATA:
            return r
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError(f"{ns} closed the connection")
        codec.receive_data(data)


_BROKER_CONNS: dict = {}


def _perms(ns: str, topic: str) -> dict[str, int]:
    route = w.body(w.call(ns, 105, {"topic": topic}))
    return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}


def _write_queues(ns: str, topic: str) -> list:
    ci = ClientInstance(ns)
    try:
        return LoopThread.shared().run(ci.route(topic, refresh=True)).write_queues
    finally:
        ci.close()


def test_write_perm_and_kv_config_on_namesrv(tmp_path):
    kv_path = tmp_path / "home" / "namesrv" / "kvConfig.json"
    ns = start_namesrv(None, "--kv-config-path", str(kv_path), "--order-message-enable")
    try:
        a = _register(ns.addr, "broker-a", "127.0.0.1:1", {"T1": 6, "T2": 7, "RO": 4}, 1)
        assert a.code == 0 and not a.body  # no ORDER_TOPIC_CONFIG namespace yet: no kvTable
        assert _register(ns.addr, "broker-b", "127.0.0.1:2", {"T1": 6}, 1).code == 0
        r = w.call(ns.addr, 205, {"brokerName": "broker-a"})
        assert r.code == 0 and r.ext_fields["wipeTopicCount"] == "3"
        assert _perms(ns.addr, "T1") == {"broker-a": 4, "broker-b": 6}
        assert _perms(ns.addr, "T2") == {"broker-a": 5}  # inherit bit kept, write bit gone
        assert {q.broker_name for q in _write_queues(ns.addr, "T1")} == {"broker-b"}
        assert _write_queues(ns.addr, "T2") == []
        assert w.call(ns.addr, 205, {"brokerName": "nobody"}).ext_fields["wipeTopicCount"] == "0"
        # the same data version again: the name server keeps what the operator wiped
        _register(ns.addr, "broker-a", "127.0.0.1:1", {"T1": 6, "T2": 7, "RO": 4}, 1)
        assert _perms(ns.addr, "T1")["broker-a"] == 4
        r = w.call(ns.addr, 327, {"brokerName": "broker-a"})
        assert r.code == 0 and r.ext_fields["addTopicCount"] == "3"
        assert _perms(ns.addr, "T2") == {"broker-a": 6} and _perms(ns.addr, "RO") == {"broker-a": 6}
        w.call(ns.addr, 205, {"brokerName": "broker-a"})
        # a new data version: the broker's own perms come back
        _register(ns.addr, "broker-a", "127.0.0.1:1", {"T1": 6, "T2": 7, "RO": 4}, 2)
        assert _perms(ns.addr, "T1")["broker-a"] == 6 and _perms(ns.addr, "T2")["broker-a"] == 7

        # KV config, ORDER_TOPIC_CONFIG in routes (orderMessageEnable) and register answers
        assert w.call(ns.addr, 101, {"namespace": ORDER, "key": "T1"}).code == 22
        missing = w.call(ns.addr, 219, {"namespace": ORDER})
        assert missing.code == 22 and missing.remark == f"No config item, Namespace: {ORDER}"
        assert w.call(ns.addr, 100, {"namespace": ORDER, "key": "T1",
                                     "value": "broker-a:4;broker-b:4"}).code == 0
        assert w.call(ns.addr, 100, {"namespace": "app", "key": "k", "value": "v"}).code == 0
        bad = w.call(ns.addr, 100, {"namespace": ORDER, "value": "x"})
        assert bad.code == 1 and bad.remark == "namespace or key is null"
        no_value = w.call(ns.addr, 100, {"namespace": ORDER, "key": "T1"})
        assert no_value.code == 1 and "value" in no_value.remark
        got = w.call(ns.addr, 101, {"namespace": ORDER, "key": "T1"})
        assert got.code == 0 and got.ext_fields["value"] == "broker-a:4;broker-b:4"
        table = w.body(w.call(ns.addr, 219, {"namespace": ORDER}))
        w.check_shape(table, w.KV_TABLE)
        assert table == {"table": {"T1": "broker-a:4;broker-b:4"}}
        assert w.body(w.call(ns.addr, 105, {"topic": "T1"}))["orderTopicConf"] == \
            "broker-a:4;broker-b:4"
        assert "orderTopicConf" not in w.body(w.call(ns.addr, 105, {"topic": "T2"}))
        reg = _register(ns.addr, "broker-a", "127.0.0.1:1", {"T1": 6}, 3)
        assert json.loads(reg.body) == {"table": {"T1": "broker-a:4;broker-b:4"}}
        on_disk = json.loads(kv_path.read_text())
        assert on_disk == {"configTable": {ORDER: {"T1": "broker-a:4;broker-b:4"},
                                           "app": {"k": "v"}}}
        with AdminClient(namesrv=ns.addr) as admin:  # the same through the Python API
            assert admin.get_kv_config(ORDER, "T1") == "broker-a:4;broker-b:4"
            assert admin.get_kv_config(ORDER, "T9") is None
            admin.put_kv_config("app", "k2", "v2")
            assert admin.kv_list("app") == {"k": "v", "k2": "v2"} and admin.kv_list("none") == {}
            admin.delete_kv_config("app", "k2")
            assert admin.wipe_write_perm("broker-b") == {ns.addr: 1}
            assert _perms(ns.addr, "T1") == {"broker-a": 6, "broker-b": 4}
            assert admin.add_write_perm("broker-b") == {ns.addr: 1}
        assert w.call(ns.addr, 102, {"namespace": "app", "key": "k"}).code == 0
        assert w.call(ns.addr, 102, {"namespace": "app", "key": "never"}).code == 0
        assert w.call(ns.addr, 101, {"namespace": "app", "key": "k"}).code == 22
        assert w.body(w.call(ns.addr, 219, {"namespace": "app"})) == {"table": {}}

        # topicList -c, deleteTopic and the system topic list over the registered brokers
        _register(ns.addr, "broker-c", "127.0.0.1:3", {"T1": 6, "OnlyC": 6}, 1)
        _call_kept_open(ns.addr, "127.0.0.1:9", 103, {"brokerName": "broker-x", "brokerAddr": "127.0.0.1:9",
                                                      "clusterName": "OtherCluster", "brokerId": 0})
        assert set(w.body(w.call(ns.addr, 224, {"cluster": "DefaultCluster"}))["topicList"]) == \
            {"T1", "T2", "RO", "OnlyC"}
        assert w.call(ns.addr, 224, {"cluster": "NoSuchCluster"}).code == 1
        sys_list = w.body(w.call(ns.addr, 304))
        assert set(sys_list["topicList"]) == {"DefaultCluster", "broker-a", "broker-b",
                                              "broker-c", "OtherCluster", "broker-x"}
        assert sys_list["brokerAddr"] in {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3",
                                          "127.0.0.1:9"}
        assert w.call(ns.addr, 216, {"topic": "T1", "clusterName": "OtherCluster"}).code == 0
        assert set(_perms(ns.addr, "T1")) == {"broker-a", "broker-b", "broker-c"}
        assert w.call(ns.addr, 216, {"topic": "T1", "clusterName": "DefaultCluster"}).code == 0
        assert w.call(ns.addr, 105, {"topic": "T1"}).code == 17
        assert w.call(ns.addr, 216, {"topic": "OnlyC"}).code == 0
        assert "OnlyC" not in w.body(w.call(ns.addr, 206))["topicList"]
    finally:
        assert ns.stop() == 0
    # a restarted name server reads its kvConfig.json back
    ns = start_namesrv(None, "--kv-config-path", str(kv_path))
    try:
        got = w.call(ns.addr, 101, {"namespace": ORDER, "key": "T1"})
        assert got.ext_fields["value"] == "broker-a:4;broker-b:4"
        _register(ns.addr, "broker-a", "127.0.0.1:1", {"T1": 6}, 1)
        assert "orderTopicConf" not in w.body(w.call(ns.addr, 105, {"topic": "T1"}))  # off
        # getNamesrvConfig / updateNamesrvConfig: orderMessageEnable changes live
        conf = dict(ln.split("=", 1) for ln in w.call(ns.addr, 319).body.decode().splitlines())
        assert conf == {"kvConfigPath": str(kv_path), "orderMessageEnable": "false",
                        "listenPort": ns.addr.rsplit(":", 1)[1]}
        assert w.call(ns.addr, 318, body=b"orderMessageEnable=true\n").code == 0
        assert w.body(w.call(ns.addr, 105, {"topic": "T1"}))["orderTopicConf"] == \
            "broker-a:4;broker-b:4"
        path = w.call(ns.addr, 318, body=b"kvConfigPath=/tmp/elsewhere.json\n")
        assert (path.code, path.remark) == (16, "Can not update config path")
        for bad in (b"listenPort=1\n", b"orderMessageEnable=maybe\n",
                    b"orderMessageEnable=false\nnoSuchKey=1\n"):
            r = w.call(ns.addr, 318, body=bad)
            assert r.code == 1 and r.remark, bad
        assert b"orderMessageEnable=true" in w.call(ns.addr, 319).body  # nothing applied
    finally:
        assert ns.stop() == 0
    # a damaged kvConfig.json is read from its .bak (as every state file is); with the backup
    # damaged too the name server refuses to start, naming the file, and changes neither
    good_bak = kv_path.with_name("kvConfig.json.bak").read_text()
    kv_path.write_text("{not json")
    backed_up = [(n, k, v) for n, t in json.loads(good_bak)["configTable"].items()
                 for k, v in t.items()]
    assert backed_up
    ns = start_namesrv(None, "--kv-config-path", str(kv_path))
    try:
        for n, k, v in backed_up:
            assert w.call(ns.addr, 101, {"namespace": n, "key": k}).ext_fields["value"] == v
    finally:
        assert ns.stop() == 0
    kv_path.write_text("{not json")
    kv_path.with_name("kvConfig.json.bak").write_text("[]")
    bad = start_namesrv_failing(kv_path)
    assert "kvConfig.json" in bad and kv_path.read_text() == "{not json"  # nothing lost
    assert kv_path.with_name("kvConfig.json.bak").read_text() == "[]"


def start_namesrv_failing(kv_path) -> str:
    import sys

    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "namesrv", "--port", "0",
                        "--kv-config-path", str(kv_path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    return p.stderr


def test_write_perm_and_order_conf_on_serve(tmp_path):
    """``serve``'s name server answers for its own broker: wipe/add change the perms it
    routes, until the broker's topic table changes; ORDER_TOPIC_CONFIG marks order topics."""
    store = tmp_path / "store"
    srv = start_server(str(store))
    try:
        assert w.call(srv.broker, 17, {"topic": "PermT", "readQueueNums": 2, "writeQueueNums": 2,
                                       "perm": 6}).code == 0
        n_topics = len(w.body(w.call(srv.broker, 21))["topicConfigTable"])
        r = w.call(srv.namesrv, 205, {"brokerName": "broker-a"})
        assert r.code == 0 and int(r.ext_fields["wipeTopicCount"]) == n_topics
        assert _perms(srv.namesrv, "PermT") == {"broker-a": 4}
        assert _write_queues(srv.namesrv, "PermT") == []
        assert w.call(srv.namesrv, 205, {"brokerName": "broker-x"}).ext_fields[
            "wipeTopicCount"] == "0"
        r = w.call(srv.namesrv, 327, {"brokerName": "broker-a"})
        assert int(r.ext_fields["addTopicCount"]) == n_topics
        assert _perms(srv.namesrv, "PermT") == {"broker-a": 6}
        assert len(_write_queues(srv.namesrv, "PermT")) == 2
        w.call(srv.namesrv, 205, {"brokerName": "broker-a"})
        # the broker's topic table changes (a new topic): its own perms are routed again
        assert w.call(srv.broker, 17, {"topic": "PermT2", "writeQueueNums": 1, "perm": 6}).code == 0
        assert _perms(srv.namesrv, "PermT") == {"broker-a": 6}

        assert w.call(srv.namesrv, 100, {"namespace": ORDER, "key": "PermT",
                                         "value": "broker-a:2"}).code == 0
        conf = w.body(w.call(srv.broker, 21))["topicConfigTable"]
        assert conf["PermT"]["order"] is True and conf["PermT2"]["order"] is False
        kv_file = store / "config" / "kvConfig.json"
        assert json.loads(kv_file.read_text()) == {"configTable": {ORDER: {"PermT": "broker-a:2"}}}
        assert w.call(srv.namesrv, 102, {"namespace": ORDER, "key": "PermT"}).code == 0
        assert w.body(w.call(srv.broker, 21))["topicConfigTable"]["PermT"]["order"] is False
    finally:
        assert srv.stop() == 0, srv.log()


def test_registered_broker_takes_order_topics(tmp_path):
    """``serve --namesrv``: the answer to REGISTER_BROKER carries ORDER_TOPIC_CONFIG and the
    broker marks exactly those topics ``order``, as RocketMQ's broker does."""
    ns = start_namesrv(None, "--kv-config-path", str(tmp_path / "kv.json"),
                       "--order-message-enable")
    b = None
    try:
        assert w.call(ns.addr, 100, {"namespace": ORDER, "key": "OrdT",
                                     "value": "broker-o:2"}).code == 0
        b = start_cluster_broker(str(tmp_path), ns.addr, "broker-o")

        def order_flags() -> dict[str, bool]:
            conf = w.body(w.call(b.broker, 21))["topicConfigTable"]
            return {t: c["order"] for t, c in conf.items() if t.startswith("Ord")}
        # a new topic re-registers the broker at once; the answer marks it
        assert w.call(b.broker, 17, {"topic": "OrdT", "readQueueNums": 2, "writeQueueNums": 2,
                                     "perm": 6}).code == 0
        assert w.call(b.broker, 17, {"topic": "OrdOther", "writeQueueNums": 1,
                                     "perm": 6}).code == 0
        assert wait_for(lambda: order_flags() == {"OrdT": True, "OrdOther": False}), order_flags()
        assert w.body(w.call(ns.addr, 105, {"topic": "OrdT"}))["orderTopicConf"] == "broker-o:2"
        assert w.call(ns.addr, 102, {"namespace": ORDER, "key": "OrdT"}).code == 0
        assert w.call(b.broker, 17, {"topic": "OrdThird", "writeQueueNums": 1,
                                     "perm": 6}).code == 0
        assert wait_for(lambda: not any(order_flags().values())), order_flags()
        assert "orderTopicConf" not in w.body(w.call(ns.addr, 105, {"topic": "OrdT"}))
    finally:
        if b is not None:
            assert b.stop() == 0
        assert ns.stop() == 0


def _mqadmin(home: str, *args: str) -> str:
    p = subprocess.run([os.path.join(home, "mqadmin"), *args], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, TOOLS_HEAP="192m"))
    return p.stdout + p.stderr


@pytest.mark.timeout(400)
def test_java_broker_at_our_namesrv(tmp_path):
    """RocketMQ's own broker registered at ``rocketstore namesrv``, driven with RocketMQ's
    ``mqadmin``: wipe/add write perms, the order flag from ORDER_TOPIC_CONFIG taken by the Java
    broker from the register answer, ``topicList -c`` and ``deleteTopic`` over the cluster."""
    home = rocketmq_home()
    ns = start_namesrv(None, "--kv-config-path", str(tmp_path / "kv.json"),
                       "--order-message-enable")
    jb = None
    try:
        jb = start_java_broker(home, str(tmp_path / "jb"), ns.addr, "broker-j")
        assert wait_for(lambda: w.call(ns.addr, 105, {"topic": "TBW102"}).code == 0, timeout=60)
        n_topics = len(w.body(w.call(jb.addr, 21))["topicConfigTable"])
        out = _mqadmin(home, "wipeWritePerm", "-n", ns.addr, "-b", "broker-j")
        assert f"wipe write perm of broker[broker-j] in name server[{ns.addr}] OK, {n_topics}" \
            in out, out
        assert _perms(ns.addr, "TBW102") == {"broker-j": 7 & ~2}
        out = _mqadmin(home, "addWritePerm", "-n", ns.addr, "-b", "broker-j")
        assert f"OK, {n_topics}" in out and _perms(ns.addr, "TBW102") == {"broker-j": 6}, out

        assert w.call(ns.addr, 100, {"namespace": ORDER, "key": "JOrd",
                                     "value": "broker-j:4"}).code == 0
        assert w.call(jb.addr, 17, {"topic": "JOrd", "readQueueNums": 4, "writeQueueNums": 4,
                                    "perm": 6, "topicFilterType": "SINGLE_TAG",
                                    "topicSysFlag": 0, "order": "false"}).code == 0
        # the Java broker registers the new topic at once and takes the order flag from the answer
        assert wait_for(lambda: w.body(w.call(jb.addr, 21))["topicConfigTable"]["JOrd"]["order"],
                        timeout=60)
        assert wait_for(lambda: w.call(ns.addr, 105, {"topic": "JOrd"}).code == 0, timeout=60)
        assert w.body(w.call(ns.addr, 105, {"topic": "JOrd"}))["orderTopicConf"] == "broker-j:4"
        out = _mqadmin(home, "topicList", "-n", ns.addr, "-c", "DefaultCluster")
        assert re.search(r"^DefaultCluster\s+JOrd\s", out, re.M), out
        out = _mqadmin(home, "deleteTopic", "-n", ns.addr, "-c", "DefaultCluster", "-t", "JOrd")
        assert "delete topic [JOrd] from NameServer success" in out, out
        assert w.call(ns.addr, 105, {"topic": "JOrd"}).code == 17
        assert "JOrd" not in w.body(w.call(jb.addr, 21))["topicConfigTable"]
    finally:
        if jb is not None:
            jb.stop()
        assert ns.stop() == 0
