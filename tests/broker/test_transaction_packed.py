"""Packed half messages (``transactionPackEnable``, rocketstore's own): one half message whose
body is a batch, committed as that batch's entries. Against ``rocketstore serve`` (a consumer
counts what the real topic shows) and, for the crash window in the middle of a commit's
append, on a real store reopened as a restarted broker finds it."""
from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from rocketstore import MessageStore
from rocketstore.broker.services.transaction import (HALF_TOPIC, EndTransactionRequest,
                                                     TransactionalMessageService,
                                                     TransactionConfig, packed_copies,
                                                     packed_entries)
from rocketstore.broker.state.offsets import ConsumerOffsetManager
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.client import LocalTransactionState
from rocketstore.client.producer import batch_body
from rocketstore.client.transaction import (HalfRef, end_transaction_at,
                                            end_transactions_at, send_packed_half,
                                            transaction_batch_supported,
                                            transaction_pack_supported)
from rocketstore.errors import BrokerError
from rocketstore.format.message import (TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK,
                                        TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE,
                                        Message, create_uniq_keys)

from ..conftest import small_config
from .conftest import start_server
from .test_transaction import delivered, txn_conf, wait_for
from .test_transaction_batch import (_producer, checked_producer, quiet_server,  # noqa: F401
                                     switched_off)

COMMIT = LocalTransactionState.COMMIT_MESSAGE


def _rows(prefix: str, n: int) -> tuple[list[Message], list[str]]:
    """``n`` rows with UNIQ_KEYs chosen here: what the real topic must show after a commit."""
    keys = create_uniq_keys(n)
    return [Message(topic="TxnBatch", body=f"{prefix}{i}".encode(), keys=[f"k{i}"], tags="tg",
                    properties={"UNIQ_KEY": keys[i], "color": f"c{i}"})
            for i in range(n)], keys


def _end(p, addr: str, ref: HalfRef, commit: bool):
    return end_transaction_at(p.instance, addr, {
        "producerGroup": "PG_batch", "tranStateTableOffset": ref.queue_offset,
        "commitLogOffset": ref.commitlog_offset,
        "commitOrRollback": TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
        "fromTransactionCheck": False, "msgId": ref.msg_id, "transactionId": ref.msg_id})


def test_packed_half_is_one_record_and_commits_every_entry_once(quiet_server):
    srv = quiet_server
    a_rows, a_keys = _rows("a", 5)
    b_rows, _ = _rows("b", 3)
    c_rows, c_keys = _rows("c", 4)

    async def go():
        p, mq, addr = await _producer(srv.namesrv)
        try:
            assert await transaction_pack_supported(p.instance, addr)
            a = await send_packed_half(p, "TxnBatch", a_rows, mq, {"RS_SPARK_TXN": "s/b/t"})
            b = await send_packed_half(p, "TxnBatch", b_rows, mq)
            c = await send_packed_half(p, "TxnBatch", c_rows, mq)
            assert [h.queue_offset for h in (a, b, c)] == [0, 1, 2]  # one half record each
            assert (a.msg_id, c.msg_id) == (a_keys[-1], c_keys[-1])  # the last row's key
            assert delivered(srv.namesrv, "TxnBatch") == []  # undecided: invisible
            await end_transactions_at(p.instance, addr, "PG_batch", [a], commit=True)
            await end_transactions_at(p.instance, addr, "PG_batch", [b], commit=False)
            await _end(p, addr, c, commit=True)  # the one-by-one END_TRANSACTION too
            await end_transactions_at(p.instance, addr, "PG_batch", [a, c], commit=True)
            await _end(p, addr, a, commit=True)  # again, both ways: nothing more
            with pytest.raises(BrokerError) as ei:  # a rollback is never overturned
                await end_transactions_at(p.instance, addr, "PG_batch", [b], commit=True)
            assert "rolled back" in str(ei.value)
            with pytest.raises(BrokerError):  # nor a commit
                await _end(p, addr, c, commit=False)
            return a, c
        finally:
            await p.shutdown()

    a, c = asyncio.run(go())
    got = wait_for(lambda: (lambda d: d if len(d) >= 9 else None)(
        delivered(srv.namesrv, "TxnBatch")), what="the committed rows")
    time.sleep(0.5)
    got = delivered(srv.namesrv, "TxnBatch")
    want = {k: (m, a) for k, m in zip(a_keys, a_rows)} | {k: (m, c) for k, m in zip(c_keys, c_rows)}
    assert sorted(m.uniq_key for m in got) == sorted(want)  # each row once, no b row
    for m in got:
        sent, ref = want[m.uniq_key]
        assert m.body == sent.body and m.queue_id == 1
        assert m.keys == sent.keys and m.tags == "tg" and m.properties["color"] == \
            sent.properties["color"]
        assert m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
        assert m.prepared_transaction_offset == ref.commitlog_offset
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "RS_TXN_PACKED", "PGROUP",
                    "RS_SPARK_TXN"} & set(m.properties)
    # in queue order as sent: a's rows, then c's
    assert [m.body for m in sorted(got, key=lambda m: m.queue_offset)] == \
        [m.body for m in a_rows + c_rows]
    assert len(delivered(srv.namesrv, HALF_TOPIC, [0])) == 3


