"""Transactional messages end to end: our TransactionProducer against ``rocketstore serve``.

Every test counts what a consumer sees on the real topic: each committed message exactly once,
no rolled-back or undecided one, whatever happens to producers and the broker in between.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocketstore.broker.services.transaction import (CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC,
                                                     PROPERTY_TRANSACTION_CHECK_TIMES)
from rocketstore.client import LocalTransactionState, PullConsumer, TransactionProducer
from rocketstore.errors import BrokerError
from rocketstore.format.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK
from rocketstore.remoting.codes import ResponseCode

from .conftest import start_server
from .test_client_broker import drain

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
DRIVER = Path(__file__).with_name("txn_driver.py")


def txn_conf(tmp_path: Path, check_max: int = 15) -> str:
    """A broker.conf with RocketMQ's transaction keys: check every 500 ms, after 1 s."""
    p = tmp_path / "broker.conf"
    p.write_text("transactionTimeOut=1000\ntransactionCheckInterval=500\n"
                 f"transactionCheckMax={check_max}\n")
    return str(p)


def delivered(namesrv: str, topic: str, queues=range(4)) -> list:
    c = PullConsumer("CG_txn_check", namesrv)
    try:
        return [m for q in drain(c, topic, queues).values() for m in q]
    except BrokerError as exc:  # a topic nobody created yet has delivered nothing
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        return []
    finally:
        c.shutdown()


