"""``TransactionalMessageService`` on a real store, with the clock in the test's hand: crash
windows, immunity times and the settled offsets, which are hard to hit through a live broker."""
from __future__ import annotations

import os
import time

import pytest

from rocketstore import Message, MessageStore
from rocketstore.broker.state.offsets import ConsumerOffsetManager
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.broker.services.transaction import (HALF_TOPIC, OP_TOPIC, SYS_GROUP,
                                                     EndTransactionRequest, TransactionConfig,
                                                     TransactionalMessageService,
                                                     committed_message, is_transactional,
                                                     op_message)
from rocketstore.format.message import (TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK,
                                        TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE,
                                        TRANSACTION_ROLLBACK_TYPE, create_uniq_key)

from ..conftest import small_config



def later() -> int:
    """The check's clock: a minute from now, so after every record stored so far."""
    return int(time.time() * 1000) + 60_000


class Env:
    def __init__(self, root: str) -> None:
        self.root = root
        self.born = int(time.time() * 1000) - 600_000  # half messages born ten minutes ago
        self.cfg = small_config(root)
        self.store = MessageStore(self.cfg).__enter__()
        conf = os.path.join(root, "config")
        self.topics = TopicConfigManager(conf)
        self.offsets = ConsumerOffsetManager(conf)
        self.svc = TransactionalMessageService(self.store, self.topics, self.offsets,
                                               self.store.put_message,
                                               TransactionConfig(timeout_ms=1000, check_max=3,
                                                                 file_reserved_time_h=10**6))

    def half(self, body: bytes, topic: str = "Real", qid: int = 1, born: int | None = None,
             **props: str):
        msg = Message(topic=topic, body=body, queue_id=qid,
                      born_timestamp=self.born if born is None else born,
                      sys_flag=TRANSACTION_PREPARED_TYPE,
                      properties={"TRAN_MSG": "true", "PGROUP": "PG",
                                  "UNIQ_KEY": create_uniq_key(), **props})
        assert is_transactional(msg)
        r = self.store.put_message(self.svc.half_message(msg))
        assert r.status.name == "PUT_OK"
        assert self.store.wait_dispatched(5)
        return r, self.store.look_message_by_offset(r.wrote_offset)

    def check(self, clock):
        """One check pass, once the reput has dispatched what the last one wrote."""
        assert self.store.wait_dispatched(5)
        return self.svc.check(clock)

    def end(self, r, half, state: int):
        return self.svc.end_transaction(EndTransactionRequest(
            "PG", r.queue_offset, r.wrote_offset, state, msg_id=half.uniq_key))

    def real(self, topic: str = "Real", qid: int = 1) -> list:
        assert self.store.wait_dispatched(5)
        return self.store.get_message("CG", topic, qid, 0, 64).messages or []

    def reopen(self) -> None:
        self.offsets.persist(True)
        self.store.__exit__(None, None, None)
        self.__init__(self.root)

    def close(self) -> None:
        self.store.__exit__(None, None, None)


@pytest.fixture
def env(tmp_path):
    e = Env(str(tmp_path / "store"))
    yield e
    e.close()


def test_half_record_layout_and_commit(env):
    r, half = env.half(b"pay")
    assert half.topic == HALF_TOPIC and half.queue_id == 0
    assert half.sys_flag & TRANSACTION_MASK == TRANSACTION_NOT_TYPE  # dispatched, hidden
    assert half.properties["REAL_TOPIC"] == "Real" and half.properties["REAL_QID"] == "1"
    assert env.real() == []
    assert env.end(r, half, TRANSACTION_COMMIT_TYPE) == (0, None)
    [m] = env.real()
    assert m.body == b"pay" and m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
    assert m.prepared_transaction_offset == r.wrote_offset and m.uniq_key == half.uniq_key
    [op] = env.real(OP_TOPIC, 0)
    assert op.tags == "d" and op.body == str(half.queue_offset).encode()
    assert op.keys == [half.uniq_key]
    # wrong group / wrong queue offset / not a half record: refused, nothing written
    bad = EndTransactionRequest("OTHER", r.queue_offset, r.wrote_offset, TRANSACTION_COMMIT_TYPE)
    assert env.svc.end_transaction(bad)[0] != 0
    bad = EndTransactionRequest("PG", r.queue_offset + 5, r.wrote_offset, TRANSACTION_COMMIT_TYPE)
    assert env.svc.end_transaction(bad)[0] != 0
    bad = EndTransactionRequest("PG", 0, m.commitlog_offset, TRANSACTION_COMMIT_TYPE)
    assert env.svc.end_transaction(bad)[0] != 0
    assert env.svc.end_transaction(EndTransactionRequest(
        "PG", r.queue_offset, r.wrote_offset, TRANSACTION_NOT_TYPE)) is None  # UNKNOW: no answer
    assert len(env.real()) == 1