def _raw_half(p, mq, body: bytes, **props: str):
    return p.send("TxnBatch", body, mq=mq, sys_flag=TRANSACTION_PREPARED_TYPE,
                  properties={"TRAN_MSG": "true", "PGROUP": "PG_batch", **props})


def test_malformed_packed_halves_are_refused_at_prepare(quiet_server):
    srv = quiet_server

    async def go():
        p, mq, addr = await _producer(srv.namesrv)
        try:
            rows, keys = _rows("x", 3)
            body, ids = batch_body("TxnBatch", rows)
            assert ids == keys
            cases = {
                "says 4": dict(body=body, RS_TXN_PACKED="4", UNIQ_KEY=keys[-1]),
                "entry count": dict(body=body, RS_TXN_PACKED="three", UNIQ_KEY=keys[-1]),
                "last entry": dict(body=body, RS_TXN_PACKED="3", UNIQ_KEY=keys[0]),
                "does not fit": dict(body=body[:-5], RS_TXN_PACKED="3", UNIQ_KEY=keys[-1]),
                "twice": dict(body=batch_body("TxnBatch", [rows[0], rows[0]])[0],
                              RS_TXN_PACKED="2", UNIQ_KEY=keys[0]),
                "carries DELAY": dict(body=batch_body("TxnBatch", [Message(
                    "TxnBatch", b"d", properties={"DELAY": "3", "UNIQ_KEY": keys[0]})])[0],
                    RS_TXN_PACKED="1", UNIQ_KEY=keys[0]),
                "carries TRAN_MSG": dict(body=batch_body("TxnBatch", rows, {"TRAN_MSG": "true"})[0],
                                         RS_TXN_PACKED="3", UNIQ_KEY=keys[-1]),
            }
            for why, c in cases.items():
                with pytest.raises(BrokerError) as ei:
                    await _raw_half(p, mq, c.pop("body"), **c)
                assert ei.value.code == 13 and why in str(ei.value), (why, str(ei.value))
            assert delivered(srv.namesrv, HALF_TOPIC, [0]) == []  # nothing stored
        finally:
            await p.shutdown()

    asyncio.run(go())


def test_pack_switched_off_is_refused_and_advertised(tmp_path):
    async def body(p, mq, addr):
        assert not await transaction_pack_supported(p.instance, addr)
        assert await transaction_batch_supported(p.instance, addr)
        rows, _ = _rows("y", 2)
        with pytest.raises(BrokerError) as ei:
            await send_packed_half(p, "TxnBatch", rows, mq)
        assert ei.value.code == 13 and "transactionPackEnable" in str(ei.value)

    switched_off(tmp_path, "transactionPackEnable=false", body)


