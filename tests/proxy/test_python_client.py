"""PyPI ``rocketmq-python-client==5.1.2`` (RocketMQ 5.x, gRPC) against ``rocketstore serve``.

Producer (normal, FIFO with message groups, delayed) and SimpleConsumer (receive/ack,
invisible-time expiry and redelivery, max attempts → DLQ, pop state across a restart), and the
cross-protocol round trip with the 4.x remoting client: one message, one id on both sides.
"""
from __future__ import annotations

import time

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.client import Producer as RemotingProducer
from rocketstore.client import PullConsumer

from .conftest import (client_python, make_groups, run_client, run_script, start_grpc_server,
                       write_conf)

pytestmark = pytest.mark.interop


def _small(store: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=store, mapped_file_size_commitlog=1 << 20,
                       mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                       max_index_num=4000)


def _pull_all(namesrv: str, topic: str, queues: int, group: str = "CG_check") -> list:
    c = PullConsumer(group, namesrv)
    out = []
    try:
        for q in range(queues):
            offset = 0
            while True:
                r = c.pull(topic, q, offset, 32)
                if not r.messages:
                    break
                out.extend(r.messages)
                offset = r.next_begin_offset
    finally:
        c.shutdown()
    return out


def test_produce_and_simple_consume_with_the_5x_python_client(tmp_path):
    py = client_python()
    store = str(tmp_path / "store")
    srv = start_grpc_server(store, {"Orders": 4, "Fifo": 4, "Later": 2},
                            "--message-delay-level", "1s 2s 3s 4s 5s")
    try:
        ep = srv.grpc
        sent, fifo, delayed, got, again, tagged, later, fifo_got = run_script(
            py, tmp_path, ("produce", ep, "Orders", 20, "normal"),
            ("produce", ep, "Fifo", 12, "fifo", 3), ("produce", ep, "Later", 2, "delay:2"),
            ("receive", ep, "Orders", "G_orders", 20, 30, "ack"),
            ("receive", ep, "Orders", "G_orders", 1, 30, "ack", 1),
            ("receive", ep, "Orders", "G_tag1", 10, 30, "ack", 10, "Tag1"),
            ("receive", ep, "Later", "G_later", 2, 30, "ack"),
            ("receive", ep, "Fifo", "G_fifo", 12, 30, "ack"))
        assert len({s["message_id"] for s in sent}) == 20
        assert sorted(g["body"] for g in got) == sorted(s["body"] for s in sent)
        by_id = {g["message_id"]: g for g in got}
        for s in sent:  # the id the producer got is the id the consumer sees
            g = by_id[s["message_id"]]
            assert g["body"] == s["body"]
            assert g["tag"] == f"Tag{s['i'] % 2}" and g["keys"] == [f"key-{s['i']}"]
            assert g["properties"].get("seq") == str(s["i"]) and g["attempt"] == 1
            assert g["topic"] == "Orders"
        assert again == []  # all acked: nothing comes back

        assert sorted(g["body"] for g in tagged) == sorted(s["body"] for s in sent
                                                           if s["i"] % 2 == 1)

        assert {g["message_id"] for g in later} == {d["message_id"] for d in delayed}
        for g in later:  # delivered no earlier than asked (at least 2 s after sending)
            d = next(d for d in delayed if d["message_id"] == g["message_id"])
            assert g["received_ms"] >= d["deliver_ms"] - 50 >= d["sent_ms"] + 2000 - 50

        # FIFO: a message group stays on one queue, in send order (read with a 4.x client)
        pulled = _pull_all(srv.namesrv, "Fifo", 4)
        assert len(pulled) == 12
        queue_of: dict[str, set] = {}
        for m in pulled:
            queue_of.setdefault(m.properties["__SHARDINGKEY"], set()).add(m.queue_id)
        assert all(len(q) == 1 for q in queue_of.values()), queue_of
        for grp in ("group-0", "group-1", "group-2"):
            seq = [m for m in sorted(pulled, key=lambda m: (m.queue_id, m.queue_offset))
                   if m.properties["__SHARDINGKEY"] == grp]
            assert [m.body.decode() for m in seq] == [f["body"] for f in fifo
                                                      if f["group"] == grp]
        assert {g["group"] for g in fifo_got} == {"group-0", "group-1", "group-2"}
    finally:
        assert srv.stop() == 0, srv.log()


