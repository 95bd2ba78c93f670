"""``topics.json`` written from per-topic cached JSON: after any mix of creates, updates (new
objects and in-place changes such as the order flag), deletes and reloads, the file parses to
exactly the table in memory — computed here from each ``TopicConfig.to_json()`` — and a fresh
manager reads it back whole; the previous version stays as ``.bak``."""
from __future__ import annotations

import json
import os
import random

import pytest

from rocketstore.broker.state.topics import TopicConfig, TopicConfigManager


def expected(m: TopicConfigManager) -> dict:
    return {t.topic_name: t.to_json() for t in m.topics()}


def on_disk(m: TopicConfigManager) -> dict:
    with open(m.path, encoding="utf-8") as fh:
        data = json.load(fh)
    assert data["dataVersion"]["counter"] == m.data_version
    return data["topicConfigTable"]


def test_the_file_always_equals_the_table(tmp_path):
    rnd = random.Random(7)
    m = TopicConfigManager(str(tmp_path))
    for step in range(300):
        names = [t.topic_name for t in m.topics() if t.topic_name != m.DEFAULT_TOPIC]
        op = rnd.random()
        if op < 0.5 or not names:
            m.create(f"T{step}-%|x", rnd.randint(1, 16))
        elif op < 0.7:
            old = m.get(rnd.choice(names))
            m.update(TopicConfig(old.topic_name, old.read_queue_nums, rnd.randint(1, 16), 6))
        elif op < 0.85:
            m.update_order_topics({n for n in names if rnd.random() < 0.3})  # in place
        else:
            m.delete(rnd.choice(names))
        if step % 25 == 0:
            m.persist()
            assert on_disk(m) == expected(m)
    m.persist()
    assert on_disk(m) == expected(m)
    again = TopicConfigManager(str(tmp_path))
    assert expected(again) == expected(m) and again.data_version == m.data_version
    assert json.load(open(m.path + ".bak", encoding="utf-8"))["topicConfigTable"]


def test_a_change_appends_a_line_not_the_whole_file(tmp_path):
    m = TopicConfigManager(str(tmp_path))
    m.persist()
    inode = os.stat(m.path).st_ino
    for i in range(50):
        m.create(f"J{i}", 8)
    m.update(TopicConfig("J3", 8, 2, 6))
    m.delete("J7")
    assert os.stat(m.path).st_ino == inode  # topics.json itself not rewritten
    with open(m.journal_path, encoding="utf-8") as fh:
        assert len(fh.read().splitlines()) == 52
    again = TopicConfigManager(str(tmp_path))  # the file + the journal, replayed
    assert expected(again) == expected(m) and again.data_version == m.data_version
    assert again.get("J3").write_queue_nums == 2 and again.get("J7") is None
    m.persist()  # the whole table in the file; the journal goes
    assert not os.path.exists(m.journal_path) and on_disk(m) == expected(m)


def test_a_torn_last_journal_line_is_ignored_and_a_damaged_one_is_an_error(tmp_path):
    m = TopicConfigManager(str(tmp_path))
    m.create("A", 4)
    m.create("B", 4)
    with open(m.journal_path, "ab") as fh:
        fh.write(b'{"c": 99, "t": "C", "v": {"topicNa')  # a crash mid-append
    again = TopicConfigManager(str(tmp_path))
    assert again.get("A") and again.get("B") and again.get("C") is None
    with open(m.journal_path, "r+b") as fh:
        fh.write(b"garbage\n")  # the first line damaged, lines after it: not a torn tail
    with pytest.raises(ValueError, match="changes"):
        TopicConfigManager(str(tmp_path))


def test_the_journal_is_compacted_when_it_outgrows_half_the_table(tmp_path, monkeypatch):
    from rocketstore.broker.state import topics as mod
    monkeypatch.setattr(mod, "JOURNAL_MIN_LINES", 10)
    m = TopicConfigManager(str(tmp_path))
    rewrites = 0
    for i in range(200):
        before = os.path.exists(m.path) and os.stat(m.path).st_ino
        m.create(f"K{i}", 8)
        rewrites += before != (os.path.exists(m.path) and os.stat(m.path).st_ino)
    # compaction after > max(10, n/2) lines: the table doubles between rewrites
    assert 3 <= rewrites <= 8, rewrites
    assert expected(TopicConfigManager(str(tmp_path))) == expected(m)
