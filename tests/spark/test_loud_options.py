"""Options fail loudly (issue 35): an unknown option names the nearest known one, an option the
mode does not read is refused, the file stream reads ``topic`` and ``startingOffsets``, and an
offset past the end or a topic that does not exist is an error naming the topic."""
from __future__ import annotations

import json

import pytest

from rocketstore.client import AdminClient, Producer
from tests.cluster.conftest import start_cluster_broker, start_namesrv, wait_for

from .spark_stores import build_store
from .test_sink_exactly_once import create_topics

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("loud")
    ns = start_namesrv()
    b = start_cluster_broker(str(root), ns.addr, "broker-a")
    try:
        create_topics(ns.addr, 1, "LoudT")
        with Producer("loud-pg", ns.addr) as p:
            for i in range(12):
                p.send("LoudT", b"m%d" % i)
        yield ns.addr
    finally:
        b.stop()
        ns.stop()


def _net(spark, ns, **opts):
    r = spark.read.format("rocketmq").option("namesrv", ns)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _stream_error(df, tmp_path) -> str:
    with pytest.raises(Exception) as ei:
        import uuid
        q = (df.writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / f"ck-{uuid.uuid4().hex}"))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        if q.exception() is not None:
            raise Exception(str(q.exception()))
    return str(ei.value)


def test_unknown_options_name_the_nearest(spark, one_broker, tmp_path):
    with pytest.raises(Exception, match="(?i)unknown option 'startingOffset'.*'startingOffsets'"):
        _net(spark, one_broker, topic="LoudT", startingOffset="earliest").count()
    err = _stream_error(spark.readStream.format("rocketmq").option("namesrv", one_broker)
                        .option("topic", "LoudT").option("maxOffsetPerTrigger", 5).load(),
                        tmp_path)
    assert "'maxoffsetpertrigger'" in err.lower() and "'maxOffsetsPerTrigger'" in err, err[:2000]
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="(?i)unknown option 'deliveryGuarantees'.*'deliveryGuarantee'"):
        (df.write.format("rocketmq").option("namesrv", one_broker).option("topic", "LoudT")
         .option("deliveryGuarantees", "exactly-once").mode("append").save())
    with pytest.raises(Exception, match="(?i)unknown option 'checkCRC32'.*'checkCrc'"):
        spark.read.format("rocketmq").option("checkCRC32", "true").load(str(tmp_path)).count()


def test_options_of_the_other_mode_are_refused(spark, one_broker, tmp_path):
    with pytest.raises(Exception, match="maxOffsetsPerTrigger is for streaming"):
        _net(spark, one_broker, topic="LoudT", maxOffsetsPerTrigger=5).count()
    err = _stream_error(spark.readStream.format("rocketmq").option("namesrv", one_broker)
                        .option("topic", "LoudT").option("endingOffsets", "latest").load(),
                        tmp_path)
    assert "endingOffsets is for batch" in err, err[:2000]
    root = tmp_path / "s"
    build_store(root, n=20)
    with pytest.raises(Exception, match="maxFilesPerTrigger is for streaming"):
        spark.read.format("rocketmq").option("maxFilesPerTrigger", 1).load(str(root)).count()


def test_offset_past_the_end_and_missing_topic_name_the_topic(spark, one_broker, tmp_path):
    with pytest.raises(Exception, match=r"LoudT broker-a:0 offset 1000 is past the queue's end"):
        _net(spark, one_broker, topic="LoudT",
             startingOffsets=json.dumps({"LoudT": {"broker-a:0": 1000}})).count()
    with pytest.raises(Exception, match="NoSuchTopic"):
        _net(spark, one_broker, topic="NoSuchTopic").count()
    err = _stream_error(spark.readStream.format("rocketmq").option("namesrv", one_broker)
                        .option("topic", "NoSuchTopic").load(), tmp_path)
    assert "rocketmq stream: topic NoSuchTopic does not exist" in err, err[:2000]


def test_file_stream_reads_topic_and_starting_offsets(spark, tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=60)
    exp = built["expected"]
    offs = sorted(exp)
    start = offs[7]
    want = sorted(o for o in offs if o >= start and exp[o].topic == "TopicB")
    seen = []
    q = (spark.readStream.format("rocketmq").option("topic", "TopicB")
         .option("startingOffsets", str(start)).load(str(root))
         .writeStream.foreachBatch(lambda df, _: seen.extend(
             r.commitlog_offset for r in df.select("commitlog_offset").collect()))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert sorted(seen) == want and want
    end = max(o + exp[o].store_size for o in offs)
    err = _stream_error(spark.readStream.format("rocketmq")
                        .option("startingOffsets", str(end + 4096)).load(str(root)), tmp_path)
    assert "past the end of the CommitLog" in err, err[:2000]
    # a store whose topic list lacks the topic: named
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "topics.json").write_text(json.dumps(
        {"topicConfigTable": {t: {} for t in ("TopicA", "TopicB")}}))
    with pytest.raises(Exception, match="topic Nope does not exist in the store"):
        spark.read.format("rocketmq").option("topic", "Nope").load(str(root)).count()
    assert spark.read.format("rocketmq").option("topic", "TopicA").load(str(root)).count() == \
        sum(1 for m in exp.values() if m.topic == "TopicA")