def test_crash_between_committed_copy_and_op_record_commits_once(env):
    r, half = env.half(b"once")
    # what a crash right after the committed copy leaves behind: the copy, no op record
    assert env.store.put_message(committed_message(half)).status.name == "PUT_OK"
    env.reopen()
    assert env.check(lambda: later()) == []  # decided already: nobody is asked
    assert env.end(r, half, TRANSACTION_COMMIT_TYPE) == (0, None)  # a late duplicate
    code, remark = env.end(r, half, TRANSACTION_ROLLBACK_TYPE)
    assert code != 0 and "already committed" in remark
    assert [m.body for m in env.real()] == [b"once"]
    ops = env.real(OP_TOPIC, 0)
    assert [int(o.body) for o in ops] == [half.queue_offset]  # one op record, not three
    env.check(lambda: later())
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 1
    assert env.offsets.query(SYS_GROUP, OP_TOPIC, 0) == 1


def test_check_copies_forward_counts_and_discards(env):
    young_r, young = env.half(b"young", born=int(time.time() * 1000))
    # younger than transactionTimeOut (1 s): not yet asked, and it holds the walk back
    assert env.check(lambda: young.store_timestamp + 10) == []
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) in (-1, 0)
    assert env.end(young_r, young, TRANSACTION_ROLLBACK_TYPE) == (0, None)
    r, half = env.half(b"undecided")
    for n in (1, 2, 3):
        asked = env.check(lambda: later() + n)
        assert len(asked) == 1 and asked[0].group == "PG"
        cmd = asked[0].command
        assert cmd.code == 39 and cmd.is_oneway
        assert cmd.ext_fields["transactionId"] == half.uniq_key
        copy = env.store.look_message_by_offset(int(cmd.ext_fields["commitLogOffset"]))
        assert copy.topic == HALF_TOPIC and copy.uniq_key == half.uniq_key
        assert copy.queue_offset == int(cmd.ext_fields["tranStateTableOffset"]) == n + 1
        assert copy.properties["TRANSACTION_CHECK_TIMES"] == str(n)
        assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == n + 1  # past the original
    assert env.check(lambda: later() + 9) == []  # checked check_max times: given up
    given_up = env.real("TRANS_CHECK_MAX_TIME_TOPIC", 0)
    assert [m.body for m in given_up] == [b"undecided"]
    assert env.real() == []
    # the producer answers the last check after all: still delivered exactly once
    assert env.svc.end_transaction(EndTransactionRequest(
        "PG", int(cmd.ext_fields["tranStateTableOffset"]), int(cmd.ext_fields["commitLogOffset"]),
        TRANSACTION_COMMIT_TYPE)) == (0, None)
    assert [m.body for m in env.real()] == [b"undecided"]


def test_answer_for_an_older_copy_settles_every_copy(env):
    r, half = env.half(b"late")
    [req] = env.check(lambda: later())
    # the producer's own END_TRANSACTION for the original arrives after the check copied it
    assert env.end(r, half, TRANSACTION_COMMIT_TYPE) == (0, None)
    assert env.check(lambda: later() + 1) == []  # the copy is not asked about
    # and the answer to the check, about the copy, commits nothing more
    cmd = req.command
    assert env.svc.end_transaction(EndTransactionRequest(
        "PG", int(cmd.ext_fields["tranStateTableOffset"]), int(cmd.ext_fields["commitLogOffset"]),
        TRANSACTION_COMMIT_TYPE, True)) == (0, None)
    assert [m.body for m in env.real()] == [b"late"]
    env.check(lambda: later() + 2)
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 2
    # one op record, for the copy: the original was settled by the check before its answer came
    assert [int(o.body) for o in env.real(OP_TOPIC, 0)] == [1]
    assert env.offsets.query(SYS_GROUP, OP_TOPIC, 0) == 1


