"""``mqadmin consumerStatus``'s requests over real sockets, without Java: the broker forwards
GET_CONSUMER_RUNNING_INFO (307) to the consumer's own connection and relays the answer, and
INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) gathers GET_CONSUMER_STATUS_FROM_CLIENT (221) from
every client of a group; the Python push consumer answers both.

Expected values are what this test sent and consumed (offsets), RocketMQ 4.9.7's field names
(``ConsumerRunningInfo``, ``ProcessQueueInfo``, ``ConsumeStatus``, ``SubscriptionData``) and
Java's ``String.hashCode`` computed here.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from click.testing import CliRunner

from rocketstore.cli import main
from rocketstore.client import AdminClient, Producer, PushConsumer

from . import admin_wire as w
from .conftest import start_server

TOPIC, GROUP = "StatusT", "StatusCG"
PROCESS_QUEUE_INFO = {k: w.INT for k in (
    "commitOffset", "cachedMsgMinOffset", "cachedMsgMaxOffset", "cachedMsgCount",
    "cachedMsgSizeInMiB", "transactionMsgMinOffset", "transactionMsgMaxOffset",
    "transactionMsgCount", "tryUnlockTimes", "lastLockTimestamp", "lastPullTimestamp",
    "lastConsumeTimestamp")} | {"locked": w.BOOL, "droped": w.BOOL}
CONSUME_STATUS = {"pullRT": w.NUM, "pullTPS": w.NUM, "consumeRT": w.NUM, "consumeOKTPS": w.NUM,
                  "consumeFailedTPS": w.NUM, "consumeFailedMsgs": w.INT}


def java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_running_info_and_status_from_python_consumer(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    held = None
    try:
        assert w.call(srv.broker, 17, {"topic": TOPIC, "readQueueNums": 2, "writeQueueNums": 2,
                                       "perm": 6}).code == 0
        with Producer("StatusPG", srv.namesrv) as p:
            sent = [p.send(TOPIC, b"s-%d" % i, tags="TagA", queue_id=i % 2) for i in range(6)]
        w.wait_dispatched(srv.broker, TOPIC, {0: 3, 1: 3})
        got: list[bytes] = []
        done = threading.Event()

        def listener(m):
            got.append(m.body)
            if len(got) == 6:
                done.set()
        c = PushConsumer(GROUP, srv.namesrv, {TOPIC: "TagA || TagB"}, listener,
                         consume_from="first", long_poll_ms=1000).start()
        try:
            assert done.wait(60), got
            # what the consumer has consumed is what it reports (offsets move right after)
            expected = {(TOPIC, 0): 3, (TOPIC, 1): 3, ("%RETRY%" + GROUP, 0): 0}
            deadline = time.monotonic() + 30
            while True:
                r = w.call(srv.broker, 307, {"consumerGroup": GROUP, "clientId": c.client_id,
                                             "jstackEnable": "true"})
                assert r.code == 0, r.remark
                info = w.body(r)
                offsets = {(k["topic"], k["queueId"]): v["commitOffset"]
                           for k, v in info["mqTable"].items()}
                if offsets == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert offsets == expected
            assert set(info) == {"properties", "subscriptionSet", "mqTable", "statusTable",
                                 "jstack"}
            props = info["properties"]
            assert all(isinstance(v, str) for v in props.values())
            assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            assert props["PROP_CONSUMEORDERLY"] == "false"
            assert props["PROP_NAMESERVER_ADDR"] == srv.namesrv + ";"
            assert props["consumerGroup"] == GROUP and props["messageModel"] == "CLUSTERING"
            assert int(props["PROP_CONSUMER_START_TIMESTAMP"]) <= int(time.time() * 1000)
            subs = {s["topic"]: s for s in info["subscriptionSet"]}
            assert set(subs) == {TOPIC, "%RETRY%" + GROUP}
            for s in subs.values():
                w.check_shape(s, w.SUBSCRIPTION_DATA)
            assert subs[TOPIC]["subString"] == "TagA || TagB"
            assert subs[TOPIC]["tagsSet"] == ["TagA", "TagB"]
            assert subs[TOPIC]["codeSet"] == [java_hash("TagA"), java_hash("TagB")]
            for pq in info["mqTable"].values():
                w.check_shape(pq, PROCESS_QUEUE_INFO)
                assert pq["cachedMsgCount"] == 0 and pq["lastPullTimestamp"] > 0
            status = info["statusTable"][TOPIC]
            w.check_shape(status, CONSUME_STATUS)
            assert abs(status["consumeOKTPS"] - 6 / 60) < 1e-9  # six in the last minute
            assert status["consumeFailedMsgs"] == 0 and status["pullTPS"] > 0
            assert "Thread: " in info["jstack"]

            with AdminClient(namesrv=srv.namesrv) as admin:  # the same through the Python API
                view = admin.consumer_running_info(GROUP, c.client_id)
            assert {(q["topic"], q["queueId"]): q["commitOffset"] for q in view["queues"]} == \
                expected
            assert view["properties"]["consumerGroup"] == GROUP and view["jstack"] is None

            # the CLI: rocketstore consumers --group G --clients
            r = CliRunner().invoke(main, ["consumers", "--namesrv", srv.namesrv, "--group",
                                          GROUP, "--clients", "--json"])
            assert r.exit_code == 0, r.output
            [row] = json.loads(r.output)["groups"]
            [client] = row["clients"]
            assert client["clientId"] == c.client_id and client["language"] == "PYTHON"
            assert {(q["topic"], q["queueId"]): q["commitOffset"]
                    for q in client["queues"]} == expected
            r = CliRunner().invoke(main, ["consumers", "--namesrv", srv.namesrv, "--group",
                                          GROUP, "--clients"])
            assert r.exit_code == 0 and f"client {c.client_id} (PYTHON" in r.output, r.output
            r = CliRunner().invoke(main, ["consumers", "--namesrv", srv.namesrv, "--clients"])
            assert r.exit_code != 0 and "--clients needs --group" in r.output

            # 223: the broker asks every client of the group (221) for the topic's offsets
            r = w.call(srv.broker, 223, {"topic": TOPIC, "group": GROUP, "clientAddr": ""})
            assert r.code == 0, r.remark
            table = w.body(r)
            assert table["messageQueueTable"] == {}
            assert {(k["topic"], k["queueId"]): v
                    for k, v in table["consumerTable"][c.client_id].items()} == \
                {(TOPIC, 0): 3, (TOPIC, 1): 3}
            none = w.call(srv.broker, 223, {"topic": TOPIC, "group": "NoSuchCG"})
            assert none.code == 1 and "No Any Consumer online" in none.remark

            # 309: the broker attaches the stored message, the listener consumes it once more
            r = w.call(srv.broker, 309, {"consumerGroup": GROUP, "clientId": c.client_id,
                                         "msgId": sent[4].offset_msg_id})
            assert r.code == 0, r.remark
            result = w.body(r)
            assert {k: result[k] for k in ("consumeResult", "order", "autoCommit")} == \
                {"consumeResult": "CR_SUCCESS", "order": False, "autoCommit": True}
            assert isinstance(result["spentTimeMills"], int)
            assert len(got) == 7 and got[-1] == b"s-4"
        finally:
            c.shutdown()

        # forwarding, seen from the client's side: header and body pass through both ways
        held = w.HeldClient(srv.broker, "127.0.0.1@held", consumer_groups=[
            w.consumer_data("HeldCG", TOPIC)])
        assert held.heartbeat().code == 0
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(w.call, srv.broker, 307, {"consumerGroup": "HeldCG",
                                                        "clientId": "127.0.0.1@held",
                                                        "jstackEnable": "false"})
            ask = held.wait(lambda c: c.code == 307 and not c.is_response)
            assert ask.ext_fields == {"consumerGroup": "HeldCG", "clientId": "127.0.0.1@held",
                                      "jstackEnable": "false"}
            held.respond(ask.response(0, {"x": "y"}, remark="relayed", body=b'{"a":1}'))
            r = fut.result(60)
        assert (r.code, r.remark, r.body, r.ext_fields.get("x")) == (0, "relayed", b'{"a":1}', "y")
        gone = w.call(srv.broker, 307, {"consumerGroup": "HeldCG", "clientId": "nobody"})
        assert gone.code == 1 and gone.remark == "The Consumer <HeldCG> <nobody> not online"
    finally:
        if held is not None:
            held.close()
        assert srv.stop() == 0, srv.log()


def test_consume_stats_tracker_counts_and_stays_small():
    from rocketstore.client.running_info import ConsumeStatsTracker

    t = ConsumeStatsTracker()
    t.pulled("T", 4.0, 5)
    t.pulled("T", 2.0, 0)
    for rt, ok in ((1.0, True), (3.0, True), (2.0, False), (2.0, False), (2.0, False)):
        t.consumed("T", rt, ok)
    s = t.status("T")
    assert s == {"pullRT": 3.0, "pullTPS": 5 / 60, "consumeRT": 2.0, "consumeOKTPS": 2 / 60,
                 "consumeFailedTPS": 3 / 60, "consumeFailedMsgs": 3}
    assert t.status("Other")["consumeOKTPS"] == 0.0
    for _ in range(100_000):  # a busy minute keeps one bucket per second, not one per message
        t.consumed("T", 0.1, True)
    assert len(t._seconds["T"]) <= 61
