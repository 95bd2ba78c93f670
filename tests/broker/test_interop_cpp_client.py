"""Apache's C++ RocketMQ client (PyPI ``rocketmq==0.4.4``) against ``rocketstore serve``.

The client lives in its own venv (``.cache/interop-venv``, made by ``make interop-clients``) and
runs in subprocesses with hard timeouts; the broker is a real ``rocketstore serve`` process.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.state.files import load_json_lenient
from rocketstore.client import AdminClient, PullConsumer
from rocketstore.errors import BrokerError
from rocketstore.remoting.codes import ResponseCode

from tests.interop_clients import client_venv_python

from .conftest import start_server

pytestmark = pytest.mark.interop
DRIVER = Path(__file__).with_name("interop_client.py")
N = 100


def _interop_python() -> str:
    return client_venv_python("interop-venv", "rocketmq.client")


def _run(py: str, tmp_path: Path, *args: str, timeout: float = 120) -> list:
    env = {**os.environ, "HOME": str(tmp_path)}  # the C++ client logs under $HOME/logs
    r = subprocess.run([py, str(DRIVER), *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"driver {args} failed ({r.returncode}): {r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cpp_client_produce_pull_push(tmp_path):
    py = _interop_python()
    srv = start_server(str(tmp_path / "store"))
    try:
        sent = _run(py, tmp_path, "produce", srv.namesrv, "InteropTopic", str(N))
        assert len(sent) == N and all(s["status"] == 0 for s in sent), sent[:3]
        ids = {s["msg_id"] for s in sent}
        assert len(ids) == N
        c = PullConsumer("CG_check", srv.namesrv)
        deadline = time.monotonic() + 10  # until the reput has dispatched every message
        while sum(c.max_offset("InteropTopic", q) for q in range(4)) < N:
            assert time.monotonic() < deadline
            time.sleep(0.05)

        pulled = _run(py, tmp_path, "pull", srv.namesrv, "InteropTopic", "CG_pull")
        assert len(pulled) == N
        by_body = {m["body"]: m for m in pulled}
        assert set(by_body) == {f"body-{i}" for i in range(N)}
        for s in sent:
            m = by_body[f"body-{s['i']}"]
            assert m["id"] == s["msg_id"]
            assert m["tags"] == f"Tag{s['i'] % 3}"
            assert m["keys"] == f"key-{s['i']}"
            assert m["topic"] == "InteropTopic"
        assert {m["queue_id"] for m in pulled} == {0, 1, 2, 3}

        pushed = _run(py, tmp_path, "push", srv.namesrv, "InteropTopic", "CG_push", str(N),
                      timeout=150)
        assert {m["body"] for m in pushed} == {f"body-{i}" for i in range(N)}
        assert {m["id"] for m in pushed} == ids
    finally:
        assert srv.stop() == 0, srv.log()
    offsets = load_json_lenient(str(tmp_path / "store" / "config" / "consumerOffset.json"))
    committed = offsets["offsetTable"]["InteropTopic@CG_push"]
    with MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                                  mapped_file_size_commitlog=1 << 20,
                                  mapped_file_size_consume_queue=20 * 1000,
                                  max_hash_slot_num=1000, max_index_num=4000)) as store:
        maxes = {str(q): store.get_max_offset_in_queue("InteropTopic", q) for q in range(4)}
    assert sum(maxes.values()) == N
    assert {k: int(v) for k, v in committed.items()} == maxes


def test_cpp_push_consumer_failure_comes_back_through_the_retry_topic(tmp_path):
    py = _interop_python()
    srv = start_server(str(tmp_path / "store"), "--message-delay-level",
                       "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s")
    try:
        n = 10
        sent = _run(py, tmp_path, "produce", srv.namesrv, "InteropRetry", str(n))
        got = _run(py, tmp_path, "push-retry", srv.namesrv, "InteropRetry", "CG_retry", str(n),
                   timeout=150)
    finally:
        assert srv.stop() == 0, srv.log()
    ids = {s["i"]: s["msg_id"] for s in sent}
    # The C++ client stops a consume batch at the first failure and sends the rest of that
    # batch back unseen, so an even message may show only its retry (reconsume_times 1).
    for i in range(n):
        ds = [d for d in got if d["body"] == f"body-{i}"]
        times = sorted(d["reconsume_times"] for d in ds)
        assert times and set(times) <= {0, 1}, (i, got)
        if i % 2 == 0:
            assert 1 in times, (i, got)  # it failed, came back via %RETRY%CG_retry, succeeded
        assert all(d["id"] == ids[i] for d in ds)  # the same message id after the retry
        assert all(d["topic"] == "InteropRetry" for d in ds)  # retry topic hidden from the app


def test_cpp_orderly_producer_and_orderly_push_consumer_keep_order(tmp_path):
    py = _interop_python()
    srv = start_server(str(tmp_path / "store"))
    try:
        n = 100
        sent = _run(py, tmp_path, "produce-orderly", srv.namesrv, "InteropOrder", str(n))
        assert all(s["status"] == 0 for s in sent)
        got = _run(py, tmp_path, "push-orderly", srv.namesrv, "InteropOrder", "CG_order", str(n),
                   timeout=150)
    finally:
        assert srv.stop() == 0, srv.log()
    per_key: dict[str, list[int]] = {}
    queues: dict[str, set[int]] = {}
    for m in got:
        key, seq = m["body"].split(":")
        per_key.setdefault(key, []).append(int(seq))
        queues.setdefault(key, set()).add(m["queue_id"])
    assert per_key == {str(k): list(range(20)) for k in range(5)}  # every order, in order
    assert all(len(q) == 1 for q in queues.values())


def test_cpp_clients_in_admin_views_and_reset(tmp_path):
    """A live C++ producer and push consumer as mqadmin sees them (producerConnection,
    consumerConnection, consumerProgress), and resetOffsetByTime re-delivering to the C++
    consumer."""
    import threading

    from . import admin_wire as w

    py = _interop_python()
    srv = start_server(str(tmp_path / "store"))
    with AdminClient(broker=srv.broker) as a:  # as an operator would: no auto-create race
        a.create_topic("HoldTopic", 4, 4)
    n = 8
    proc = subprocess.Popen([py, str(DRIVER), "hold", srv.namesrv, "HoldTopic", "CG_hold", str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "HOME": str(tmp_path)})
    events: list[dict] = []
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            ev = json.loads(line)
            events.append(ev)
            if ev["event"] == "ready":
                ready.set()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert ready.wait(120), f"driver never ready: {events} {proc.stderr.read()[-2000:]}"
        bodies = lambda: sorted(e["body"] for e in events if e["event"] == "msg")  # noqa: E731
        assert bodies() == sorted(f"hold-{i}" for i in range(n))

        deadline = time.monotonic() + 30  # the producer heartbeats on its own schedule
        while (r := w.call(srv.broker, 204, {"producerGroup": "PG_hold"})).code != 0:
            assert time.monotonic() < deadline, r.remark
            time.sleep(0.2)
        [conn] = w.body(r)["connectionSet"]
        w.check_shape(conn, w.CONNECTION)
        assert conn["language"] == "CPP"

        c = w.body(w.call(srv.broker, 203, {"consumerGroup": "CG_hold"}))
        w.check_shape(c, w.CONSUMER_CONNECTION)
        assert [x["language"] for x in c["connectionSet"]] == ["CPP"]
        assert (c["consumeType"], c["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
        assert "HoldTopic" in c["subscriptionTable"]

        # everything consumed and (after the client's 5 s commit) no lag
        deadline = time.monotonic() + 30
        while True:
            stats = w.body(w.call(srv.broker, 208, {"consumerGroup": "CG_hold",
                                                    "topic": "HoldTopic"}))
            rows = list(stats["offsetTable"].values())
            if sum(r["consumerOffset"] for r in rows) == n:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
        assert sum(r["brokerOffset"] for r in rows) == n

        r = w.call(srv.broker, 222, {"topic": "HoldTopic", "group": "CG_hold", "timestamp": 0,
                                     "isForce": "true"})
        assert r.code == 0, r.remark
        from collections import Counter
        deadline = time.monotonic() + 60
        while min(Counter(bodies()).values()) < 2:  # every message delivered again
            assert time.monotonic() < deadline, f"not re-delivered after reset: {bodies()}"
            time.sleep(0.2)
        assert set(bodies()) == {f"hold-{i}" for i in range(n)}
    finally:
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        assert srv.stop() == 0, srv.log()


def test_cpp_client_with_session_credentials(tmp_path):
    """The C++ client's ``set_session_credentials`` against a broker with ``aclEnable=true``:
    its signed sends and its push consumer are let through, a denied topic and a wrong secret
    are refused (nothing stored)."""
    from rocketstore.client import SessionCredentials

    from .test_acl import ACL_YML, write_acl_home

    py = _interop_python()
    store, conf = write_acl_home(tmp_path, ACL_YML)
    srv = start_server(store, "--config", conf)
    try:
        ok = _run(py, tmp_path, "acl-produce", srv.namesrv, "topicB", "RocketMQ", "12345678")
        assert ok.get("status") == 0, ok
        denied = _run(py, tmp_path, "acl-produce", srv.namesrv, "topicA", "RocketMQ",
                      "12345678")
        bad = _run(py, tmp_path, "acl-produce", srv.namesrv, "topicB", "RocketMQ", "wrong-secret")
        assert "error" in denied and "error" in bad, (denied, bad)
        got = _run(py, tmp_path, "acl-push", srv.namesrv, "topicB", "groupB", "1", "RocketMQ",
                   "12345678", timeout=150)
        assert [(m["body"], m["id"]) for m in got] == [("acl-body", ok["msg_id"])]
        admin = SessionCredentials("rocketmq2", "12345678")
        with PullConsumer("CG_check", srv.namesrv, credentials=admin) as c:
            assert sum(c.max_offset("topicB", q) for q in range(4)) == 1
            with pytest.raises(BrokerError) as e:  # the refused send did not even create it
                c.queues("topicA")
            assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        assert srv.stop() == 0, srv.log()
