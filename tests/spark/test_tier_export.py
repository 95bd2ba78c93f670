"""``rocketstore export`` of a tier: the rows a store's export gives for the same messages, both
equal to rows computed from what was sent."""
from __future__ import annotations

import time

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.spark.export_job import export
from rocketstore.store.message_store import MessageStore

pytestmark = pytest.mark.spark

COLS = ("topic", "queue_id", "queue_offset", "body", "tags", "keys", "properties", "date")


def test_export_of_a_tier_equals_export_of_the_store(spark, tmp_path):
    t = TierConfig(file_path=str(tmp_path / "tier"), broker_cluster_name="ExpC", broker_name="eb",
                   commitlog_max_size=3000, consume_queue_max_size=400, group_commit_timeout=20)
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=1 << 20,
                      tier=t, timer_wheel_enable=False)
    sent, next_qo = [], {}
    with MessageStore(cfg) as s:
        for i in range(90):
            topic, qid = ("ExpA" if i % 3 else "ExpB"), (i // 3) % 2
            body = b"e%04d" % i + b"q" * (i % 40)
            r = s.put_message(Message(topic, body, tags=f"t{i % 4}", keys=[f"k{i}"], queue_id=qid,
                                      properties={"n": str(i)}))
            assert r.ok
            qo = next_qo.get((topic, qid), 0)
            next_qo[(topic, qid)] = qo + 1
            sent.append((topic, qid, qo, body, f"t{i % 4}", [f"k{i}"], str(i)))
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
    day = time.strftime("%Y-%m-%d", time.gmtime())

    def rows(out):
        df = spark.read.parquet(str(out))
        return sorted((r.topic, r.queue_id, r.queue_offset, bytes(r.body), r.tags, list(r.keys),
                       dict(r.properties)["n"], r.date) for r in df.select(*COLS).collect())

    res = export(str(tmp_path / "tier"), str(tmp_path / "out-tier"), spark=spark,
                 max_records_per_trigger=20)  # per queue: availableNow goes on to the end
    assert (res.rows, res.batches) == (90, 2)
    export(str(tmp_path / "store"), str(tmp_path / "out-store"), spark=spark)
    expected = sorted(x + (day,) for x in sent)
    assert rows(tmp_path / "out-tier") == expected
    # and every other column is the store's export's, but the offsets that are the tier's own
    skip = {"commitlog_offset", "msg_id"}

    def full(out):
        df = spark.read.parquet(str(out))
        cols = sorted(c for c in df.columns if c not in skip)
        return sorted(tuple(sorted(r[c].items()) if isinstance(r[c], dict) else r[c] for c in cols)
                      for r in df.select(*cols).collect())
    assert full(tmp_path / "out-tier") == full(tmp_path / "out-store")