def wait_for(pred, timeout: float = 45.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def bodies(msgs) -> list[bytes]:
    return sorted(m.body for m in msgs)


@pytest.fixture
def txn_server(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--config", txn_conf(tmp_path))
    yield srv
    assert srv.stop() == 0, srv.log()


def test_commit_rollback_and_unknown_then_check(txn_server):
    srv = txn_server
    checked: list[str] = []
    lock = threading.Lock()

    def check(msg):
        with lock:
            checked.append(msg.body.decode())
        assert msg.topic == "TxnTopic"  # the check carries the real topic and queue
        return ROLLBACK if msg.body == b"rollback" else COMMIT

    with TransactionProducer("PG_txn", srv.namesrv, check_listener=check) as p:
        r_c = p.send_message_in_transaction("TxnTopic", b"commit", lambda m, a: COMMIT,
                                            tags="TagC", keys=["kc"])
        r_r = p.send_message_in_transaction("TxnTopic", b"rollback", lambda m, a: ROLLBACK)
        seen = {}

        def local(msg, arg):
            seen["arg"], seen["txid"] = arg, msg.properties["UNIQ_KEY"]
            return UNKNOW
        r_u = p.send_message_in_transaction("TxnTopic", b"unknown", local, arg=42,
                                            properties={"biz": "x"})
        assert [r.local_transaction_state for r in (r_c, r_r, r_u)] == [COMMIT, ROLLBACK, UNKNOW]
        assert seen == {"arg": 42, "txid": r_u.transaction_id}
        assert all(r.status == "SEND_OK" and r.end_transaction_error is None
                   for r in (r_c, r_r, r_u))
        got = wait_for(lambda: (lambda d: d if len(d) >= 2 else None)(
            delivered(srv.namesrv, "TxnTopic")), what="the checked message")
        time.sleep(2.0)  # two more check passes: nothing else may appear
        got = delivered(srv.namesrv, "TxnTopic")
    assert bodies(got) == [b"commit", b"unknown"]
    assert "unknown" in checked
    halves = delivered(srv.namesrv, HALF_TOPIC, [0])
    half_at = {h.commitlog_offset: h for h in halves}
    by = {m.body: m for m in got}
    for m, r in ((by[b"commit"], r_c), (by[b"unknown"], r_u)):
        assert m.uniq_key == r.transaction_id
        assert m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
        assert half_at[m.prepared_transaction_offset].uniq_key == r.transaction_id
        assert m.queue_id == r.message_queue.queue_id
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(m.properties)
        assert m.properties["PGROUP"] == "PG_txn"
    assert by[b"commit"].tags == "TagC" and by[b"commit"].keys == ["kc"]
    assert by[b"unknown"].properties["biz"] == "x"
    # the half and op records sit on the system topics, one op record per decided half record
    ops = delivered(srv.namesrv, OP_TOPIC, [0])
    assert {m.properties["REAL_TOPIC"] for m in halves} == {"TxnTopic"}
    assert all(m.tags == "d" for m in ops)
    decided = [int(m.body) for m in ops]
    assert len(set(decided)) == len(decided) == 3  # one op record per transaction
    # each transaction has one decided half record; the others were copies the check replaced
    assert sorted(half_by_offset(halves)[o].uniq_key for o in decided) == \
        sorted(r.transaction_id for r in (r_c, r_r, r_u))
    assert {h.uniq_key for h in halves} == {r.transaction_id for r in (r_c, r_r, r_u)}


def half_by_offset(halves):
    return {h.queue_offset: h for h in halves}


def test_repeated_and_conflicting_end_transaction_deliver_once(txn_server):
    srv = txn_server
    with TransactionProducer("PG_dup", srv.namesrv, check_listener=lambda m: UNKNOW) as p:
        r = p.send_message_in_transaction("TxnDup", b"once", lambda m, a: COMMIT)
        impl = p._impl
        # the same decision again, then the opposite one: neither may add or remove a delivery
        assert p._lt.run(impl.end_transaction(r, COMMIT)) is None
        err = p._lt.run(impl.end_transaction(r, ROLLBACK))
        assert err is not None and "already committed" in err
        r2 = p.send_message_in_transaction("TxnDup", b"never", lambda m, a: ROLLBACK)
        err2 = p._lt.run(impl.end_transaction(r2, COMMIT))
        assert err2 is not None and "rolled back" in err2
        wait_for(lambda: delivered(srv.namesrv, "TxnDup"), what="the committed message")
        time.sleep(1.5)
        assert bodies(delivered(srv.namesrv, "TxnDup")) == [b"once"]


def test_discarded_after_check_max(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--config", txn_conf(tmp_path, check_max=2))
    try:
        asked = []
        with TransactionProducer("PG_max", srv.namesrv,
                                 check_listener=lambda m: asked.append(m.body) or UNKNOW) as p:
            p.send_message_in_transaction("TxnMax", b"stuck", lambda m, a: UNKNOW)
            got = wait_for(lambda: delivered(srv.namesrv, CHECK_MAX_TIME_TOPIC, [0]),
                           what="the discarded half message")
            wait_for(lambda: len(asked) >= 2, what="the second check")
            time.sleep(2.0)
            assert len(asked) == 2  # transactionCheckMax checks, then no more
        assert [m.body for m in got] == [b"stuck"]
        assert got[0].properties["REAL_TOPIC"] == "TxnMax"
        assert got[0].properties[PROPERTY_TRANSACTION_CHECK_TIMES] == "2"
        assert delivered(srv.namesrv, "TxnMax") == []
    finally:
        assert srv.stop() == 0, srv.log()


def _driver(namesrv: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(DRIVER), namesrv, *args],
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.crash
@pytest.mark.timeout(180)
def test_producer_killed_mid_transaction_new_producer_answers_check(txn_server):
    srv = txn_server
    child = _driver(srv.namesrv, "PG_killed", "TxnKill", "hang", "3")
    try:
        txids = [child.stdout.readline().split()[1] for _ in range(3)]  # "LOCAL <txid>"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert len(set(txids)) == 3
    decide = {txids[0]: COMMIT, txids[1]: ROLLBACK, txids[2]: COMMIT}
    asked = []
    with TransactionProducer("PG_killed", srv.namesrv,
                             check_listener=lambda m: asked.append(m.uniq_key) or
                             decide[m.uniq_key]):
        got = wait_for(lambda: (lambda d: d if len(d) >= 2 else None)(
            delivered(srv.namesrv, "TxnKill")), what="both committed messages")
        time.sleep(1.5)
        got = delivered(srv.namesrv, "TxnKill")
    assert sorted(m.uniq_key for m in got) == sorted([txids[0], txids[2]])
    assert set(asked) == set(txids)


@pytest.mark.crash
@pytest.mark.timeout(240)
def test_broker_sigkill_between_half_and_commit(tmp_path):
    """Half messages stored, broker SIGKILLed before any decision reached it: after a restart on
    the same store every one is still there, is checked, and is delivered exactly once."""
    store = str(tmp_path / "store")
    conf = txn_conf(tmp_path)
    srv = start_server(store, "--config", conf)
    child = _driver(srv.namesrv, "PG_crash", "TxnCrash", "hang", "4")
    try:
        txids = [child.stdout.readline().split()[1] for _ in range(4)]
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert os.path.exists(os.path.join(store, "abort"))  # the crash path will run
    srv = start_server(store, "--config", conf)
    try:
        decide = {t: (COMMIT if i % 2 == 0 else ROLLBACK) for i, t in enumerate(txids)}
        with TransactionProducer("PG_crash", srv.namesrv,
                                 check_listener=lambda m: decide[m.uniq_key]):
            want = sorted(t for t, s in decide.items() if s is COMMIT)
            wait_for(lambda: len(delivered(srv.namesrv, "TxnCrash")) >= len(want),
                     what="the committed messages after the restart")
            time.sleep(1.5)
        got = delivered(srv.namesrv, "TxnCrash")
        assert sorted(m.uniq_key for m in got) == want
    finally:
        assert srv.stop() == 0, srv.log()
    # and a clean restart asks nobody again and delivers nothing twice
    srv = start_server(store, "--config", conf)
    try:
        asked = []
        with TransactionProducer("PG_crash", srv.namesrv,
                                 check_listener=lambda m: asked.append(m) or COMMIT):
            time.sleep(2.5)
        assert asked == []
        assert sorted(m.uniq_key for m in delivered(srv.namesrv, "TxnCrash")) == want
    finally:
        assert srv.stop() == 0, srv.log()


@pytest.mark.interop
@pytest.mark.timeout(400)
def test_java_transaction_mq_producer(tmp_path):
    """RocketMQ 4.9.7's own TransactionMQProducer: commit, rollback, unknown → check → commit."""
    from tests import referee
    home = referee.home(referee.V4)
    txn_server = start_server(str(tmp_path / "store"), "--config", txn_conf(tmp_path))
    try:
        _java_transactions(home, txn_server, tmp_path)
    finally:
        assert txn_server.stop() == 0, txn_server.log()


def _java_transactions(home: str, txn_server, tmp_path: Path) -> None:
    classes = tmp_path / "classes"
    classes.mkdir()
    src = Path(__file__).with_name("java") / "TxnProducer.java"
    subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes),
                    str(src)], check=True, capture_output=True)
    env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="256m", HOME=str(tmp_path))
    r = subprocess.run(["timeout", "240", os.path.join(home, "java-run"), "TxnProducer",
                        txn_server.namesrv, "PG_java", "TxnJava", "3"],
                       capture_output=True, text=True, env=env)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and "DONE" in lines, r.stdout[-3000:] + r.stderr[-3000:]
    sent = {ln.split()[1]: ln.split() for ln in lines if ln.startswith("SENT ")}
    assert len(sent) == 9 and all(v[2] == "SEND_OK" for v in sent.values())
    checks = [ln.split() for ln in lines if ln.startswith("CHECK ")]
    assert {c[1] for c in checks} >= {"unknown-0", "unknown-1", "unknown-2"}
    assert all(c[2] == "TxnJava" for c in checks)  # the check names the real topic
    want = sorted(f"{k}-{i}".encode() for k in ("commit", "unknown") for i in range(3))
    wait_for(lambda: len(delivered(txn_server.namesrv, "TxnJava")) >= len(want),
             what="the Java producer's committed messages")
    time.sleep(1.5)
    got = delivered(txn_server.namesrv, "TxnJava")
    assert bodies(got) == want
    for m in got:
        assert m.uniq_key == sent[m.body.decode()][3]  # the id the Java producer was given
        kind = m.body.decode().split("-")[0]
        assert m.tags == f"Tag{kind}" and m.keys == [f"key-{m.body.decode()}"]


