"""Broker state managers: file shapes, fastjson quirks, atomic writes, consumer registry."""
from __future__ import annotations

import json

import pytest

from rocketstore.broker.state.consumers import ConsumerManager
from rocketstore.broker.state.offsets import ConsumerOffsetManager
from rocketstore.broker.state.topics import TopicConfigManager, validate_topic
from rocketstore.client import MessageQueue, allocate_average
from rocketstore.client.producer import select_by_key


def test_consumer_offsets_read_fastjson_bare_integer_keys(tmp_path):
    (tmp_path / "consumerOffset.json").write_text(
        '{"offsetTable":{"TopicTest@please_rename_unique_group_name_4":{0:250,1:249,2:251}}}')
    m = ConsumerOffsetManager(str(tmp_path))
    assert m.query("please_rename_unique_group_name_4", "TopicTest", 1) == 249
    assert m.query("other", "TopicTest", 1) == -1
    m.commit("g", "T", 3, 7)
    m.persist()
    data = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert data["offsetTable"]["T@g"] == {"3": 7}
    assert data["offsetTable"]["TopicTest@please_rename_unique_group_name_4"]["2"] == 251
    assert (tmp_path / "consumerOffset.json.bak").exists()
    assert not (tmp_path / "consumerOffset.json.tmp").exists()


def test_topics_file_shape_and_default_topic(tmp_path):
    m = TopicConfigManager(str(tmp_path), 4)
    assert m.get("TBW102") is not None
    m.create("Orders", 8)
    m.persist()  # (a single create is journaled; the whole file is written by persist)
    data = json.loads((tmp_path / "topics.json").read_text())
    assert data["topicConfigTable"]["Orders"] == {
        "topicName": "Orders", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    assert data["dataVersion"]["counter"] >= 1
    assert TopicConfigManager(str(tmp_path)).get("Orders").write_queue_nums == 8
    for bad in ("", "a b", "x" * 128, "../etc"):
        with pytest.raises(ValueError):
            validate_topic(bad)


def test_consumer_registry_names_ordinals_expiry_and_close():
    cm = ConsumerManager(expired_timeout_ms=1000)
    conn_a, conn_b = object(), object()
    assert cm.register({"groupName": "G", "consumeType": 1, "messageModel": 1,
                        "consumeFromWhere": 4,
                        "subscriptionDataSet": [{"topic": "T", "subString": "A || B"}]},
                       "a", conn_a, now_ms=0)
    info = cm.group("G")
    assert (info.consume_type, info.message_model, info.consume_from_where) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET")
    assert info.subscriptions["T"].sub_string == "A || B"
    assert cm.register({"groupName": "G", "consumeType": "CONSUME_ACTIVELY",
                        "messageModel": "BROADCASTING"}, "b", conn_b, now_ms=500)
    assert not cm.register({"groupName": "G"}, "b", conn_b, now_ms=900)  # no change
    assert cm.group("G").message_model == "BROADCASTING"
    assert cm.client_ids("G") == ["a", "b"]
    assert cm.scan_expired(now_ms=1200) == ["G"]  # a last seen at 0
    assert cm.client_ids("G") == ["b"]
    assert cm.connection_closed(conn_b) == ["G"] and cm.client_ids("G") == []


def test_allocate_average_and_select_by_key_match_rocketmq():
    qs = [MessageQueue("T", "b", i) for i in range(8)]
    ids = ["c1", "c2", "c3"]
    shares = [allocate_average(qs, ids, c) for c in ids]
    assert [[q.queue_id for q in s] for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert allocate_average(qs[:2], ids, "c3") == []
    # JDK 17 jshell: "order-a".hashCode() == -1207111262, Math.abs(h % 4) == 2
    assert select_by_key(qs[:4], "order-a").queue_id == 2
    assert select_by_key(qs[:3], "order-a").queue_id == abs(-(1207111262 % 3))


def test_rebalance_locks_exclusive_renewable_and_expiring():
    from rocketstore.broker.state.locks import RebalanceLockManager
    m = RebalanceLockManager(max_live_ms=60_000)
    q0, q1 = ("T", "b", 0), ("T", "b", 1)
    assert m.try_lock("G", "c1", [q0, q1], now_ms=0) == [q0, q1]
    assert m.try_lock("G", "c2", [q0, q1], now_ms=1000) == []  # held by c1
    assert m.try_lock("G2", "c2", [q0], now_ms=1000) == [q0]  # other group, own locks
    assert m.try_lock("G", "c1", [q0], now_ms=30_000) == [q0]  # renewal
    assert m.try_lock("G", "c2", [q0, q1], now_ms=61_000) == [q1]  # q1 lapsed, q0 renewed
    m.unlock("G", "c2", [q0])  # not c2's: no effect
    assert m.try_lock("G", "c3", [q0], now_ms=62_000) == []
    m.unlock("G", "c1", [q0])
    assert m.try_lock("G", "c3", [q0], now_ms=62_000) == [q0]