def test_cross_protocol_round_trip_keeps_the_message_id(tmp_path):
    py = client_python()
    srv = start_grpc_server(str(tmp_path / "store"), {"Cross": 2})
    try:
        sent5 = run_client(py, tmp_path, "produce", srv.grpc, "Cross", "5", "normal")
        p = RemotingProducer("PG_cross", srv.namesrv)
        try:
            sent4 = [p.send("Cross", f"remoting-{i}".encode(), tags="Tag0", keys=[f"r{i}"])
                     for i in range(5)]
        finally:
            p.shutdown()
        # 4.x pull sees the 5.x messages with their UNIQ_KEY = the 5.x message id
        pulled = _pull_all(srv.namesrv, "Cross", 2)
        ids4 = {m.uniq_key for m in pulled}
        assert {s["message_id"] for s in sent5} <= ids4
        # 5.x receive sees the 4.x messages with the id the 4.x producer got
        got = run_client(py, tmp_path, "receive", srv.grpc, "Cross", "G_cross", "10", "30",
                         "ack")
        by_body = {g["body"]: g for g in got}
        assert set(by_body) == {f"normal-body-{i}" for i in range(5)} | \
            {f"remoting-{i}" for i in range(5)}
        for i, r in enumerate(sent4):
            g = by_body[f"remoting-{i}"]
            assert g["message_id"] == r.msg_id, (g, r)
            assert g["keys"] == [f"r{i}"] and g["tag"] == "Tag0"
        # a topic that does not exist: no route (TOPIC_NOT_FOUND), so the client refuses to send
        bad = run_client(py, tmp_path, "bad", srv.grpc, "NoSuchTopic")
        assert "NoSuchTopic route" in bad["unknown_topic"], bad
    finally:
        assert srv.stop() == 0, srv.log()


def test_invisible_time_expiry_redelivers_then_dead_letters(tmp_path):
    py = client_python()
    conf = write_conf(tmp_path / "broker.conf", minInvisibleTimeMillsForRecv=1000)
    store = str(tmp_path / "store")
    make_groups(store, G_flaky={"retry_max_times": 1})  # mqadmin updateSubGroup -g G_flaky -r 1
    srv = start_grpc_server(store, {"Flaky": 1}, "--config", conf)
    try:
        ep = srv.grpc
        sent, first, second, third = run_script(
            py, tmp_path, ("produce", ep, "Flaky", 1, "normal"),
            ("receive", ep, "Flaky", "G_flaky", 1, 1, "noack"),
            ("receive", ep, "Flaky", "G_flaky", 1, 1, "noack", 20),
            ("receive", ep, "Flaky", "G_flaky", 1, 1, "noack", 1))
        mid = sent[0]["message_id"]
        assert [(g["message_id"], g["attempt"]) for g in first] == [(mid, 1)]
        # not acked: after 1 s it comes back (through %RETRY%G_flaky_Flaky), attempt 2, same id
        assert [(g["message_id"], g["attempt"], g["topic"]) for g in second] == \
            [(mid, 2, "Flaky")]
        # max attempts = retryMaxTimes + 1 = 2 used up: the next expiry dead-letters it
        assert third == []
        c = PullConsumer("CG_probe", srv.namesrv)
        try:
            deadline = time.monotonic() + 20
            while c.max_offset("%DLQ%G_flaky", 0) < 1:
                assert time.monotonic() < deadline, "nothing reached %DLQ%G_flaky"
                time.sleep(0.2)
        finally:
            c.shutdown()
    finally:
        assert srv.stop() == 0, srv.log()
    with MessageStore(_small(store)) as s:
        dlq = s.get_message("check", "%DLQ%G_flaky", 0, 0, 32).messages
        retry = s.get_message("check", "%RETRY%G_flaky_Flaky", 0, 0, 32).messages
    assert [m.uniq_key for m in dlq] == [mid]  # once, the same id
    assert dlq[0].body.decode() == sent[0]["body"]
    assert dlq[0].properties.get("DLQ_ORIGIN_TOPIC") == "Flaky"
    assert [(m.uniq_key, m.reconsume_times) for m in retry] == [(mid, 1)]


def test_pop_state_survives_a_restart(tmp_path):
    """Received-but-unacked comes back after a restart; acked stays acked."""
    py = client_python()
    conf = write_conf(tmp_path / "broker.conf", minInvisibleTimeMillsForRecv=1000)
    store = str(tmp_path / "store")
    srv = start_grpc_server(store, {"Durable": 1}, "--config", conf)
    try:
        ep = srv.grpc
        sent, acked, rest = run_script(
            py, tmp_path, ("produce", ep, "Durable", 4, "normal"),
            ("receive", ep, "Durable", "G_dur", 2, 30, "ack", 1, "*", 2),
            ("receive", ep, "Durable", "G_dur", 2, 3, "noack", 3))
        assert len(acked) == 2  # the first batch, acked
        assert len(acked) + len(rest) == 4
    finally:
        assert srv.stop() == 0, srv.log()
    srv = start_grpc_server(store, {}, "--config", conf)
    try:
        back = run_client(py, tmp_path, "receive", srv.grpc, "Durable", "G_dur", "2", "30",
                          "ack", "20")
        assert sorted(g["message_id"] for g in back) == sorted(g["message_id"] for g in rest)
        assert all(g["attempt"] == 2 for g in back)
        assert not {g["message_id"] for g in back} & {g["message_id"] for g in acked}
        assert {g["message_id"] for g in acked} | {g["message_id"] for g in back} == \
            {s["message_id"] for s in sent}
    finally:
        assert srv.stop() == 0, srv.log()
    with MessageStore(_small(store)) as s:  # the revive log is an ordinary topic
        assert s.get_max_offset_in_queue("rmq_sys_REVIVE_LOG_DefaultCluster", 0) > 0


