"""RocketMQ's ``DefaultMessageStoreTest.testRecover``, ported (reference §8.3), plus checks of
what the recovery report says and that the index follows a truncated CommitLog."""
from __future__ import annotations

import os

from rocketstore.store.results import GetStatus
from rocketstore.store.message_store import MessageStore

from .helpers import damage_topic_length, put_n, small_config, touch_abort

TOPIC = "recoverTopic"


def _state(store):
    return store.get_max_phy_offset(), store.get_max_offset_in_queue(TOPIC, 0)


BODY = b"Once, there was a chance for me!"  # put_n's body, followed by the message number


def _assert_readable(store, count, number_of=lambda q: q):
    """Queue offsets 0..count-1 hold exactly the messages the test wrote: ``number_of(q)`` is
    the number ``put_n`` gave the message that must sit at queue offset ``q``."""
    store.wait_dispatched(10)
    off = 0
    while off < count:
        g = store.get_message("g", TOPIC, 0, off, 32)
        assert g.status is GetStatus.FOUND, (off, g.status)
        for m in g.messages:
            assert m.queue_offset == off
            assert m.body == BODY + str(number_of(off)).encode(), (off, m.body)
            assert m.keys == [f"k{number_of(off)}"]
            off += 1
    assert store.get_max_offset_in_queue(TOPIC, 0) == count


def _damaged_round(root, cfg, start, abnormal):
    with MessageStore(cfg) as store:
        put_n(store, 100, TOPIC, start=start)
        store.wait_dispatched(10)
        second_last_phy, cq_max = _state(store)
        last = put_n(store, 1, TOPIC, start=start + 100)[0]
        store.wait_dispatched(10)
        assert store.query_message(TOPIC, f"k{start + 100}").messages
    assert last.wrote_offset == second_last_phy
    damage_topic_length(root, last.wrote_offset, cfg.mapped_file_size_commitlog)
    if abnormal:
        touch_abort(root)
    with MessageStore(cfg) as store:
        rep = store.recovery_report
        assert rep.normal is (not abnormal)
        assert store.get_max_phy_offset() == second_last_phy
        assert store.get_max_offset_in_queue(TOPIC, 0) == cq_max
        assert rep.truncated_at == second_last_phy
        assert rep.dropped_bytes > 0
        assert rep.cq_units_dropped == {f"{TOPIC}/0": 1}
        assert store.look_message_by_offset(last.wrote_offset) is None
        assert not store.query_message(TOPIC, f"k{start + 100}").messages
        assert store.query_message(TOPIC, f"k{start + 99}").messages
        _assert_readable(store, cq_max)
    return cq_max


def test_recover(tmp_path):
    root = tmp_path / "store"
    cfg = small_config(root, mapped_file_size_commitlog=16 * 1024)
    # 1. 100 messages, clean restart: nothing changes
    with MessageStore(cfg) as store:
        put_n(store, 100, TOPIC)
        store.wait_dispatched(10)
        before = _state(store)
    assert not os.path.exists(root / "abort")
    with MessageStore(cfg) as store:
        assert store.recovery_report.normal
        assert store.recovery_report.truncated_at is None
        assert _state(store) == before
        _assert_readable(store, 100)
    # 2. damage the last record, clean restart
    cq_max = _damaged_round(root, cfg, 100, abnormal=False)
    assert cq_max == 200
    # 3. the same with the abort file present (abnormal recovery)
    cq_max = _damaged_round(root, cfg, 200, abnormal=True)
    assert cq_max == 300
    # 4. writing continues: new records reuse the truncated offsets and are fully indexed
    def after_300(q):  # messages 1000.. follow the 300 that survived
        return q if q < 300 else 1000 + q - 300

    with MessageStore(cfg) as store:
        rs = put_n(store, 100, TOPIC, start=1000)
        store.wait_dispatched(10)
        assert rs[0].queue_offset == 300
        _assert_readable(store, 400, after_300)
        for i in (1000, 1050, 1099):
            got = store.query_message(TOPIC, f"k{i}").messages
            assert [m.queue_offset for m in got] == [300 + i - 1000]
    with MessageStore(cfg) as store:
        assert store.recovery_report.truncated_at is None
        _assert_readable(store, 400, after_300)


def test_recover_writes_continue_across_segment_boundary(tmp_path):
    """Damage in a record that starts a segment: the truncation point is a segment start."""
    root = tmp_path / "store"
    cfg = small_config(root, mapped_file_size_commitlog=4096)
    with MessageStore(cfg) as store:
        rs = put_n(store, 200, TOPIC)
        store.wait_dispatched(10)
    firsts = [r for r in rs if r.wrote_offset % 4096 == 0 and r.wrote_offset > 0]
    victim = firsts[-1]
    damage_topic_length(root, victim.wrote_offset, 4096)
    touch_abort(root)
    with MessageStore(cfg) as store:
        assert store.get_max_phy_offset() == victim.wrote_offset
        assert store.get_max_offset_in_queue(TOPIC, 0) == victim.queue_offset
        put_n(store, 10, TOPIC, start=500)
        store.wait_dispatched(10)
        v = victim.queue_offset
        _assert_readable(store, v + 10, lambda q: q if q < v else 500 + q - v)
        assert store.query_message(TOPIC, "k505").messages
