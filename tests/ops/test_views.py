"""``ops.views`` on a real store: lag in bytes and ms, time-window search, id checks, previews."""
from __future__ import annotations

import time

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.state.offsets import ConsumerOffsetManager
from rocketstore.broker.state.topics import TopicConfigManager

pytest.importorskip("starlette")
from rocketstore.ops import views  # noqa: E402


def small_config(root, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=1 << 20,
                       mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                       max_index_num=4000, **kw)


def test_flush_and_dispatch_lag_in_bytes_and_ms(tmp_path):
    # a flush that never runs on its own: one-page puts stay below the least-pages threshold
    cfg = small_config(tmp_path / "s", flush_interval_commitlog=3_600_000,
                       flush_commitlog_thorough_interval=3_600_000)
    with MessageStore(cfg) as store:
        r1 = store.put_message(Message(topic="T", body=b"a", queue_id=0))
        time.sleep(0.05)
        r2 = store.put_message(Message(topic="T", body=b"b", queue_id=0))
        assert store.wait_dispatched(5)
        rt = views.store_runtime(store, cfg)
        assert rt.max_phy_offset == r1.wrote_bytes + r2.wrote_bytes
        assert rt.flush_behind_bytes == r1.wrote_bytes + r2.wrote_bytes
        assert rt.flush_behind_ms == r2.store_timestamp - r1.store_timestamp >= 50
        assert rt.dispatch_behind_bytes == 0 and rt.dispatch_behind_ms == 0
        assert rt.last_store_timestamp == r2.store_timestamp
        # with the reput stopped, what is put next is behind the ConsumeQueues
        store.reput.stop()
        r3 = store.put_message(Message(topic="T", body=b"c", queue_id=0))
        time.sleep(0.05)
        r4 = store.put_message(Message(topic="T", body=b"d", queue_id=0))
        rt = views.store_runtime(store, cfg)
        assert rt.dispatch_behind_bytes == r3.wrote_bytes + r4.wrote_bytes
        assert rt.dispatch_behind_ms == r4.store_timestamp - r3.store_timestamp >= 50
        store.reput.start()
        assert store.wait_dispatched(5)
        kinds = {p.kind: p for p in rt.paths}
        assert kinds["commitlog"].files_bytes == 1 << 20  # one preallocated segment
        assert 0 < kinds["commitlog"].disk_used_ratio <= 1


def test_time_window_search_is_exact_and_ordered(tmp_path):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg) as store:
        stamps = []
        for i in range(12):
            r = store.put_message(Message(topic="W", body=f"m{i}".encode(), queue_id=i % 3))
            stamps.append(r.store_timestamp)
            if i in (3, 7):
                time.sleep(0.02)
        assert store.wait_dispatched(5)
        begin, end = stamps[4], stamps[7]
        want = [f"m{i}" for i in range(12) if begin <= stamps[i] <= end]
        got = views.find_by_time(store, "W", begin, end, max_num=100)
        assert [m.body_preview for m in got] == want
        assert [m.store_timestamp for m in got] == sorted(m.store_timestamp for m in got)
        assert len(views.find_by_time(store, "W", 0, stamps[-1], max_num=5)) == 5
        assert views.find_by_time(store, "W", stamps[-1] + 1, stamps[-1] + 10_000) == []


def test_find_by_id_checks_the_whole_id(tmp_path):
    cfg = small_config(tmp_path / "s", store_host="127.0.0.1:10911")
    with MessageStore(cfg) as store:
        r = store.put_message(Message(topic="I", body=b"x", queue_id=0, keys=["k"]))
        assert store.wait_dispatched(5)
        assert [m.msg_id for m in views.find_by_id(store, r.msg_id)] == [r.msg_id]
        assert [m.msg_id for m in views.find_by_id(store, r.msg_id.lower())] == [r.msg_id]
        other_host = "0A0B0C0D" + r.msg_id[8:]  # same offset, another broker's id
        assert views.find_by_id(store, other_host) == []
        assert views.find_by_id(store, r.msg_id, topic="Other") == []
        assert views.find_by_id(store, "not-an-id") == []


def test_body_preview():
    assert views.body_preview(b'{"a": 1}') == ('{"a": 1}', True)
    assert views.body_preview(bytes([0, 1, 255])) == ("00 01 ff", False)
    text, is_text = views.body_preview("é".encode() * 300, limit=11)  # cut inside a character
    assert is_text and text == "é" * 5 + "…"
    assert views.body_preview(b"a\x00b") == ("61 00 62", False)


def test_group_lag_and_latency(tmp_path):
    cfg = small_config(tmp_path / "s")
    config_dir = str(tmp_path / "s" / "config")
    topics = TopicConfigManager(config_dir)
    topics.create("L", 2)
    offsets = ConsumerOffsetManager(config_dir)
    with MessageStore(cfg) as store:
        rs = [store.put_message(Message(topic="L", body=b"x", queue_id=i % 2)) for i in range(6)]
        assert store.wait_dispatched(5)
        offsets.commit("g", "L", 0, 1)  # queue 0 holds offsets 0..2: two left
        from rocketstore.broker.state.consumers import ConsumerManager
        now = rs[-1].store_timestamp + 1000
        gv = views.group_view(store, topics, offsets, ConsumerManager(), "g", now=now)
        lags = {(q.topic, q.queue_id): q.lag for q in gv.queues}
        assert lags == {("L", 0): 2, ("L", 1): 3}  # never committed on queue 1: all of it
        oldest = min(rs[2].store_timestamp, rs[1].store_timestamp)  # q0 offset 1, q1 offset 0
        assert gv.lag_latency_ms == now - oldest
        assert views.group_names(offsets, ConsumerManager()) == ["g"]
