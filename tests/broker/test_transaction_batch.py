"""rocketstore's batched transactions (``transactionBatchEnable``) against ``rocketstore serve``:
a SEND_BATCH_MESSAGE of half messages and a batched END_TRANSACTION. Every test counts what a
consumer sees on the real topic, as test_transaction.py does."""
from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from rocketstore.broker.services.transaction import HALF_TOPIC
from rocketstore.client import AsyncAdminClient, AsyncProducer, LocalTransactionState
from rocketstore.client.transaction import (AsyncTransactionProducer, end_transactions_at,
                                            send_half_batch, transaction_batch_supported)
from rocketstore.errors import BrokerError
from rocketstore.format.message import (TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK,
                                        TRANSACTION_PREPARED_TYPE, Message)
from rocketstore.remoting.codes import ResponseCode

from .conftest import start_server
from .test_transaction import bodies, delivered, txn_conf, wait_for

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE


def _server(tmp_path: Path, *lines: str):
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join(lines) + "\n")
    return start_server(str(tmp_path / "store"), "--config", str(conf))


@pytest.fixture
def quiet_server(tmp_path):
    """No check for a minute: what is visible is what END_TRANSACTION made visible."""
    srv = _server(tmp_path, "transactionTimeOut=60000", "transactionCheckInterval=60000")
    yield srv
    assert srv.stop() == 0, srv.log()


def _msgs(prefix: str, n: int) -> list[Message]:
    return [Message(topic="TxnBatch", body=f"{prefix}{i}".encode(), keys=[f"k{i}"])
            for i in range(n)]


async def _producer(namesrv: str, group: str = "PG_batch"):
    admin = AsyncAdminClient(namesrv)
    try:
        await admin.create_topic("TxnBatch", 4, 4)
    finally:
        await admin.close()
    p = await AsyncProducer(group, namesrv, retries=0).start()
    mq = next(q for q in await p.queues("TxnBatch") if q.queue_id == 1)
    return p, mq, await p.instance.broker_addr(mq)


async def checked_producer(namesrv: str, check):
    """A started transaction producer of PG_batch whose checks ``check`` answers, known to the
    broker of TxnBatch's queue 1 (which it returns beside)."""
    tp = await AsyncTransactionProducer("PG_batch", namesrv, check_listener=check,
                                        heartbeat_interval_s=1.0).start()
    p, mq, addr = await _producer(namesrv)
    await p.shutdown()
    await tp._heartbeat_to(addr)
    return tp, mq


def test_half_batch_invisible_until_commit_rollback_drops_each(quiet_server):
    srv = quiet_server

    async def go():
        p, mq, addr = await _producer(srv.namesrv)
        try:
            assert await transaction_batch_supported(p.instance, addr)
            a = await send_half_batch(p, "TxnBatch", _msgs("a", 5), mq)
            b = await send_half_batch(p, "TxnBatch", _msgs("b", 3), mq)
            assert [h.queue_offset for h in a + b] == list(range(8))  # each its own half
            assert len({h.commitlog_offset for h in a + b}) == 8
            assert delivered(srv.namesrv, "TxnBatch") == []  # undecided: invisible
            await end_transactions_at(p.instance, addr, "PG_batch", a, commit=True)
            await end_transactions_at(p.instance, addr, "PG_batch", b, commit=False)
            await end_transactions_at(p.instance, addr, "PG_batch", a, commit=True)  # again
            with pytest.raises(BrokerError) as ei:  # a rollback is never overturned
                await end_transactions_at(p.instance, addr, "PG_batch", b[:1], commit=True)
            assert "1 of 1 failed" in str(ei.value) and "rolled back" in str(ei.value)
            with pytest.raises(BrokerError):  # a wrong group ends nothing
                await end_transactions_at(p.instance, addr, "PG_other", a, commit=False)
            return a
        finally:
            await p.shutdown()

    a = asyncio.run(go())
    got = wait_for(lambda: (lambda d: d if len(d) >= 5 else None)(
        delivered(srv.namesrv, "TxnBatch")), what="the committed batch")
    time.sleep(0.5)
    got = delivered(srv.namesrv, "TxnBatch")
    assert bodies(got) == [f"a{i}".encode() for i in range(5)]
    by_key = {m.uniq_key: m for m in got}
    assert set(by_key) == {h.msg_id for h in a}
    for h in a:
        m = by_key[h.msg_id]
        assert m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
        assert m.prepared_transaction_offset == h.commitlog_offset
        assert m.queue_id == 1 and m.keys == [f"k{int(m.body[1:])}"]
        assert m.properties["PGROUP"] == "PG_batch"
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(m.properties)
    assert len(delivered(srv.namesrv, HALF_TOPIC, [0])) == 8


