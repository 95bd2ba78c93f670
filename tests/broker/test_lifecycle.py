"""Graceful shutdown and serialisation echo, against a real ``rocketstore serve`` process."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from rocketstore.client import Producer, PullConsumer
from rocketstore.remoting import (SERIALIZE_ROCKETMQ, RemotingCommand, RemotingConnection,
                                  RequestCode)

from .conftest import start_server, wait_max_offset


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_answers_held_pulls_and_closes_the_store_cleanly(tmp_path, sig):
    store = str(tmp_path / "store")
    srv = start_server(store)
    with Producer("PG", srv.namesrv) as p:
        p.send("TopicStop", b"one", queue_id=0)
    c = PullConsumer("CG", srv.namesrv)
    assert wait_max_offset(c, "TopicStop", 0, 1) == 1  # so offset 1 is held, not "overflow"
    result = {}

    def held_pull():
        t0 = time.monotonic()
        try:
            result["r"] = c.pull("TopicStop", 0, 1, suspend_ms=20_000)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            result["err"] = exc
        result["took"] = time.monotonic() - t0

    th = threading.Thread(target=held_pull)
    th.start()
    time.sleep(0.5)  # the pull is now held by the broker
    srv.proc.send_signal(sig)
    th.join(15)
    assert srv.proc.wait(30) == 0, srv.log()
    assert result.get("took", 99) < 10, result
    assert "r" in result and result["r"].status == "NO_NEW_MSG", result  # answered, not dropped
    assert not os.path.exists(os.path.join(store, "abort"))  # clean store shutdown
    assert os.path.exists(os.path.join(store, "config", "topics.json"))


def test_rocketmq_serialised_request_gets_rocketmq_serialised_answer(server):
    host, port = server.broker.rsplit(":", 1)
    codec = RemotingConnection()
    req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0},
                                  serialize_type=SERIALIZE_ROCKETMQ, language="JAVA")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(codec.send(req))
        data = s.recv(65536)
    assert data[4] == SERIALIZE_ROCKETMQ  # the serialize-type byte of the header-length word
    codec.receive_data(data)
    resp = codec.next_command()
    assert resp.serialize_type == SERIALIZE_ROCKETMQ and resp.opaque == req.opaque
    assert resp.is_response and resp.ext_fields == {"offset": "0"}


def test_broker_conf_sets_broker_and_store_settings(tmp_path):
    import json

    from .test_client_broker import raw
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName=ClusterX\nbrokerName=broker-x\n"
                    "defaultTopicQueueNums=2\nmappedFileSizeCommitLog=1048576\n")
    srv = start_server(str(tmp_path / "store"), "--config", str(conf))
    try:
        with Producer("PG", srv.namesrv) as p:  # created on its first send, through TBW102
            r = p.send("ConfTopic", b"x")
        route = json.loads(raw(srv.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               {"topic": "ConfTopic"}).body)
        assert route["brokerDatas"] == [{"brokerAddrs": {"0": srv.broker},
                                         "brokerName": "broker-x", "cluster": "ClusterX"}]
        assert route["queueDatas"][0]["writeQueueNums"] == 2
        assert r.offset_msg_id.startswith("7F000001")  # store host 127.0.0.1:<port>
        port = int(srv.broker.rsplit(":", 1)[1])
        assert int(r.offset_msg_id[8:16], 16) == port
    finally:
        assert srv.stop() == 0, srv.log()
    assert os.path.getsize(next((tmp_path / "store" / "commitlog").iterdir())) == 1048576


def test_sync_flush_broker_sends_concurrently_and_reads_back(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from .test_client_broker import drain, wait_max
    srv = start_server(str(tmp_path / "store"), "--flush-disk-type", "SYNC_FLUSH")
    try:
        with Producer("PG", srv.namesrv) as p:
            with ThreadPoolExecutor(8) as ex:
                results = list(ex.map(lambda i: p.send("SyncTopic", b"s%d" % i), range(40)))
            assert {r.status for r in results} == {"SEND_OK"}
        c = PullConsumer("CG", srv.namesrv)
        for q in range(4):
            wait_max(c, "SyncTopic", q, sum(r.message_queue.queue_id == q for r in results))
        got = drain(c, "SyncTopic")
        assert sorted(m.body for ms in got.values() for m in ms) == \
            sorted(b"s%d" % i for i in range(40))
    finally:
        assert srv.stop() == 0, srv.log()


def test_port_in_use_fails_with_one_line_and_leaves_the_store_clean(tmp_path, server):
    import subprocess
    import sys
    port = server.broker.rsplit(":", 1)[1]
    store = tmp_path / "other"
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(store),
                        "--port", port, "--namesrv-port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "cannot listen" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (store / "abort").exists()
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store", server.store,
                        "--port", "0", "--namesrv-port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "lock" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_closing_a_connection_releases_its_held_pulls(tmp_path):
    """In process, to see the broker's own counters: closed connections leave nothing held."""
    import asyncio

    from rocketstore import StoreConfig
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.broker.wiring import Broker

    async def scenario():
        cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                          mapped_file_size_commitlog=1 << 20,
                          mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                          max_index_num=4000, store_host="127.0.0.1:0")
        broker = Broker(cfg, BrokerConfig(port=0, namesrv_port=None))
        await broker.start()
        broker.topics.create("HeldTopic", 4)
        codec = RemotingConnection()
        writers = []
        for _ in range(20):
            _, w = await asyncio.open_connection("127.0.0.1", broker.config.port)
            w.write(codec.send(RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": "HeldTopic", "queueId": 0, "queueOffset": 0,
                "maxMsgNums": 32, "sysFlag": 6, "commitOffset": 0,
                "suspendTimeoutMillis": 30000, "subscription": "*"})))
            writers.append(w)
        await asyncio.sleep(0.5)
        held_before = broker.hold.waiting
        inflight_before = len(broker.servers[0].inflight)
        for w in writers:
            w.close()
        await asyncio.sleep(0.5)
        after = broker.hold.waiting, len(broker.servers[0].inflight)
        await broker.stop()
        return held_before, inflight_before, after
    held_before, inflight_before, after = asyncio.run(scenario())
    assert held_before == 20 and inflight_before == 20
    assert after == (0, 0)
