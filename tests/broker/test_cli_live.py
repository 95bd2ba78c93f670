"""``rocketstore topics|status|consumers|get|query`` against a running broker (through the name
server or the broker) and against its store directory opened read-only beside it."""
from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from rocketstore.cli import main
from rocketstore.client import Producer
from rocketstore.format.message import parse_message_id

from . import admin_wire as w
from .conftest import start_server

TOPIC = "LiveT"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    srv = start_server(str(tmp_path_factory.mktemp("live") / "store"))
    try:
        w.call(srv.broker, 17, {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2})
        with Producer("LivePG", srv.namesrv) as p:
            sent = [p.send(TOPIC, b"live-%d" % i, tags="A" if i % 2 else "B", keys=[f"lk{i}"],
                           queue_id=0 if i < 7 else 1) for i in range(10)]
        w.wait_dispatched(srv.broker, TOPIC, {0: 7, 1: 3})
        held = w.HeldClient(srv.broker, "127.0.0.1@live", consumer_groups=[
            w.consumer_data("LiveCG", TOPIC)])
        assert held.heartbeat().code == 0
        w.call(srv.broker, 15, {"consumerGroup": "LiveCG", "topic": TOPIC, "queueId": 0,
                                "commitOffset": 4})
        yield {"srv": srv, "sent": sent, "held": held}
        held.close()
    finally:
        assert srv.stop() == 0, srv.log()


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def run_json(*args: str):
    code, out = run(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def targets(live) -> list[list[str]]:
    srv = live["srv"]
    return [["--namesrv", srv.namesrv], ["--broker", srv.broker], ["--store", srv.store]]


def test_topics_everywhere(live):
    for target in targets(live):
        rows = {r["topic"]: r for r in run_json("topics", *target)["topics"]}
        assert TOPIC in rows, target
        r = rows[TOPIC]
        assert (r["readQueueNums"], r["writeQueueNums"], r["messages"], r["maxOffset"]) == \
            (2, 2, 10, 10), target
        assert "TBW102" not in rows  # system topics only with --all
        assert "TBW102" in {r["topic"] for r in run_json("topics", *target, "--all")["topics"]}
    code, out = run("topics", "--namesrv", live["srv"].namesrv)
    assert code == 0 and TOPIC in out and "MESSAGES" in out


def test_status(live):
    last = max(parse_message_id(s.offset_msg_id)[1] for s in live["sent"])
    for target in targets(live):
        [b] = run_json("status", *target)["brokers"]
        rt = b["runtime"]
        assert int(rt["commitLogMaxOffset"]) > last, target
        assert int(rt["commitLogMinOffset"]) == 0
        assert rt["brokerVersionDesc"] == "V4_9_7"
    [b] = run_json("status", "--namesrv", live["srv"].namesrv)["brokers"]
    assert (b["name"], b["cluster"], b["addr"]) == ("broker-a", "DefaultCluster",
                                                     live["srv"].broker)
    assert int(b["runtime"]["msgPutTotalTodayNow"]) >= 10


def test_consumers_online(live):
    srv = live["srv"]
    for target in targets(live)[:2]:
        rows = {r["group"]: r for r in run_json("consumers", *target)["groups"]}
        g = rows["LiveCG"]
        # queue 0 holds 7 messages, 4 committed; queue 1 holds 3, none committed
        assert (g["online"], g["totalLag"], g["topics"]) == (1, 3 + 3, [TOPIC]), target
    [g] = run_json("consumers", "--broker", srv.broker, "--group", "LiveCG")["groups"]
    q = {r["queueId"]: (r["brokerOffset"], r["consumerOffset"], r["lag"]) for r in g["queues"]}
    assert q == {0: (7, 4, 3), 1: (3, 0, 3)}
    code, out = run("consumers", "--namesrv", srv.namesrv, "--group", "LiveCG")
    assert code == 0 and "LAST CONSUMED" in out


def test_consumers_from_store_once_offsets_persisted(live):
    srv = live["srv"]
    path = os.path.join(srv.store, "config", "consumerOffset.json")
    deadline = time.monotonic() + 90  # the broker persists offsets every 5 s
    while not (os.path.exists(path) and f"{TOPIC}@LiveCG" in open(path).read()):
        assert time.monotonic() < deadline, "offsets never persisted"
        time.sleep(0.2)
    rows = {r["group"]: r for r in run_json("consumers", "--store", srv.store)["groups"]}
    assert rows["LiveCG"]["totalLag"] == 6 and rows["LiveCG"]["online"] == 0


def test_get_through_broker_matches_store(live):
    srv = live["srv"]
    args = ["get", "--topic", TOPIC, "--queue", "0", "--offset", "2", "--max", "3"]
    results = [run_json(*args, *t) for t in targets(live)]
    for res in results:
        assert res["status"] == "FOUND"
        assert [m["body"] for m in res["messages"]] == ["live-2", "live-3", "live-4"]
        assert (res["min_offset"], res["max_offset"], res["next_begin_offset"]) == (0, 7, 5)
    assert results[0]["messages"] == results[2]["messages"]
    res = run_json("get", "--topic", TOPIC, "--queue", "0", "--offset", "0", "--subscription", "A",
                   "--broker", srv.broker)
    assert [m["tags"] for m in res["messages"]] == ["A", "A", "A"]
    res = run_json("get", "--topic", TOPIC, "--queue", "0", "--offset", "7", "--broker", srv.broker)
    assert res["status"] == "NO_NEW_MSG" and res["messages"] == []


def test_query_through_broker(live):
    srv = live["srv"]
    for t in targets(live):
        res = run_json("query", "--topic", TOPIC, "--key", "lk5", *t)
        assert [m["body"] for m in res["messages"]] == ["live-5"], t
        sent = live["sent"][3]
        res = run_json("query", "--msg-id", sent.offset_msg_id, *t)
        assert [m["body"] for m in res["messages"]] == ["live-3"], t
        res = run_json("query", "--msg-id", sent.msg_id, "--topic", TOPIC, *t)
        assert [m["uniq_key"] for m in res["messages"]] == [sent.msg_id], t
    res = run_json("query", "--topic", TOPIC, "--key", "nope", "--broker", srv.broker)
    assert res["count"] == 0


def test_bad_targets():
    code, out = run("topics")
    assert code == 2 and "exactly one of --namesrv, --broker and --store" in out
    code, out = run("status", "--broker", "127.0.0.1:1")
    assert code == 1 and "cannot reach 127.0.0.1:1" in out
    assert len(out.strip().splitlines()) == 1