def test_immunity_time_defers_the_first_check(env):
    r, half = env.half(b"slow", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")
    assert env.check(lambda: later()) == []  # older than transactionTimeOut, not than 1 h
    copies = env.real(HALF_TOPIC, 0)
    assert len(copies) == 2 and copies[1].properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
    assert env.end(r, half, TRANSACTION_ROLLBACK_TYPE) == (0, None)  # decided meanwhile
    assert env.check(lambda: later() + 1) == []
    assert env.check(lambda: env.born + 7_200_000) == []  # past the immunity: settled anyway
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 2
    assert env.real() == []


def test_transactions_in_a_store_written_by_rocketmq(rocketmq_store, rocketmq_manifest):
    """RocketMQ 4.9.7's half, committed and op records (the fixture's stock flow): a repeated
    END_TRANSACTION for them commits nothing, and the check settles them as RocketMQ does."""
    from ..conftest import fixture_config

    clean, _ = rocketmq_store
    flow = [m for m in rocketmq_manifest["messages"] if "stock flow" in m["role"]]
    halves = [m for m in flow if m["role"].startswith("txn-half")]
    commits = [m for m in flow if m["role"].startswith("txn-commit")]
    assert len(halves) == 2 and len(commits) == 2
    with MessageStore(fixture_config(clean, rocketmq_manifest)) as store:
        conf = os.path.join(str(clean), "config-test")
        offsets = ConsumerOffsetManager(conf)
        svc = TransactionalMessageService(store, TopicConfigManager(conf), offsets,
                                          store.put_message, TransactionConfig(timeout_ms=1000))
        assert store.wait_dispatched(10)
        real_before = {m["storedQueueId"]: store.get_max_offset_in_queue("DevOrders",
                                                                          m["storedQueueId"])
                       for m in commits}
        # RocketMQ's op records carry no key: the op queue itself says these are decided
        for h in halves:
            res = svc.end_transaction(EndTransactionRequest(
                "DevTxGroup", h["logicsOffset"], h["wroteOffset"], TRANSACTION_COMMIT_TYPE))
            assert res == (0, None)
        assert svc.check(later) == []  # both decided: nobody is asked
        assert offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 2
        assert offsets.query(SYS_GROUP, OP_TOPIC, 0) == 2
        assert store.wait_dispatched(10)
        for q, n in real_before.items():
            assert store.get_max_offset_in_queue("DevOrders", q) == n  # nothing new
        assert store.get_max_offset_in_queue(OP_TOPIC, 0) == 2  # and no second op record


def test_many_transactions_decided_out_of_order(env):
    """More op records than one read (32) holds, decided in shuffled order: the check asks about
    exactly the undecided ones, and the settled offsets end at the queues' ends."""
    import random

    rng = random.Random(7)
    halves = [env.half(f"m{i}".encode(), qid=i % 3) for i in range(100)]
    order = list(range(100))
    rng.shuffle(order)
    decided = {i: (TRANSACTION_COMMIT_TYPE if rng.random() < 0.6 else TRANSACTION_ROLLBACK_TYPE)
               for i in order[:70]}
    for i in order[:70]:
        r, h = halves[i]
        assert env.end(r, h, decided[i]) == (0, None)
    asked = env.check(lambda: later())
    asked_ids = sorted(req.command.ext_fields["transactionId"] for req in asked)
    assert asked_ids == sorted(halves[i][1].uniq_key for i in order[70:])
    for req in asked:  # the producer answers every check with COMMIT
        f = req.command.ext_fields
        assert env.svc.end_transaction(EndTransactionRequest(
            "PG", int(f["tranStateTableOffset"]), int(f["commitLogOffset"]),
            TRANSACTION_COMMIT_TYPE, True)) == (0, None)
    assert env.check(lambda: later() + 1) == []
    want = sorted([f"m{i}".encode() for i, s in decided.items() if s == TRANSACTION_COMMIT_TYPE]
                  + [f"m{i}".encode() for i in order[70:]])
    got = [m.body for q in range(3) for m in env.real("Real", q)]
    assert sorted(got) == want and len(got) == len(set(got))
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 130  # 100 halves + 30 copies
    assert env.offsets.query(SYS_GROUP, OP_TOPIC, 0) == env.store.get_max_offset_in_queue(
        OP_TOPIC, 0) == 100


def test_which_sends_are_half_messages():
    def m(sys_flag=0, reconsume=0, **props):
        return Message(topic="T", body=b"", sys_flag=sys_flag, reconsume_times=reconsume,
                       properties=props)
    assert is_transactional(m(TRAN_MSG="true")) and is_transactional(m(TRAN_MSG="TRUE"))
    assert is_transactional(m(sys_flag=TRANSACTION_PREPARED_TYPE))  # the flag alone is enough
    assert not is_transactional(m(TRAN_MSG="false")) and not is_transactional(m())
    # a pre-4.6.1 client re-sending a consumed transactional message for a delayed retry
    assert not is_transactional(m(reconsume=1, TRAN_MSG="true", DELAY="3"))


def test_batched_end_merges_op_records_and_the_check_settles_them(env):
    """A batch of half records (rocketstore's transactionBatchEnable) ended by one batched
    END_TRANSACTION: one committed copy each, op records merged as RocketMQ 5 writes them
    ("o1,o2,...,"); the check then settles every half and op record, and after a restart a
    repeated END_TRANSACTION still commits nothing twice. The half records kept from the put
    (``remember_halves``) read the same as the store's own."""
    msgs = [env.svc.half_message(Message(
        topic="Real", body=f"b{i}".encode(), queue_id=1, born_timestamp=env.born,
        sys_flag=TRANSACTION_PREPARED_TYPE,
        properties={"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": create_uniq_key()}))
        for i in range(300)]
    r = env.store.put_messages(msgs)
    assert r.status.name == "PUT_OK" and env.store.wait_dispatched(5)
    env.svc.remember_halves(msgs, r)
    entries = [(r.queue_offset + i, env.store.look_message_by_offset(
        int(mid[-16:], 16)).commitlog_offset) for i, mid in enumerate(r.msg_ids)]
    for q, c in entries[:5]:
        kept, stored = env.svc._recent[c], env.store.look_message_by_offset(c)
        assert (kept.properties, kept.body, kept.queue_offset, kept.born_timestamp,
                kept.sys_flag) == (stored.properties, stored.body, stored.queue_offset,
                                   stored.born_timestamp, stored.sys_flag)
    out = env.svc.end_transactions("PG", entries[:290], TRANSACTION_COMMIT_TYPE)
    assert out == [(0, None)] * 290
    out = env.svc.end_transactions("PG", entries[290:] + entries[:1], TRANSACTION_ROLLBACK_TYPE)
    assert [c for c, _ in out] == [0] * 10 + [1]  # the committed one stays committed
    got = _all(env, "Real", 1)
    assert sorted(m.body for m in got) == sorted(f"b{i}".encode() for i in range(290))
    # each committed copy is the record a single END_TRANSACTION stores (committed_message
    # of the half record read back from the store)
    for c in got:
        ref = committed_message(env.store.look_message_by_offset(c.prepared_transaction_offset))
        assert (c.topic, c.queue_id, c.properties, c.sys_flag, c.flag, c.body, c.born_timestamp,
                c.born_host, c.reconsume_times) == (
            ref.topic, ref.queue_id, ref.properties, ref.sys_flag, ref.flag, ref.body,
            ref.born_timestamp, ref.born_host, ref.reconsume_times)
    ops = env.real(OP_TOPIC, 0)
    named = [int(o) for op in ops for o in op.body.decode().split(",") if o]
    assert sorted(named) == list(range(300)) and len(ops) == 3  # 256 + 34, then 10
    assert env.check(lambda: later()) == []
    assert env.offsets.query(SYS_GROUP, HALF_TOPIC, 0) == 300
    assert env.offsets.query(SYS_GROUP, OP_TOPIC, 0) == 3
    # op records of a batched COMMIT name no transaction (the committed copy's UNIQ_KEY does);
    # those of a ROLLBACK name theirs, so a restarted broker still knows both outcomes
    assert [bool(op.keys) for op in ops] == [False, False, True]
    env.reopen()
    out = env.svc.end_transactions("PG", entries[:3], TRANSACTION_COMMIT_TYPE)
    assert out == [(0, None)] * 3
    out = env.svc.end_transactions("PG", entries[291:293], TRANSACTION_COMMIT_TYPE)
    assert [c for c, _ in out] == [1, 1] and "rolled back" in out[0][1]
    assert len(_all(env, "Real", 1)) == 290


def _all(env, topic: str, qid: int) -> list:
    assert env.store.wait_dispatched(5)
    out: list = []
    while True:
        got = env.store.get_message("CG", topic, qid, len(out), 32).messages or []
        if not got:
            return out
        out += got


def test_half_batch_builds_what_half_message_builds(env):
    """A prepared batch's half records (``half_batch``, one build per entry) are, field for
    field and in property order (the stored bytes), what ``half_message`` makes of each entry
    as a message of its own: the batch header's tags and keys, REAL_TOPIC and REAL_QID added,
    a delay level dropped, the transaction bits reset."""
    from dataclasses import astuple, replace
    base = Message(topic="Real", queue_id=3, tags="tagA", keys=["k1", "k2"], flag=0,
                   sys_flag=TRANSACTION_PREPARED_TYPE | 0x1, born_timestamp=env.born,
                   born_host="127.0.0.1:5555", reconsume_times=2)
    entries = [(b"one", {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "U1", "a": "1"}, 0),
               (b"two", {"TRAN_MSG": "true", "PGROUP": "PG", "DELAY": "0", "KEYS": "mine"}, 7)]
    want = [env.svc.half_message(replace(base, body=b, properties=dict(p), flag=f))
            for b, p, f in entries]
    got = env.svc.half_batch(base, [(b, dict(p), f) for b, p, f in entries])
    assert [astuple(m) for m in got] == [astuple(m) for m in want]
    assert [list(m.properties) for m in got] == [list(m.properties) for m in want]
    assert got[1].properties["KEYS"] == "k1 k2" and "DELAY" not in got[1].properties
    assert got[0].topic == HALF_TOPIC and got[0].properties["REAL_QID"] == "3"
    assert got[0].sys_flag & TRANSACTION_MASK == 0 and got[0].sys_flag & 0x1


def _stored_batch(env, n: int, tag: str, uniq: list[str] | None = None):
    """A batch of ``n`` half records (kept for a batched END): their END entries."""
    msgs = [env.svc.half_message(Message(
        topic="Real", body=f"{tag}{i}".encode(), queue_id=1, born_timestamp=env.born,
        sys_flag=TRANSACTION_PREPARED_TYPE,
        properties={"TRAN_MSG": "true", "PGROUP": "PG",
                    "UNIQ_KEY": uniq[i] if uniq else create_uniq_key()}))
        for i in range(n)]
    r = env.store.put_messages(msgs)
    assert r.status.name == "PUT_OK" and env.store.wait_dispatched(5)
    env.svc.remember_halves(msgs, r)
    return [(r.queue_offset + i, int(mid[-16:], 16)) for i, mid in enumerate(r.msg_ids)]


def _counted_queries(env, monkeypatch) -> list[str]:
    """The keys the store is asked about from now on (index lookups), in order."""
    queries: list[str] = []
    real_query = env.store.query_message

    def counted(topic, key, n):
        queries.append(key)
        return real_query(topic, key, n)
    monkeypatch.setattr(env.store, "query_message", counted)
    return queries


def test_forgotten_decisions_keep_newer_halves_off_the_index(env, monkeypatch):
    """Past ``MAX_REMEMBERED`` decisions the oldest are forgotten. Half records stored after
    the forgotten decisions were made are still answered from memory — no index lookup per
    row, as before anything was forgotten (it was one per row for the broker's lifetime) —
    while a forgotten transaction ended again is found through the index and not committed
    twice."""
    from rocketstore.broker.services import transaction as T
    monkeypatch.setattr(T, "MAX_REMEMBERED", 50)
    first = _stored_batch(env, 40, "a")
    assert env.svc.end_transactions("PG", first, TRANSACTION_COMMIT_TYPE) == [(0, None)] * 40
    second = _stored_batch(env, 40, "b")  # deciding these forgets 30 of the first 40
    assert env.svc.end_transactions("PG", second, TRANSACTION_COMMIT_TYPE) == [(0, None)] * 40
    assert len(env.svc._decided) == 50
    queries = _counted_queries(env, monkeypatch)
    third = _stored_batch(env, 40, "c")  # stored after every forgotten decision
    assert env.svc.end_transactions("PG", third, TRANSACTION_COMMIT_TYPE) == [(0, None)] * 40
    assert queries == []
    # the first batch again (its halves read back from the store): its decisions, forgotten,
    # come from the index (the committed copies' UNIQ_KEYs), and nothing is stored twice
    again = env.svc.end_transactions("PG", first, TRANSACTION_COMMIT_TYPE)
    assert again == [(0, None)] * 40 and len(queries) >= 30
    rolled = env.svc.end_transactions("PG", first[:5], TRANSACTION_ROLLBACK_TYPE)
    assert [c for c, _ in rolled] == [1] * 5  # committed: it stays committed
    got = _all(env, "Real", 1)  # one committed copy each
    assert sorted(m.body for m in got) == sorted(
        f"{t}{i}".encode() for t in "abc" for i in range(40))


def test_batched_end_with_repeats_and_bad_entries_in_one_request(env):
    """One batched END_TRANSACTION that is not the usual clean batch: a half named twice, a
    wrong tranStateTableOffset, an offset that is not a half record, and halves decided by an
    earlier request. Each entry is answered as a single END_TRANSACTION would answer it; the
    repeated half is committed once and named once in the op records, and nothing else is
    stored twice."""
    first = _stored_batch(env, 10, "x")
    assert env.svc.end_transactions("PG", first[:4], TRANSACTION_COMMIT_TYPE) == [(0, None)] * 4
    q5, c5 = first[5]
    entries = (first[2:6] + [first[5]]                      # two decided, two new, one repeated
               + [(q5 + 100, first[6][1])]                 # wrong tranStateTableOffset
               + [(0, c5 + 1)]                             # inside a record: no half there
               + first[7:])                                # three new
    out = env.svc.end_transactions("PG", entries, TRANSACTION_COMMIT_TYPE)
    codes = [c for c, _ in out]
    assert codes == [0, 0, 0, 0, 0, 1, 1, 0, 0, 0], out
    assert "offset wrong" in out[5][1] and "Find prepared" in out[6][1]
    # half 6 was refused above: rolling it back now works; committing a committed one is fine
    out = env.svc.end_transactions("PG", [first[6], first[0]], TRANSACTION_ROLLBACK_TYPE)
    assert [c for c, _ in out] == [0, 1] and "already committed" in out[1][1]
    got = _all(env, "Real", 1)
    assert sorted(m.body for m in got) == sorted(
        f"x{i}".encode() for i in range(10) if i != 6)
    named = [int(o) for op in env.real(OP_TOPIC, 0) for o in op.body.decode().split(",") if o]
    assert sorted(named) == [q for q, _ in first]  # every half once, the repeated one too


def test_halves_no_longer_kept_are_read_back_as_the_store_decodes_them(env, monkeypatch):
    """A write larger than ``RECENT_MAX`` halves: the ones no longer kept from their put are
    read back from the CommitLog (``half_from_record``, a few unpacks) — field for field what
    ``decode_message`` reads, IPv6 hosts and other topics answered apart — and committed as
    the kept ones are: one copy each, the single END_TRANSACTION's record."""
    from rocketstore.broker.services import transaction as T
    monkeypatch.setattr(T, "RECENT_MAX", 8)
    entries = _stored_batch(env, 40, "r")
    assert len(env.svc._recent) == 8  # 32 of 40 to read back
    for q, c in entries:
        got = T.half_from_record(env.store.records_at([c])[0])
        ref = env.store.look_message_by_offset(c)
        assert [getattr(got, f) for f in T.KeptHalf.__slots__] == [
            getattr(ref, f) for f in T.KeptHalf.__slots__] and got.topic == ref.topic
    v6 = env.svc.half_message(Message(topic="Real", body=b"six", queue_id=1, born_host="[::1]:7",
                                      born_timestamp=env.born, sys_flag=TRANSACTION_PREPARED_TYPE,
                                      properties={"TRAN_MSG": "true", "PGROUP": "PG",
                                                  "UNIQ_KEY": create_uniq_key()}))
    r6 = env.store.put_message(v6)
    plain = env.store.put_message(Message(topic="Real", body=b"plain", queue_id=1))
    assert T.half_from_record(env.store.records_at([r6.wrote_offset])[0]) is None
    assert T.half_from_record(env.store.records_at([plain.wrote_offset])[0]) is T.NOT_A_HALF
    assert env.store.records_at([plain.wrote_offset + 1, 1 << 40]) == [None, None]
    out = env.svc.end_transactions(
        "PG", entries + [(r6.queue_offset, r6.wrote_offset), (0, plain.wrote_offset)],
        TRANSACTION_COMMIT_TYPE)
    assert out[:41] == [(0, None)] * 41 and out[41][0] == 1 and "Find prepared" in out[41][1]
    got = [m for m in _all(env, "Real", 1) if m.body != b"plain"]
    assert sorted(m.body for m in got) == sorted([f"r{i}".encode() for i in range(40)] + [b"six"])
    for c in got:
        ref = committed_message(env.store.look_message_by_offset(c.prepared_transaction_offset))
        assert (c.topic, c.queue_id, c.properties, c.sys_flag, c.flag, c.body, c.born_timestamp,
                c.born_host, c.store_host, c.reconsume_times) == (
            ref.topic, ref.queue_id, ref.properties, ref.sys_flag, ref.flag, ref.body,
            ref.born_timestamp, ref.born_host, ref.store_host, ref.reconsume_times)


def test_forgotten_keys_never_miss_one_and_rarely_name_another():
    """``ForgottenKeys``, the Bloom filters behind forgotten decisions: every key added is
    held (a miss would let a forgotten transaction commit twice); keys never added are held
    rarely (each such one costs an index lookup); past its generations the oldest goes, and
    ``add`` says up to which CommitLog end decisions are then forgotten for good."""
    from rocketstore.broker.services.transaction import ForgottenKeys
    f = ForgottenKeys(capacity=20_000, generations=2, bits=18)  # 32 KiB a generation
    added = [create_uniq_key() for _ in range(40_000)]
    assert f.add(added[:20_000], mark=100) is None and f.add(added[20_000:], mark=200) is None
    assert f.may_hold(added).all() and f.count == 40_000
    others = [create_uniq_key() for _ in range(20_000)]
    assert f.may_hold(others).mean() < 0.2  # 20,000 keys in 262,144 bits: about 9% expected
    assert f.add(others[:10], mark=300) == 100  # a third generation: the first is dropped
    assert f.may_hold(added[20_000:]).all() and f.may_hold(others[:10]).all()
    assert f.may_hold(added[:20_000]).mean() < 0.2
    assert not ForgottenKeys().may_hold(added).any()


def test_a_write_larger_than_the_decision_memory_asks_the_index_for_none(env, monkeypatch):
    """One batched END stream deciding more halves than ``MAX_REMEMBERED``: deciding the later
    ones forgets the earlier ones, but the halves still to be ended are answered from memory
    (not one index lookup: before, every half after the first forgotten decision took two);
    a forgotten transaction ended again is still found and not committed twice."""
    from rocketstore.broker.services import transaction as T
    monkeypatch.setattr(T, "MAX_REMEMBERED", 30)
    entries = _stored_batch(env, 120, "w")
    queries = _counted_queries(env, monkeypatch)
    for i in range(0, 120, 20):
        assert env.svc.end_transactions("PG", entries[i:i + 20], TRANSACTION_COMMIT_TYPE) == \
            [(0, None)] * 20
    assert queries == [] and len(env.svc._decided) == 30 and env.svc._forgotten.count == 90
    assert env.store.wait_dispatched(5)  # the committed copies indexed: the lookups find them
    again = env.svc.end_transactions("PG", entries[:10], TRANSACTION_COMMIT_TYPE)
    assert again == [(0, None)] * 10 and len(queries) >= 10
    rolled = env.svc.end_transactions("PG", entries[10:12], TRANSACTION_ROLLBACK_TYPE)
    assert [c for c, _ in rolled] == [1, 1], (rolled, queries)
    assert sorted(m.body for m in _all(env, "Real", 1)) == sorted(
        f"w{i}".encode() for i in range(120))


def test_promoted_slave_finds_replicated_decisions(env):
    """A slave's service saw none of the decisions that came by replication (the committed
    copy and op record the old master wrote). Once promoted (controller mode) it must find
    them in the store, or a late COMMIT — a check answer, an END retried to the new master —
    would deliver the message a second time."""
    r, half = env.half(b"once")
    # what replication brings: the old master's committed copy and op record, written to the
    # store beneath the service
    for m in (committed_message(half), op_message(half)):
        assert env.store.put_message(m).status.name == "PUT_OK"
    assert len(env.real()) == 1
    env.svc.promoted()
    assert env.end(r, half, TRANSACTION_COMMIT_TYPE) == (0, None)
    assert len(env.real()) == 1  # not twice
    assert env.end(r, half, TRANSACTION_ROLLBACK_TYPE)[0] != 0  # a commit is never overturned