def test_check_back_answers_each_half_of_a_batch(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--config", txn_conf(tmp_path))
    checked: list[bytes] = []
    lock = threading.Lock()

    def check(msg):
        with lock:
            checked.append(msg.body)
        assert msg.topic == "TxnBatch" and msg.queue_id == 1
        return COMMIT if int(msg.body[1:]) % 2 == 0 else ROLLBACK

    async def go():
        tp, mq = await checked_producer(srv.namesrv, check)
        try:
            await send_half_batch(tp.producer, "TxnBatch", _msgs("c", 6), mq)
            await asyncio.to_thread(wait_for, lambda: (lambda d: d if len(d) >= 3 else None)(
                delivered(srv.namesrv, "TxnBatch")), 45.0, "the checked halves")
            await asyncio.sleep(2.0)  # more check passes: nothing else may appear
        finally:
            await tp.shutdown()

    try:
        asyncio.run(go())
        assert bodies(delivered(srv.namesrv, "TxnBatch")) == [b"c0", b"c2", b"c4"]
        assert {f"c{i}".encode() for i in range(6)} <= set(checked)
    finally:
        assert srv.stop() == 0, srv.log()


def test_mixed_batch_refused_as_rocketmq_refuses_a_prepared_batch(quiet_server):
    srv = quiet_server

    async def go():
        p, mq, addr = await _producer(srv.namesrv)
        try:
            mixed = _msgs("m", 3)
            mixed[1] = Message(topic="TxnBatch", body=b"m1",
                               properties={"TRAN_MSG": "true", "PGROUP": "PG_batch"})
            for sys_flag, extra in ((TRANSACTION_PREPARED_TYPE, {"TRAN_MSG": "true"}), (0, {})):
                with pytest.raises(BrokerError) as ei:
                    await p.send_batch("TxnBatch", mixed, mq=mq, sys_flag=sys_flag,
                                       batch_properties=extra)
                assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL
        finally:
            await p.shutdown()

    asyncio.run(go())
    assert delivered(srv.namesrv, "TxnBatch") == []
    assert delivered(srv.namesrv, HALF_TOPIC, [0]) == []


def switched_off(tmp_path: Path, line: str, body) -> None:
    """``await body(producer, mq, broker address)`` against a broker whose broker.conf says
    ``line``; afterwards its half topic is empty."""
    srv = _server(tmp_path, line)
    try:
        async def go():
            p, mq, addr = await _producer(srv.namesrv)
            try:
                await body(p, mq, addr)
            finally:
                await p.shutdown()
        asyncio.run(go())
        assert delivered(srv.namesrv, HALF_TOPIC, [0]) == []
    finally:
        assert srv.stop() == 0, srv.log()


def test_switched_off_the_broker_refuses_as_rocketmq_and_says_so(tmp_path):
    async def body(p, mq, addr):
        assert not await transaction_batch_supported(p.instance, addr)
        with pytest.raises(BrokerError) as ei:
            await send_half_batch(p, "TxnBatch", _msgs("x", 2), mq)
        assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL

    switched_off(tmp_path, "transactionBatchEnable=false", body)
