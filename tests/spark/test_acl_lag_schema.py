"""ACL credentials on the network source and sink (a ``rocketstore serve`` with
``aclEnable=true``), lag in a stream's progress, and the ``broker_name`` / ``user_properties``
columns with a copy job that does not carry the source's UNIQ_KEY."""
from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest

from rocketstore.client import Producer, SessionCredentials
from tests.broker.conftest import start_server
from tests.cluster.conftest import start_cluster_broker, start_namesrv

from .test_sink_exactly_once import TXN_CONF, bodies_of, create_topics, settled

pytestmark = pytest.mark.spark
SECRET = "s3cret-never-printed-42"
ACL_YML = f"""\
accounts:
  - accessKey: sparkuser
    secretKey: {SECRET}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
CREDS = SessionCredentials("sparkuser", SECRET)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("sparkacl")
    store = root / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    conf = root / "broker.conf"
    conf.write_text("aclEnable=true\n" + "".join(f"{k}={v}\n" for k, v in TXN_CONF.items()))
    srv = start_server(str(store), "--config", str(conf))
    try:
        yield srv
    finally:
        srv.stop()


def _acl_counts(ns: str, topic: str) -> Counter:
    from rocketstore.client import PullConsumer
    from rocketstore.client._sync import LoopThread
    out: Counter = Counter()
    with PullConsumer("acl-expect", ns, credentials=CREDS) as c:
        for mq in LoopThread.shared().run(c.instance.route(topic, refresh=True)).read_queues:
            off = 0
            while True:
                r = c.pull_from(mq, off, 32)
                if r.status != "FOUND":
                    break
                out.update(m.body for m in r.messages)
                off = r.next_begin_offset
    return out


def _acl_round_trip(spark, ns: str, tmp_path, prefix: str) -> None:
    """Source rows sent with the credentials; read unsigned, with a wrong secret, with half
    the credentials (each refused, the secret in no error), then read and written (both
    guarantees) with them: every row once in each target; the secret in no plan or log."""
    src = f"{prefix}AclSrc"
    with Producer("acl-pg", ns, credentials=CREDS) as p:
        for i in range(30):
            p.send(src, b"acl-%d" % i)
    want = Counter(b"acl-%d" % i for i in range(30))

    def read(**opts):
        r = spark.read.format("rocketmq").option("namesrv", ns).option("topic", src)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception) as ei:  # unsigned: the broker refuses
        read().count()
    assert SECRET not in str(ei.value)
    with pytest.raises(Exception) as ei:  # a wrong secret: refused, and never printed
        read(accessKey="sparkuser", secretKey="wrong-secret-77").count()
    text = str(ei.value)
    assert "wrong-secret-77" not in text and SECRET not in text
    assert "sparkuser" in text or "signature" in text.lower() or "acl" in text.lower(), text[:2000]
    with pytest.raises(Exception, match="give both accessKey and secretKey"):
        read(accessKey="sparkuser").count()
    df = read(accessKey="sparkuser", secretKey=SECRET)
    assert Counter(r.body for r in df.select("body").collect()) == want
    plan = df._jdf.queryExecution().toString()
    assert SECRET not in plan
    for guarantee in ("at-least-once", "exactly-once"):
        target = f"{prefix}AclDst" + guarantee.replace("-", "")
        w = (df.select("body").write.format("rocketmq").option("namesrv", ns)
             .option("topic", target).option("accessKey", "sparkuser").option("secretKey", SECRET)
             .option("deliveryGuarantee", guarantee))
        if guarantee == "exactly-once":
            w = w.option("checkpointLocation", str(tmp_path / guarantee))
        w.mode("append").save()
        got = _acl_counts(ns, target)
        deadline = time.monotonic() + 30  # exactly once: until the commits are visible
        while got != want and time.monotonic() < deadline:
            time.sleep(0.5)
            got = _acl_counts(ns, target)
        assert got == want
    with pytest.raises(Exception) as ei:  # the sink refuses a wrong secret just as clearly
        (df.select("body").write.format("rocketmq").option("namesrv", ns)
         .option("topic", f"{prefix}AclDstatleastonce").option("accessKey", "sparkuser")
         .option("secretKey", "wrong-secret-77").mode("append").save())
    assert "wrong-secret-77" not in str(ei.value) and SECRET not in str(ei.value)
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    assert SECRET not in logs and "wrong-secret-77" not in logs


def test_source_and_sink_sign_with_access_key(spark, acl_broker, tmp_path):
    _acl_round_trip(spark, acl_broker.namesrv, tmp_path, "")


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory):
    root = tmp_path_factory.mktemp("lagcluster")
    ns = start_namesrv()
    brokers = []
    try:
        for name in ("broker-a", "broker-b"):
            brokers.append(start_cluster_broker(str(root), ns.addr, name))
        create_topics(ns.addr, 2, "LagSrc", "CopyDst")
        with Producer("lag-pg", ns.addr) as p:
            for i in range(40):
                p.send("LagSrc", b"lag-%d" % i, keys=[f"k{i}"], tags="T",
                       properties={"seq": str(i)})
        yield ns.addr
    finally:
        for b in brokers:
            b.stop()
        ns.stop()


def test_progress_reports_latest_offsets_and_lag(spark, cluster2, tmp_path):
    from rocketstore.spark import lag
    q = (spark.readStream.format("rocketmq").option("namesrv", cluster2).option("topic", "LagSrc")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 10).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    progs = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(progs) == 4
    first = progs[0]["sources"][0]
    latest = json.loads(first["latestOffset"])
    assert sum(latest["LagSrc"].values()) == 40  # the brokers' ends, not the batch's
    behind = [lag(p)[0]["offsetsBehindLatest"] for p in progs]
    assert behind == [30, 20, 10, 0]
    one = lag(progs[0])[0]
    assert one["maxOffsetsBehindLatest"] == max(one["queues"].values())
    assert one["avgOffsetsBehindLatest"] == pytest.approx(30 / len(one["queues"]))


def test_lag_in_time_from_store_timestamps(spark, cluster2, tmp_path):
    """Two bursts 2 s apart; a stream reads 8 rows a batch: each batch's time behind, per
    queue, is the newest message's store time minus the first unread one's — computed here
    from a full read of the topic — and the last batch is 0 ms behind."""
    from rocketstore.client import PullConsumer
    from rocketstore.client._sync import LoopThread
    from rocketstore.spark import lag
    create_topics(cluster2, 2, "LagTime")
    with Producer("lagt-pg", cluster2) as p:
        for burst in range(2):
            for i in range(16):
                p.send("LagTime", b"t-%d-%d" % (burst, i))
            if burst == 0:
                time.sleep(2.0)
    stamps = {}  # "LagTime/broker:qid" -> [store timestamp by queue offset]
    with PullConsumer("lagt-expect", cluster2) as c:
        for mq in LoopThread.shared().run(c.instance.route("LagTime", refresh=True)).read_queues:
            r = c.pull_from(mq, 0, 32)
            stamps[f"LagTime/{mq.broker_name}:{mq.queue_id}"] = [
                m.store_timestamp for m in sorted(r.messages, key=lambda m: m.queue_offset)]
    q = (spark.readStream.format("rocketmq").option("namesrv", cluster2)
         .option("topic", "LagTime").option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", 8).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    progs = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(progs) == 4
    for prog in progs:
        end = json.loads(prog["sources"][0]["endOffset"])["LagTime"]
        want = {f"LagTime/{k}": (stamps[f"LagTime/{k}"][-1] - stamps[f"LagTime/{k}"][off]
                                 if off < len(stamps[f"LagTime/{k}"]) else 0)
                for k, off in end.items()}
        got = lag(prog, cluster2)[0]
        assert got["queuesMsBehindLatest"] == want
        assert got["maxMsBehindLatest"] == max(want.values())
    assert lag(progs[0], cluster2)[0]["maxMsBehindLatest"] >= 1500  # a burst 2 s later waits
    assert lag(progs[-1], cluster2)[0]["maxMsBehindLatest"] == 0
    assert "maxMsBehindLatest" not in lag(progs[0])[0]  # no name server: offsets only


def test_broker_name_user_properties_and_copy_without_uniq_key(spark, cluster2, tmp_path):
    ns = cluster2
    df = (spark.read.format("rocketmq").option("namesrv", ns).option("topic", "LagSrc").load())
    rows = df.select("broker_name", "queue_id", "properties", "user_properties", "uniq_key",
                     "body").collect()
    assert {r.broker_name for r in rows} == {"broker-a", "broker-b"}
    for r in rows:
        assert r.user_properties == {"seq": r.body.decode().split("-")[1]}
        assert "UNIQ_KEY" in r.properties and "KEYS" in r.properties
    # a copy job: the full properties column goes in, the source's UNIQ_KEY does not come out
    df.select("body", "keys", "tags", "properties").write.format("rocketmq") \
        .option("namesrv", ns).option("topic", "CopyDst").mode("append").save()
    copied = spark.read.format("rocketmq").option("namesrv", ns).option("topic", "CopyDst") \
        .load().select("uniq_key", "user_properties", "keys", "tags", "body").collect()
    src_uniq = {r.uniq_key for r in rows}
    assert len(copied) == 40 and not ({r.uniq_key for r in copied} & src_uniq)
    assert all(r.user_properties == {"seq": r.body.decode().split("-")[1]} and r.tags == "T"
               and r.keys == [f"k{r.body.decode().split('-')[1]}"] for r in copied)
    # a struct of properties with a reserved name is refused before anything is sent
    with pytest.raises(Exception, match="'UNIQ_KEY'.*reserved"):
        spark.sql("SELECT 'x' AS body, named_struct('UNIQ_KEY', 'abc', 'a', 'b') AS properties") \
            .write.format("rocketmq").option("namesrv", ns).option("topic", "CopyDst") \
            .mode("append").save()
    assert sum(bodies_of(ns, "CopyDst").values()) == 40


@pytest.mark.interop
@pytest.mark.timeout(600)
def test_source_and_sink_on_java_acl_broker(spark, tmp_path):
    """RocketMQ 4.9.7's own broker with ``aclEnable=true`` (its ``plain_acl.yml``): the source
    reads and both sinks write with accessKey/secretKey; a wrong secret is refused with an
    error that names the broker's refusal and never the secret; no secret in plans or logs."""
    import shutil

    from tests import referee
    from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv
    src = referee.home(referee.V4)  # skips with set-up's reason when the referee is missing
    home = tmp_path / "rmq-home"  # the broker reads $ROCKETMQ_HOME/conf/plain_acl.yml
    (home / "conf").mkdir(parents=True)
    for tool in ("namesrv", "broker"):
        shutil.copy2(os.path.join(src, tool), home / tool)
    os.symlink(os.path.join(src, "classpath"), home / "classpath")
    for name in os.listdir(os.path.join(src, "conf")):
        if name.startswith("logback"):
            shutil.copy2(os.path.join(src, "conf", name), home / "conf" / name)
    (home / "conf" / "plain_acl.yml").write_text(ACL_YML)
    jns = start_java_namesrv(str(home), str(tmp_path / "jns"))
    broker = None
    try:
        broker = start_java_broker(str(home), str(tmp_path / "jb"), jns.addr, "broker-java",
                                   extra=dict(TXN_CONF, aclEnable="true"))
        _acl_round_trip(spark, jns.addr, tmp_path / "spark", "J")  # our logs apart from Java's
    finally:
        if broker is not None:
            broker.stop()
        jns.stop()
