"""ACL credentials on the network source and sink (a ``rocketstore serve`` with
``aclEnable=true``), lag in a stream's progress, and the ``broker_name`` / ``user_properties``
columns with a copy job that does not carry the source's UNIQ_KEY."""
from __future__ import annotations

import json
import os
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
        with Producer("acl-pg", srv.namesrv, credentials=CREDS) as p:
            for i in range(30):
                p.send("AclSrc", b"acl-%d" % i)
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


def test_source_and_sink_sign_with_access_key(spark, acl_broker, tmp_path):
    ns = acl_broker.namesrv
    want = Counter(b"acl-%d" % i for i in range(30))

    def read(**opts):
        r = spark.read.format("rocketmq").option("namesrv", ns).option("topic", "AclSrc")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception) as ei:  # unsigned: the broker refuses
        read().count()
    assert SECRET not in str(ei.value)
    with pytest.raises(Exception) as ei:  # a wrong secret: refused, and never printed
        read(accessKey="sparkuser", secretKey="wrong-secret-77").count()
    assert "wrong-secret-77" not in str(ei.value)
    with pytest.raises(Exception, match="give both accessKey and secretKey"):
        read(accessKey="sparkuser").count()
    df = read(accessKey="sparkuser", secretKey=SECRET)
    assert Counter(r.body for r in df.select("body").collect()) == want
    plan = df._jdf.queryExecution().toString()
    assert SECRET not in plan
    for guarantee in ("at-least-once", "exactly-once"):
        target = "AclDst" + guarantee.replace("-", "")
        (df.select("body").write.format("rocketmq").option("namesrv", ns).option("topic", target)
         .option("accessKey", "sparkuser").option("secretKey", SECRET)
         .option("deliveryGuarantee", guarantee)
         .option("checkpointLocation", str(tmp_path / guarantee))
         if guarantee == "exactly-once" else
         df.select("body").write.format("rocketmq").option("namesrv", ns)
         .option("topic", target).option("accessKey", "sparkuser").option("secretKey", SECRET)
         ).mode("append").save()
        assert _acl_counts(ns, target) == want
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
    assert SECRET not in logs


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
