"""Hash collisions never leak into exact query results (format reference §9, issue #3613)."""
from __future__ import annotations

import random

import pytest

from rocketstore.format.hashing import index_key_hash
from rocketstore.format.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE

from .index_helpers import LONG_MAX, MiniLog, make_service


def _offsets(res):
    return [m.commitlog_offset for m in res.messages]


def test_aa_bb_topics_and_keys(tmp_path):
    log = MiniLog()
    t = 1_700_000_000_000
    a1 = log.append("AaTopic", ["Aa"], ts=t)
    b1 = log.append("BBTopic", ["BB"], ts=t + 1)
    ab = log.append("AaTopic", ["BB"], ts=t + 2)
    ba = log.append("BBTopic", ["Aa"], ts=t + 3)
    both = log.append("AaTopic", ["BB", "Aa"], ts=t + 4)  # two colliding keys on one message
    a2 = log.append("AaTopic", ["Aa"], ts=t + 5)
    svc = make_service(tmp_path, slots=211, num=100)
    svc.dispatch(log.records())
    # RocketMQ's raw answer mixes all four keys (one hash, one chain)
    raw, _, _ = svc.query_offsets("AaTopic", "Aa", 32, 0, LONG_MAX)
    assert raw == [a2, both, both, ba, ab, b1, a1]
    assert index_key_hash("AaTopic#Aa") == index_key_hash("BBTopic#BB") == index_key_hash("AaTopic#BB")
    q = lambda topic, key: _offsets(svc.query_message(topic, key, 32, 0, None, log.read))
    assert q("AaTopic", "Aa") == [a2, both, a1]
    assert q("AaTopic", "BB") == [both, ab]
    assert q("BBTopic", "BB") == [b1]
    assert q("BBTopic", "Aa") == [ba]
    assert q("BBTopic", "Cc") == []
    assert q("AaTopic", "Aa")[:1] == _offsets(svc.query_message("AaTopic", "Aa", 1, 0, None, log.read))
    svc.shutdown()


def test_collisions_do_not_use_up_the_cap(tmp_path):
    """50 colliding messages newer than the real one: RocketMQ's raw 32 are all collisions."""
    log = MiniLog()
    t = 1_700_000_000_000
    real = log.append("AaTopic", ["Aa"], ts=t)
    for i in range(50):
        log.append("BBTopic", ["BB"], ts=t + 1 + i)
    svc = make_service(tmp_path, slots=211, num=1000)
    svc.dispatch(log.records())
    raw, _, _ = svc.query_offsets("AaTopic", "Aa", 32, 0, LONG_MAX)
    assert len(raw) == 32 and real not in raw
    assert _offsets(svc.query_message("AaTopic", "Aa", 32, 0, None, log.read)) == [real]
    svc.shutdown()


@pytest.mark.parametrize("slots", [1, 3])
def test_tiny_slot_table_forces_everything_into_few_chains(tmp_path, slots):
    rnd = random.Random(slots)
    log = MiniLog()
    t = 1_700_000_000_000
    topics = ["T1", "T2", "AaTopic", "BBTopic"]
    keys = [f"k{i}" for i in range(12)] + ["Aa", "BB"]
    model = []  # (offset, topic, keys, uniq, ts, sys_flag)
    for i in range(400):
        topic = rnd.choice(topics)
        ks = rnd.sample(keys, rnd.randint(0, 3))
        if rnd.random() < 0.2 and ks:
            ks.append(ks[0])  # a repeated key: one message, two entries
        uniq = f"U{i:05d}" if rnd.random() < 0.7 else None
        flag = rnd.choice([0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE])
        ts = t + i * 250
        off = log.append(topic, ks or None, uniq=uniq, ts=ts, sys_flag=flag)
        model.append((off, topic, ks, uniq, ts, flag))
    svc = make_service(tmp_path, slots=slots, num=5000)
    recs = log.records()
    # dispatch in uneven batches, as the reput does
    bounds = sorted(rnd.sample(range(1, len(recs)), 9))
    pos = [int(p) for p in recs.pos]
    cuts = [0] + [pos[b] for b in bounds] + [len(log.buf)]
    for a, b in zip(cuts, cuts[1:]):
        svc.dispatch(log.records(a, b))
    assert svc.files[0].used_slots() <= slots
    for topic in topics:
        for key in keys + ["U00007", "U00123", "nope"]:
            for (begin, end) in [(0, None), (t + 20_000, t + 60_000), (t + 99_750, t + 99_750)]:
                hi = LONG_MAX if end is None else end
                exp = [m[0] for m in reversed(model)
                       if m[1] == topic and m[5] != TRANSACTION_ROLLBACK_TYPE
                       and (key in m[2] or m[3] == key) and begin <= m[4] <= hi][:64]
                got = svc.query_message(topic, key, 1000, begin, end, log.read)
                assert _offsets(got) == exp, (topic, key, begin, end)
                got5 = svc.query_message(topic, key, 5, begin, end, log.read)
                assert _offsets(got5) == exp[:5]
    # uniq-key lookups only match UNIQ_KEY, not KEYS
    off, topic, _, uniq, _, flag = next(m for m in model if m[3] and m[5] != TRANSACTION_ROLLBACK_TYPE)
    assert [m.commitlog_offset for m in svc.query_by_uniq_key(topic, uniq, log.read)] == [off]
    assert svc.query_by_uniq_key(topic, "k1", log.read) == []
    svc.shutdown()


