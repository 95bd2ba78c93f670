"""``spark.readStream.format("rocketmq").load(<tier>)`` follows a growing tier: every message
exactly once across micro-batches, a restart from the checkpoint and a second stream of
uploads; the rows are the file source's rows of the same store."""
from __future__ import annotations

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore

SKIP = ("commitlog_offset", "msg_id")  # the tier's own: offsets in the queue's flat COMMIT_LOG


def _put(store, start, n):
    for i in range(start, start + n):
        m = Message("StreamA" if i % 4 else "StreamB", b"s%05d" % i + b"q" * (i % 40),
                    tags=f"t{i % 3}", keys=f"k{i}", queue_id=i % 3)
        assert store.put_message(m).ok
    assert store.wait_dispatched(10) and store.tier.wait_caught_up(30)


def _rows(df):
    cols = sorted(c for c in df.columns if c not in SKIP)
    return sorted(tuple(r[c] if not isinstance(r[c], dict) else sorted(r[c].items()) for c in cols)
                  for r in df.select(*cols).collect())


def _run(spark, tier, out, ck, **opts):
    reader = spark.readStream.format("rocketmq")
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (reader.load(tier).writeStream.format("parquet").option("checkpointLocation", ck)
         .start(out))
    try:
        q.processAllAvailable()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    finally:
        q.stop()


def test_stream_follows_a_growing_tier_exactly_once(spark, tmp_path):
    tier = str(tmp_path / "tier")
    t = TierConfig(file_path=tier, broker_cluster_name="StreamC", broker_name="sb",
                   commitlog_max_size=2500, consume_queue_max_size=200, group_commit_timeout=20)
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), timer_wheel_enable=False,
                      mapped_file_size_commitlog=1 << 20, tier=t)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    with MessageStore(cfg) as s:
        _put(s, 0, 90)
        batches = _run(spark, tier, out, ck, topic="StreamA", maxRecordsPerTrigger=10)
        # 3 queues of StreamA, at most 10 of each per micro-batch: several batches
        assert len(batches) >= 2 and max(batches) <= 30, batches
        _put(s, 90, 60)  # more uploads; the same query resumes from its checkpoint
        _run(spark, tier, out, ck, topic="StreamA", maxRecordsPerTrigger=10)
    got = _rows(spark.read.parquet(out))
    want = _rows(spark.read.format("rocketmq").load(str(tmp_path / "store"))
                 .where("topic = 'StreamA'"))
    assert len(want) == sum(1 for i in range(150) if i % 4)
    assert got == want  # every message once: no gap, no duplicate across the restart


def test_stream_options_fail_loudly(spark, tmp_path):
    tier = str(tmp_path / "tier")
    t = TierConfig(file_path=tier, broker_cluster_name="StreamC", broker_name="sb",
                   group_commit_timeout=20)
    with MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"), tier=t,
                                  timer_wheel_enable=False)) as s:
        _put(s, 0, 3)
    with pytest.raises(Exception, match="maxRecordsPerTrigger"):
        _run(spark, tier, str(tmp_path / "o"), str(tmp_path / "c"), maxRecordPerTrigger=5)
    with pytest.raises(Exception, match="startingOffsets"):
        _run(spark, tier, str(tmp_path / "o2"), str(tmp_path / "c2"), startingOffsets="first")