@pytest.mark.interop
@pytest.mark.timeout(400)
def test_our_transaction_producer_against_java_broker(tmp_path):
    """Our client against RocketMQ 4.9.7's own broker: the broker side is the reference."""
    from tests.cluster.java_rocketmq import (rocketmq_home, start_java_broker,
                                             start_java_namesrv)

    home = rocketmq_home()
    ns = start_java_namesrv(home, str(tmp_path / "ns"))
    broker = None
    try:
        # 4.9.7 checks a half older than transactionTimeOut even when its COMMIT is on the way
        # and stores a second copy when the check is answered COMMIT too (its at-least-once
        # transactions): 10 s keeps a loaded machine's late END_TRANSACTION ahead of the check
        broker = start_java_broker(home, str(tmp_path / "broker"), ns.addr, "broker-j",
                                   extra={"transactionTimeOut": 10000,
                                          "transactionCheckInterval": 1000})
        asked = []
        # the check commits only "unknown": an early "commit" attempt that failed on the route
        # (a loaded machine) may still have left its half, which must not be delivered too
        with TransactionProducer("PG_jb", ns.addr,
                                 check_listener=lambda m: asked.append(m.body) or
                                 (COMMIT if m.body == b"unknown" else ROLLBACK)) as p:
            res = wait_for(lambda: _try_send(p), timeout=60, what="the topic's route")
            p.send_message_in_transaction("TxnJB", b"rollback", lambda m, a: ROLLBACK)
            p.send_message_in_transaction("TxnJB", b"unknown", lambda m, a: UNKNOW)
            assert res.status == "SEND_OK"
            got = wait_for(lambda: (lambda d: d if len(d) >= 2 else None)(
                delivered(ns.addr, "TxnJB")), timeout=60,
                what="the checked message on the Java broker")
        assert bodies(got) == [b"commit", b"unknown"]
        assert b"unknown" in asked
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()


