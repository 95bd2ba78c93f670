"""The network source and sink against a real cluster: a ``rocketstore namesrv`` and two
``rocketstore serve`` brokers registered at it (the test run's one local SparkSession)."""
from __future__ import annotations

import json
import os
import time

import pytest

from rocketstore.client import AdminClient, Producer, PullConsumer
from rocketstore.client._sync import LoopThread
from tests.cluster.conftest import start_cluster_broker, start_namesrv, wait_for

pytestmark = pytest.mark.spark
TOPIC = "NetOrders"


def _route_has(ns: str, topic: str, brokers: set[str]) -> bool:
    with PullConsumer("probe", ns) as c:
        try:
            return {q.broker_name for q in LoopThread.shared().run(
                c.instance.route(topic, refresh=True)).read_queues} >= brokers
        except Exception:
            return False


def _send(ns: str, topic: str, bodies, **kw) -> list:
    """Send, then wait until the name server routes the topic to every broker that got some."""
    with Producer("net-send", ns) as p:
        res = [p.send(topic, b, **kw) for b in bodies]
    want = {r.message_queue.broker_name for r in res}
    assert wait_for(lambda: _route_has(ns, topic, want))
    return res


def _pull_all(ns: str, topic: str) -> list:
    """Every message of ``topic`` via the plain client (the expected rows, computed without Spark)."""
    from rocketstore.errors import BrokerError
    out = []
    with PullConsumer("expect", ns) as c:
        try:
            route = LoopThread.shared().run(c.instance.route(topic, refresh=True))
        except BrokerError as exc:  # the broker that created it has not registered it yet
            if exc.code != 17:  # TOPIC_NOT_EXIST
                raise
            return out
        for mq in route.read_queues:
            off = 0
            while True:
                r = c.pull_from(mq, off, 32)
                if r.status != "FOUND":
                    break
                out.extend((mq.broker_name, m) for m in r.messages)
                off = r.next_begin_offset
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("netcluster")
    ns = start_namesrv()
    brokers = []
    try:
        for name in ("broker-a", "broker-b"):
            brokers.append(start_cluster_broker(str(root), ns.addr, name))
        with AdminClient(namesrv=ns.addr) as a:  # on both brokers up front, as an operator
            assert wait_for(lambda: len(a.brokers()) == 2)  # would: no auto-create race
            assert len(a.create_topic(TOPIC, 4, 4)) == 2
        assert wait_for(lambda: _route_has(ns.addr, TOPIC, {"broker-a", "broker-b"}))
        with Producer("net-pg", ns.addr) as p:
            for i in range(120):
                p.send(TOPIC, b"order-%d" % i, tags="even" if i % 2 == 0 else "odd",
                       keys=[f"o{i}", "all"], properties={"seq": str(i)})
            p.send("NetOther", b"other")
        assert wait_for(lambda: _route_has(ns.addr, TOPIC, {"broker-a", "broker-b"}))
        yield ns, brokers
    finally:
        for b in brokers:
            b.stop()
        ns.stop()


def _read(spark, ns, **opts):
    r = spark.read.format("rocketmq").option("namesrv", getattr(ns, "addr", ns))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


KEY_COLS = ["topic", "queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc",
            "flag", "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
            "reconsume_times", "prepared_transaction_offset", "tags", "tags_code", "keys",
            "uniq_key", "properties", "body", "msg_id"]


def _rows(df):
    return sorted(tuple(sorted(v.items()) if isinstance(v, dict) else
                        tuple(v) if isinstance(v, list) else v for v in r)
                  for r in df.select(*KEY_COLS).collect())


def test_batch_read_equals_file_source_of_each_broker(spark, cluster):
    ns, brokers = cluster
    net = _read(spark, ns, topic=TOPIC)
    assert net.schema == spark.read.format("rocketmq").load(brokers[0].store).schema
    files = None
    for b in brokers:  # the same messages, read from each broker's store files
        df = spark.read.format("rocketmq").load(b.store).filter(f"topic = '{TOPIC}'")
        files = df if files is None else files.unionByName(df)
    got, want = _rows(net), _rows(files)
    assert len(got) == 120 and got == want
    expected = {m.body for _, m in _pull_all(ns.addr, TOPIC)}
    assert {r[19] for r in got} == expected == {b"order-%d" % i for i in range(120)}


