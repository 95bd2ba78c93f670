"""``spark.read.format("rocketmq").load(<posix tier base>)``: the file source's rows."""
from __future__ import annotations

import glob
import os

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore

SKIP = ("commitlog_offset", "msg_id")  # the tier's own: offsets in the queue's flat COMMIT_LOG


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiered")
    t = TierConfig(file_path=str(tmp / "tier"), broker_cluster_name="SparkC", broker_name="sb",
                   commitlog_max_size=3000, consume_queue_max_size=400, group_commit_timeout=20)
    cfg = StoreConfig(store_path_root_dir=str(tmp / "store"), mapped_file_size_commitlog=1 << 20,
                      tier=t, timer_wheel_enable=False)
    with MessageStore(cfg) as s:
        for i in range(150):
            m = Message("SparkA" if i % 3 else "SparkB", b"b%04d" % i + b"z" * (i % 50),
                        tags=f"t{i % 4}", keys=[f"k{i}", "all"], queue_id=(i // 3) % 3,
                        properties={"p": str(i)})
            assert s.put_message(m).ok
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
    return str(tmp / "store"), str(tmp / "tier")


def _rows(df):
    cols = [c for c in df.columns if c not in SKIP]
    return sorted(tuple(r[c] if not isinstance(r[c], dict) else sorted(r[c].items()) for c in cols)
                  for r in df.select(*cols).collect())


def test_tier_rows_are_the_file_source_rows(spark, tiered):
    store, tier = tiered
    t = spark.read.format("rocketmq").load(tier)
    f = spark.read.format("rocketmq").load(store)
    assert t.columns == f.columns
    segs = glob.glob(os.path.join(tier, "*", "sb", "*", "*", "COMMIT_LOG", "*"))
    assert t.rdd.getNumPartitions() == len(segs) > 6  # one per flat COMMIT_LOG segment
    got, want = _rows(t), _rows(f)
    assert len(got) == 150 and got == want
    # commitlog_offset is the offset in the queue's flat file: each queue starts at 0
    firsts = t.where("queue_offset = 0").select("commitlog_offset").collect()
    assert [r[0] for r in firsts] == [0] * len(firsts) and len(firsts) == 6


def test_topic_and_queue_pushdown(spark, tiered):
    store, tier = tiered
    q = "topic = 'SparkA' AND queue_id IN (1, 2)"
    t = spark.read.format("rocketmq").load(tier).where(q)
    f = spark.read.format("rocketmq").load(store).where(q)
    assert _rows(t) == _rows(f) and len(_rows(t)) == f.count() > 0
    from rocketstore.spark.tier_source import TierReader
    from pyspark.sql.datasource import EqualTo, In
    from pyspark.sql.types import StructType
    r = TierReader({"path": tier}, StructType.fromDDL("topic STRING, queue_id INT"))
    left = list(r.pushFilters([EqualTo(("topic",), "SparkA"), In(("queue_id",), (1, 2))]))
    assert left == []
    parts = r.partitions()
    assert parts and {(p.topic, p.queue_id) for p in parts} == {("SparkA", 1), ("SparkA", 2)}


def test_s3_tier_rows_are_the_file_source_rows(spark, tmp_path):
    from ..s3server import start_s3_server
    srv = start_s3_server(str(tmp_path / "s3root"), buckets=("bkt",))
    try:
        t = TierConfig(backend="s3", file_path="tiers/one", broker_cluster_name="SparkS3",
                       broker_name="sb3", commitlog_max_size=3000, group_commit_timeout=20,
                       object_store_endpoint=srv.endpoint, object_store_bucket="bkt",
                       object_store_access_key=srv.access_key,
                       object_store_secret_key=srv.secret_key)
        cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), tier=t,
                          mapped_file_size_commitlog=1 << 20, timer_wheel_enable=False)
        with MessageStore(cfg) as s:
            for i in range(60):
                assert s.put_message(Message("S3Spark", b"v%03d" % i, tags="x", keys=f"k{i}",
                                             queue_id=i % 2)).ok
            assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
        df = (spark.read.format("rocketmq").option("objectStoreEndpoint", srv.endpoint)
              .option("objectStoreAccessKey", srv.access_key)
              .option("objectStoreSecretKey", srv.secret_key).load("s3://bkt/tiers/one"))
        f = spark.read.format("rocketmq").load(str(tmp_path / "store"))
        got = _rows(df)
        assert len(got) == 60 and got == _rows(f)
        assert _rows(df.where("queue_id = 1")) == _rows(f.where("queue_id = 1"))
    finally:
        srv.stop()