def _try_send(p):
    try:
        return p.send_message_in_transaction("TxnJB", b"commit", lambda m, a: COMMIT)
    except Exception:  # the Java broker registers its topics at the name server every 30 s
        return None


def test_async_producer_with_coroutine_callbacks(txn_server):
    import asyncio

    from rocketstore.client import AsyncTransactionProducer

    async def main():
        checked = []

        async def check(msg):
            checked.append(msg.body)
            return COMMIT

        async def local(msg, arg):
            await asyncio.sleep(0)
            return UNKNOW if arg == "later" else COMMIT

        p = AsyncTransactionProducer("PG_async", txn_server.namesrv, check_listener=check)
        await p.start()
        try:
            r1 = await p.send_message_in_transaction("TxnAsync", b"now", local, arg="now")
            r2 = await p.send_message_in_transaction("TxnAsync", b"later", local, arg="later")
            assert (r1.local_transaction_state, r2.local_transaction_state) == (COMMIT, UNKNOW)
            for _ in range(450):
                if checked:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)  # the END_TRANSACTION after the check
        finally:
            await p.shutdown()
        return checked

    checked = asyncio.run(main())
    assert checked[:1] == [b"later"]
    got = wait_for(lambda: (lambda d: d if len(d) >= 2 else None)(
        delivered(txn_server.namesrv, "TxnAsync")), what="both messages")
    assert bodies(got) == [b"later", b"now"]