def test_check_back_of_a_packed_half_commits_its_rows_once(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--config", txn_conf(tmp_path))
    checked: list[Message] = []
    lock = threading.Lock()
    rows, keys = _rows("k", 6)

    def check(msg):
        with lock:
            checked.append(msg)
        return COMMIT

    async def go():
        tp, mq = await checked_producer(srv.namesrv, check)
        try:
            ref = await send_packed_half(tp.producer, "TxnBatch", rows, mq)
            await asyncio.to_thread(wait_for, lambda: (lambda d: d if len(d) >= 6 else None)(
                delivered(srv.namesrv, "TxnBatch")), 60, "the checked rows")
            return ref
        finally:
            await tp.shutdown()

    try:
        ref = asyncio.run(go())
        time.sleep(1.0)
        got = delivered(srv.namesrv, "TxnBatch")
        assert sorted(m.uniq_key for m in got) == sorted(keys)
        with lock:
            assert checked and checked[0].topic == "TxnBatch" and checked[0].queue_id == 1
            assert checked[0].uniq_key == ref.msg_id == keys[-1]
            assert [e.body for e in packed_entries(checked[0])] == [m.body for m in rows]
    finally:
        assert srv.stop() == 0, srv.log()


def test_commit_after_a_crash_mid_append_stores_only_the_missing_rows(tmp_path):
    """A broker killed while its commit's append was under way keeps a prefix of the rows
    and no decision. The restarted broker's COMMIT (the driver's again, or a check answer)
    stores the rest: every row once."""
    root = str(tmp_path)
    conf = os.path.join(root, "config")

    def service(store):
        return TransactionalMessageService(store, TopicConfigManager(conf),
                                           ConsumerOffsetManager(conf), store.put_message,
                                           TransactionConfig(file_reserved_time_h=10**6))

    rows, keys = _rows("r", 7)
    body, _ = batch_body("TxnBatch", rows)
    half = Message(topic="TxnBatch", body=body, queue_id=1, sys_flag=TRANSACTION_PREPARED_TYPE,
                   born_timestamp=int(time.time() * 1000),
                   properties={"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": keys[-1],
                               "RS_TXN_PACKED": "7"})
    for stored_before in (0, 3, 7):
        sub = os.path.join(root, f"s{stored_before}")
        conf = os.path.join(sub, "config")
        with MessageStore(small_config(sub)) as store:
            svc = service(store)
            msg, entries = svc.packed_half(half)
            r = store.put_message(msg)
            assert r.status.name == "PUT_OK"
            assert store.wait_dispatched(5)
            stored = store.look_message_by_offset(r.wrote_offset)
            # what the killed commit's append left: the first ``stored_before`` rows
            prefix = packed_copies(stored, entries[:stored_before], r.wrote_offset,
                                   now=int(time.time() * 1000),
                                   host=store.cfg.store_host,
                                   max_body_size=store.cfg.max_message_size)
            if prefix:
                assert all(x.status.name == "PUT_OK" for x in store.append(prefix))
        with MessageStore(small_config(sub)) as store:  # the restarted broker
            svc = service(store)
            req = EndTransactionRequest("PG", r.queue_offset, r.wrote_offset,
                                        TRANSACTION_COMMIT_TYPE, msg_id=keys[-1])
            assert svc.end_transaction(req) == (0, None)
            assert svc.end_transaction(req) == (0, None)  # and again: nothing more
            assert store.wait_dispatched(5)
            got = store.get_message("CG", "TxnBatch", 1, 0, 64).messages or []
            assert [m.uniq_key for m in got] == keys, stored_before
            assert [m.body for m in got] == [m.body for m in rows]


def test_batched_commit_is_answered_once_its_rows_are_visible(quiet_server):
    """A batched COMMIT of packed halves (thousands of rows in one append) is answered once
    the broker dispatched them: a consumer that pulls right after the answer sees every row
    (what a Spark batch write promises when ``save()`` returns)."""
    from rocketstore.client.consumer import AsyncPullConsumer
    srv = quiet_server
    sent: list[list[str]] = []

    async def go():
        p, mq, addr = await _producer(srv.namesrv)
        c = AsyncPullConsumer("CG_visible", srv.namesrv)
        try:
            assert await c.max_offset("TxnBatch", 1) == 0
            refs = []
            for b in range(8):
                rows, keys = _rows(f"v{b}-", 1000)
                refs.append(await send_packed_half(p, "TxnBatch", rows, mq))
                sent.append(keys)
            await end_transactions_at(p.instance, addr, "PG_batch", refs, commit=True)
            return await c.max_offset("TxnBatch", 1)  # at once, on the same loop
        finally:
            await c.shutdown()
            await p.shutdown()

    assert asyncio.run(go()) == 8000
    got = delivered(srv.namesrv, "TxnBatch")
    assert sorted(m.uniq_key for m in got) == sorted(k for keys in sent for k in keys)


def test_driver_ends_packed_halves_a_few_thousand_rows_a_request():
    """The driver's batched ENDs: up to END_BATCH halves a request, and for packed halves up
    to END_ROWS rows (a half larger than that goes alone)."""
    from array import array

    from rocketstore.spark.sink_transactions import END_BATCH, END_ROWS, _chunks
    assert _chunks(array("q", [1] * 1300)) == [(0, END_BATCH), (END_BATCH, END_BATCH),
                                                (2 * END_BATCH, 1300 - 2 * END_BATCH)]
    rows = array("q", [256] * 40 + [END_ROWS + 5, 3, 1])
    chunks = _chunks(rows)
    per = END_ROWS // 256
    assert chunks[:3] == [(0, per), (per, per), (2 * per, 40 - 2 * per)]
    assert chunks[3:] == [(40, 1), (41, 2)]
    assert sum(n for _, n in chunks) == len(rows)
    assert _chunks(array("q")) == []


def test_kept_records_of_a_packed_half_go_with_its_decision(tmp_path, monkeypatch):
    """The committed records encoded when a packed half is stored are kept for its commit
    only: a COMMIT and a ROLLBACK (one by one or batched) both release them, and past
    PACKED_KEPT_MAX rows the oldest go (their commit reads the half record again)."""
    from rocketstore.broker.services import transaction as tx
    root = str(tmp_path)
    conf = os.path.join(root, "config")
    with MessageStore(small_config(root)) as store:
        svc = TransactionalMessageService(store, TopicConfigManager(conf),
                                          ConsumerOffsetManager(conf), store.put_message,
                                          TransactionConfig(file_reserved_time_h=10**6))

        def stored(n: int):
            rows, keys = _rows("m", n)
            body, _ = batch_body("TxnBatch", rows)
            msg, entries = svc.packed_half(Message(
                topic="TxnBatch", body=body, queue_id=1, sys_flag=TRANSACTION_PREPARED_TYPE,
                born_timestamp=int(time.time() * 1000),
                properties={"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": keys[-1],
                            "RS_TXN_PACKED": str(n)}))
            r = store.put_message(msg)
            svc.remember_packed(msg, r, entries)
            return r, keys

        def end(r, keys, state):
            return svc.end_transaction(EndTransactionRequest("PG", r.queue_offset,
                                                             r.wrote_offset, state,
                                                             msg_id=keys[-1]))
        a, b, c = stored(3), stored(4), stored(5)
        assert svc._packed_rows == 12 and list(svc._packed) == [a[0].wrote_offset,
                                                                 b[0].wrote_offset,
                                                                 c[0].wrote_offset]
        assert end(*a, TRANSACTION_COMMIT_TYPE) == (0, None)
        assert end(*b, TRANSACTION_ROLLBACK_TYPE) == (0, None)
        assert svc.end_transactions("PG", [(c[0].queue_offset, c[0].wrote_offset)],
                                    TRANSACTION_ROLLBACK_TYPE) == [(0, None)]
        assert svc._packed_rows == 0 and not svc._packed
        monkeypatch.setattr(tx, "PACKED_KEPT_MAX", 8)
        d, e = stored(5), stored(5)  # d is pushed out by e
        assert list(svc._packed) == [e[0].wrote_offset]
        assert end(*d, TRANSACTION_COMMIT_TYPE) == (0, None)  # read back, encoded again
        assert end(*e, TRANSACTION_COMMIT_TYPE) == (0, None)
        assert store.wait_dispatched(5)
        got = store.get_message("CG", "TxnBatch", 1, 0, 64).messages or []
        assert [m.uniq_key for m in got] == a[1] + d[1] + e[1]