def test_offsets_tags_partitions_and_pattern(spark, cluster):
    ns, _ = cluster
    msgs = _pull_all(ns.addr, TOPIC)
    # tag filter: the broker filters by hash code, the reader by the exact tag
    odd = _read(spark, ns, topic=TOPIC, tags="odd").select("body").collect()
    assert sorted(r.body for r in odd) == sorted(m.body for _, m in msgs if m.tags == "odd")
    # minPartitions splits queue ranges; the rows are the same
    df = _read(spark, ns, topic=TOPIC, minPartitions=24, pullBatchSize=5)
    assert df.rdd.getNumPartitions() >= 24
    assert sorted(r.body for r in df.select("body").collect()) == sorted(m.body for _, m in msgs)
    # JSON offsets per queue: [2, 5) of broker-a:0, nothing from queues set to latest
    queues = {(b, m.queue_id) for b, m in msgs}
    start = {TOPIC: {f"{b}:{q}": -1 for b, q in queues}}
    end = {TOPIC: {f"{b}:{q}": -1 for b, q in queues}}
    start[TOPIC]["broker-a:0"], end[TOPIC]["broker-a:0"] = 2, 5
    got = _read(spark, ns, topic=TOPIC, startingOffsets=json.dumps(start),
                endingOffsets=json.dumps(end)).select("queue_offset", "body").collect()
    want = sorted((m.queue_offset, m.body) for b, m in msgs
                  if b == "broker-a" and m.queue_id == 0 and 2 <= m.queue_offset < 5)
    assert sorted((r.queue_offset, r.body) for r in got) == want and len(want) == 3
    assert _read(spark, ns, topic=TOPIC, startingOffsets="latest").count() == 0
    # topicPattern: a full match over the cluster's topics, system topics left out
    topics = {r.topic for r in _read(spark, ns, topicPattern="Net.*").select("topic").collect()}
    assert topics == {TOPIC, "NetOther"}
    assert _read(spark, ns, topicPattern="Other").count() == 0


def test_timestamps(spark, cluster):
    ns, _ = cluster
    _send(ns.addr, "NetTimes", [b"early-%d" % i for i in range(6)])
    time.sleep(0.05)
    cut = int(time.time() * 1000) + 1
    time.sleep(0.05)
    _send(ns.addr, "NetTimes", [b"late-%d" % i for i in range(6)])
    msgs = [m for _, m in _pull_all(ns.addr, "NetTimes")]
    late = sorted(m.body for m in msgs if m.store_timestamp >= cut)
    assert late == sorted(b"late-%d" % i for i in range(6))
    got = _read(spark, ns, topic="NetTimes", startingTimestamp=cut).select("body").collect()
    assert sorted(r.body for r in got) == late
    got = _read(spark, ns, topic="NetTimes", endingTimestamp=cut).select("body").collect()
    assert sorted(r.body for r in got) == sorted(m.body for m in msgs if m.store_timestamp < cut)


def test_bad_options_are_clear(spark, cluster):
    ns, _ = cluster
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError
    cases = [({"topic": TOPIC, "startingOffsets": "{nope"}, "startingOffsets"),
             ({"topic": TOPIC, "startingOffsets": json.dumps({TOPIC: {"broker-z:0": 1}})},
              "no queue broker-z:0"),
             ({}, "exactly one of option 'topic'"),
             ({"topic": "NoSuchTopicHere"}, "not found"),
             ({"topic": TOPIC, "startingTimestamp": "2026-01-01T00:00:00"}, "no time zone")]
    for opts, text in cases:
        with pytest.raises((PySparkException, Py4JJavaError)) as ei:
            _read(spark, ns, **opts).count()
        assert text in str(ei.value), (opts, str(ei.value)[-800:])


def test_commit_group(spark, cluster):
    ns, _ = cluster
    assert _read(spark, ns, topic=TOPIC, commitGroup="spark-progress").count() == 120
    with PullConsumer("spark-progress", ns.addr) as c:
        for mq in c.queues(TOPIC):
            assert c.committed_offset(TOPIC, mq.queue_id, broker_name=mq.broker_name) == \
                c.max_offset(TOPIC, mq.queue_id, broker_name=mq.broker_name)