def test_transactions_commit_rollback_and_the_servers_check(tmp_path):
    py = client_python()
    conf = write_conf(tmp_path / "broker.conf", transactionTimeOut=3000,
                      transactionCheckInterval=500)
    srv = start_grpc_server(str(tmp_path / "store"), {"TxTopic": 2}, "--config", conf)
    try:
        out, got = run_script(py, tmp_path, ("txn", srv.grpc, "TxTopic", 20),
                              ("receive", srv.grpc, "TxTopic", "G_tx", 2, 30, "ack", 5))
        ids = out["ids"]
        assert out["asked"] == [ids["orphan"]]  # only the undecided one was checked
        # committed by the producer and committed through the check; never the rolled back one
        assert sorted(g["message_id"] for g in got) == sorted([ids["commit"], ids["orphan"]])
        assert sorted(g["body"] for g in got) == ["tx-commit", "tx-orphan"]
    finally:
        assert srv.stop() == 0, srv.log()


def test_push_consumer_retries_and_a_fifo_push_consumer_dead_letters(tmp_path):
    """The 5.x PushConsumer: a failure comes back later (ChangeInvisibleDuration by the client's
    backoff); in a FIFO group a message that keeps failing is forwarded to the DLQ by the client
    (ForwardMessageToDeadLetterQueue) and the rest of the queue goes on in order."""
    py = client_python()
    store = str(tmp_path / "store")
    make_groups(store, G_fifo_push={"consume_message_orderly": True, "retry_max_times": 1})
    srv = start_grpc_server(store, {"PushT": 2, "FifoPushT": 1}, "--message-delay-level",
                            "1s 1s 1s 1s 1s")
    try:
        ep = srv.grpc
        _, seen, fifo, seen_fifo = run_script(
            py, tmp_path, ("produce", ep, "PushT", 4, "normal"),
            ("push", ep, "PushT", "G_push", 4, "normal-body-2", 40),
            ("produce", ep, "FifoPushT", 4, "fifo", 1),
            ("push", ep, "FifoPushT", "G_fifo_push", 3, "always:fifo-body-1", 40))
        ok = {s["body"] for s in seen if not s["failed"]}
        assert ok == {f"normal-body-{i}" for i in range(4)}
        retried = [s for s in seen if s["body"] == "normal-body-2"]
        assert [(s["attempt"], s["failed"]) for s in retried] == [(1, True), (2, False)]

        assert [s["body"] for s in seen_fifo if not s["failed"]] == \
            ["fifo-body-0", "fifo-body-2", "fifo-body-3"]  # in order, body-1 given up
    finally:
        assert srv.stop() == 0, srv.log()
    with MessageStore(_small(store)) as s:
        dlq = s.get_message("check", "%DLQ%G_fifo_push", 0, 0, 32).messages
    assert [m.uniq_key for m in dlq] == [fifo[1]["message_id"]]


def test_cpp_4x_client_reads_what_the_5x_client_sent(tmp_path):
    """Apache's C++ 4.x client (PyPI rocketmq==0.4.4) pulls gRPC-sent messages: same id."""
    from ..broker.test_interop_cpp_client import _interop_python
    from ..broker.test_interop_cpp_client import _run as run_cpp

    py5, py4 = client_python(), _interop_python()
    srv = start_grpc_server(str(tmp_path / "store"), {"ToCpp": 2})
    try:
        sent = run_client(py5, tmp_path, "produce", srv.grpc, "ToCpp", "6", "normal")
        c = PullConsumer("CG_wait", srv.namesrv)
        try:
            deadline = time.monotonic() + 10  # until the reput has dispatched all six
            while sum(c.max_offset("ToCpp", q) for q in range(2)) < 6:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            c.shutdown()
        pulled = run_cpp(py4, tmp_path, "pull", srv.namesrv, "ToCpp", "CG_cpp")
        assert {(m["id"], m["body"]) for m in pulled} == \
            {(s["message_id"], s["body"]) for s in sent}
        assert all(m["tags"] == f"Tag{int(m['body'].rsplit('-', 1)[1]) % 2}" for m in pulled)
    finally:
        assert srv.stop() == 0, srv.log()