def test_max_msgs_num_batch_cap_is_configurable(tmp_path):
    log = MiniLog()
    for i in range(100):
        log.append("T", ["same"], ts=1_700_000_000_000 + i)
    svc = make_service(tmp_path, slots=211, num=1000)
    svc.dispatch(log.records())
    assert len(svc.query_message("T", "same", 1000, 0, None, log.read).messages) == 64
    assert len(svc.query_offsets("T", "same", 10**9, 0, LONG_MAX)[0]) == 64
    svc.shutdown()
    svc2 = make_service(tmp_path, slots=211, num=1000, max_msgs_num_batch=500)
    assert len(svc2.query_message("T", "same", 1000, 0, None, log.read).messages) == 100
    svc2.shutdown()


def test_query_on_empty_service_does_not_throw(tmp_path):
    """IndexServiceTest.testQueryOffsetThrow: a huge maxNum on an empty service."""
    svc = make_service(tmp_path)
    assert svc.query_offsets("test", "", 2**31 - 1, 10, 100) == ([], 0, 0)
    r = svc.query_message("test", "", 2**31 - 1, 10, 100, lambda off: None)
    assert r.messages == [] and r.index_last_update_timestamp == 0
    svc.shutdown()


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(msgs=st.lists(st.tuples(st.sampled_from(["AaTopic", "BBTopic"]),
                               st.lists(st.sampled_from(["Aa", "BB", "k"]), max_size=3),
                               st.integers(0, 2500)), min_size=1, max_size=40),
       num=st.integers(2, 9), slots=st.sampled_from([1, 2, 211]),
       windows=st.lists(st.tuples(st.integers(-500, 60_000), st.integers(0, 60_000)), max_size=4),
       cap=st.integers(1, 70))
def test_exact_query_model(tmp_path_factory, msgs, num, slots, windows, cap):
    """Random streams, tiny files, random windows and caps: query_message == brute force."""
    log = MiniLog()
    t0, ts, model = 1_700_000_000_000, 1_700_000_000_000, []
    for topic, keys, gap in msgs:
        ts += gap  # non-decreasing store times, often several in one second
        model.append((log.append(topic, keys or None, ts=ts), topic, keys, ts))
    svc = make_service(tmp_path_factory.mktemp("m"), slots=slots, num=num)
    svc.dispatch(log.records())
    for lo, width in windows + [(-10**12, 10**13)]:
        begin, end = t0 + lo, t0 + lo + width
        for topic in ("AaTopic", "BBTopic"):
            for key in ("Aa", "BB", "k"):
                exp = [o for o, t, ks, s in reversed(model)
                       if t == topic and key in ks and begin <= s <= end][:min(cap, 64)]
                got = svc.query_message(topic, key, cap, begin, end, log.read)
                assert _offsets(got) == exp, (topic, key, begin, end)
    svc.shutdown()