def test_sink_batch_and_idempotency_key(spark, cluster):
    ns, _ = cluster
    src = spark.createDataFrame(
        [(f"row-{i}".encode(), f"k{i}", "T" if i % 2 else None, {"n": str(i)}, f"id-{i}")
         for i in range(40)],
        "body BINARY, keys STRING, tags STRING, properties MAP<STRING,STRING>, "
        "idempotencyKey STRING")
    for _ in range(2):  # a replay: the same rows again carry the same UNIQ_KEYs
        src.write.format("rocketmq").option("namesrv", ns.addr).option("topic", "NetSunk") \
            .mode("append").save()
    assert wait_for(lambda: len(_pull_all(ns.addr, "NetSunk")) == 80)
    msgs = [m for _, m in _pull_all(ns.addr, "NetSunk")]
    from rocketstore.spark.network_sink import uniq_key_for
    by_body = {}
    for m in msgs:
        by_body.setdefault(m.body, set()).add(m.properties["UNIQ_KEY"])
        i = int(m.body.split(b"-")[1])
        assert m.properties["n"] == str(i) and m.keys == [f"k{i}"]
        assert m.tags == ("T" if i % 2 else None)
    assert by_body == {f"row-{i}".encode(): {uniq_key_for("NetSunk", f"id-{i}")}
                       for i in range(40)}
    back = _read(spark, ns, topic="NetSunk").select("uniq_key", "msg_id").distinct()
    assert back.select("uniq_key").distinct().count() == 40
    # per-row topic and queue, broker pinned
    rows = spark.createDataFrame([("NetSunk2", b"x", 1, "broker-b")],
                                 "topic STRING, body BINARY, queue_id INT, broker_name STRING")
    _send(ns.addr, "NetSunk2", [b"first", b"second"])
    brokers_with = {b for b, _ in _pull_all(ns.addr, "NetSunk2")}
    target = sorted(brokers_with)[0]
    rows = rows.selectExpr("topic", "body", "queue_id", f"'{target}' AS broker_name")
    rows.write.format("rocketmq").option("namesrv", ns.addr).mode("append").save()
    got = [(b, m.queue_id) for b, m in _pull_all(ns.addr, "NetSunk2") if m.body == b"x"]
    assert got == [(target, 1)]


def test_sink_rejects_bad_frames(spark, cluster):
    ns, _ = cluster
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError
    for ddl, opts, text in [("body BINARY, colour STRING", {"topic": "T"}, "unknown column"),
                            ("keys STRING", {"topic": "T"}, "'body' column"),
                            ("body BINARY", {}, "'topic' column")]:
        df = spark.createDataFrame([], ddl)
        w = df.write.format("rocketmq").option("namesrv", ns.addr).mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        with pytest.raises((PySparkException, Py4JJavaError)) as ei:
            w.save()
        assert text in str(ei.value)


def test_stream_offsets_new_topics_and_max_offsets(spark, cluster, tmp_path):
    """A pattern stream into a parquet sink: every message exactly once across restarts of the
    query, a topic created between runs joins, maxOffsetsPerTrigger caps each batch."""
    ns, _ = cluster
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run_once():
        q = (spark.readStream.format("rocketmq").option("namesrv", ns.addr)
             .option("topicPattern", "Stream.*").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 7).load()
             .select("topic", "body", "msg_id")
             .writeStream.format("parquet").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(out))
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()
        return q

    _send(ns.addr, "StreamA", [b"a-%d" % i for i in range(20)])
    q = run_once()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 20 and max(sizes) <= 7
    _send(ns.addr, "StreamA", [b"a-%d" % i for i in range(20, 30)])
    _send(ns.addr, "StreamB", [b"b-%d" % i for i in range(5)])
    run_once()
    got = sorted(r.body for r in spark.read.parquet(out).collect())
    assert got == sorted([b"a-%d" % i for i in range(30)] + [b"b-%d" % i for i in range(5)])
    offsets = sorted(os.listdir(os.path.join(ck, "offsets")))
    last = open(os.path.join(ck, "offsets", offsets[-1])).read().splitlines()[-1]
    assert set(json.loads(last)) == {"StreamA", "StreamB"}


