"""``topics.json`` written from per-topic cached JSON: after any mix of creates, updates (new
objects and in-place changes such as the order flag), deletes and reloads, the file parses to
exactly the table in memory — computed here from each ``TopicConfig.to_json()`` — and a fresh
manager reads it back whole; the previous version stays as ``.bak``."""
from __future__ import annotations

import json
import random

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