def test_data_loss_fails_loudly_or_skips(spark, tmp_path):
    """Offsets the broker's retention deleted: DataLossError, or skipped with
    failOnDataLoss=false — batch and streaming, as Spark's Kafka source."""
    from tests.broker.conftest import start_server
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    srv = start_server(str(tmp_path / "s"), "-o", "mapped_file_size_commitlog=4096",
                       "-o", "mapped_file_size_consume_queue=200", "-o", "file_reserved_time=0",
                       "-o", f"delete_when={every_hour}", "-o", "clean_resource_interval=100")
    try:
        ns = srv.namesrv
        from rocketstore.client import ClientInstance
        from rocketstore.remoting.codes import RequestCode
        ci = ClientInstance(ns)
        LoopThread.shared().run(ci.invoke(srv.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                          {"topic": "Lossy", "readQueueNums": 1,
                                           "writeQueueNums": 1, "perm": 6}))
        ci.close()
        with Producer("loss-pg", ns) as p:
            for i in range(10):
                p.send("Lossy", b"early-%03d" % i + b"." * 100)
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

        def stream(**opts):
            r = (spark.readStream.format("rocketmq").option("namesrv", ns)
                 .option("topic", "Lossy").option("startingOffsets", "earliest"))
            for k, v in opts.items():
                r = r.option(k, v)
            q = (r.load().select("queue_offset", "body").writeStream.format("parquet")
                 .option("checkpointLocation", ck).trigger(availableNow=True).start(out))
            try:
                q.awaitTermination(180)
            except Exception as exc:  # the query failed: StreamingQueryException
                return str(exc)
            return None if q.exception() is None else str(q.exception())

        assert stream() is None
        assert spark.read.parquet(out).count() == 10
        with Producer("loss-pg", ns) as p:
            for i in range(10, 250):
                p.send("Lossy", b"late-%03d" % i + b"." * 100)
        with PullConsumer("loss-cg", ns) as c:
            assert wait_for(lambda: c.min_offset("Lossy", 0) > 10, timeout=60)
            err = stream()
            assert err is not None and "were deleted" in err and "failOnDataLoss" in err
            lo = c.min_offset("Lossy", 0)
            hi = c.max_offset("Lossy", 0)
            assert stream(failOnDataLoss="false") is None
            got = sorted(r.queue_offset for r in spark.read.parquet(out).collect())
            # the first 10 rows, then everything from where the broker still had data
            assert got[:10] == list(range(10)) and got[-1] == hi - 1 and len(got) >= 10
            assert min(got[10:]) >= 10 and set(range(max(lo, got[10]), hi)) <= set(got)
            # batch: an explicit start below the oldest offset
            spec = json.dumps({"Lossy": {"broker-a:0": 0}})
            from pyspark.errors import PySparkException
            from py4j.protocol import Py4JJavaError
            with pytest.raises((PySparkException, Py4JJavaError)) as ei:
                _read(spark, ns, topic="Lossy", startingOffsets=spec).count()
            assert "were deleted" in str(ei.value)
            lo = c.min_offset("Lossy", 0)
            n = _read(spark, ns, topic="Lossy", startingOffsets=spec,
                      failOnDataLoss="false").count()
            assert n == hi - lo or n == hi - c.min_offset("Lossy", 0)
    finally:
        srv.stop()


@pytest.mark.timeout(600)
def test_java_name_server_and_broker_beside_ours(spark, tmp_path):
    """RocketMQ 4.9.7's name server with its own broker and a ``serve`` broker registered: the
    source reads both (the Java broker answers at most 32 messages a pull), the sink writes."""
    from tests.cluster.java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv
    home = rocketmq_home()
    jns = start_java_namesrv(home, str(tmp_path / "jns"))
    started = []
    try:
        started.append(start_java_broker(home, str(tmp_path / "jb"), jns.addr, "broker-java"))
        started.append(start_cluster_broker(str(tmp_path), jns.addr, "broker-py"))
        assert wait_for(lambda: _route_has(jns.addr, "TBW102", {"broker-java", "broker-py"}),
                        timeout=60)
        # the topic on both brokers: created by an admin request to each
        from rocketstore.client import ClientInstance
        from rocketstore.remoting.codes import RequestCode
        ci = ClientInstance(jns.addr)
        for addr in (started[0].addr, started[1].broker):
            LoopThread.shared().run(ci.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                              {"topic": "Mixed", "readQueueNums": 2,
                                               "writeQueueNums": 2, "perm": 6,
                                               "topicFilterType": "SINGLE_TAG"}))
        ci.close()
        assert wait_for(lambda: _route_has(jns.addr, "Mixed", {"broker-java", "broker-py"}),
                        timeout=60)
        _send(jns.addr, "Mixed", [b"mixed-%d" % i for i in range(150)], tags="t")
        want = sorted((b, m.body) for b, m in _pull_all(jns.addr, "Mixed"))
        assert {b for b, _ in want} == {"broker-java", "broker-py"} and len(want) == 150
        df = _read(spark, jns.addr, topic="Mixed", pullBatchSize=64)
        got = sorted((r.store_host, r.body) for r in df.select("store_host", "body").collect())
        host = {"broker-java": started[0].addr, "broker-py": started[1].broker}
        assert got == sorted((host[b], body) for b, body in want)
        src = spark.createDataFrame([(f"j-{i}",) for i in range(20)], "body STRING")
        src.write.format("rocketmq").option("namesrv", jns.addr).option("topic", "Mixed") \
            .mode("append").save()
        assert wait_for(lambda: len(_pull_all(jns.addr, "Mixed")) == 170)
    finally:
        for p in reversed(started):
            p.stop()
        jns.stop()
