"""Both ways at the broker level: RocketMQ 5.3.3's broker with
``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore`` (the
rocketmq-tiered-store jar of the referee home) serves consumers from a posix tier we wrote, its
own local store empty; and our broker serves a tier Java's broker wrote."""
from __future__ import annotations

import shutil

import pytest

from rocketstore.client import PullConsumer
from rocketstore.format.message import decode_message
from rocketstore.store.message_store import MessageStore

from ... import referee
from ...cluster.conftest import start_namesrv, wait_for
from ...cluster.java_rocketmq import start_java_broker
from ...ops.test_console_cluster import create_topic, route_brokers
from .test_tier_store import BROKER, CLUSTER, put, store_cfg
from .tierutil import local_records

PLUGIN = {"messageStorePlugIn": "org.apache.rocketmq.tieredstore.TieredMessageStore",
          "tieredBackendServiceProvider": "org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
          "tieredStorageLevel": "NOT_IN_DISK"}


def pull_all(c, topic, q):
    got, off = [], 0
    while True:
        r = c.pull(topic, q, off, 32)
        got += r.messages
        if r.status != "FOUND":
            return got
        off = r.next_begin_offset


@pytest.mark.timeout(300)
def test_java_broker_serves_a_tier_we_wrote(tmp_path):
    home = referee.home(referee.V5)
    with MessageStore(store_cfg(tmp_path)) as s:
        put(s, 60, queues=2)
        assert s.tier.wait_caught_up(30)
        want = {q: [(qo, decode_message(rec, 0)) for qo, rec, _ in local_records(s, "TierT", q)]
                for q in (0, 1)}
    jdir = tmp_path / "jb"
    (jdir / "store" / "config").mkdir(parents=True)  # its local store holds nothing
    shutil.copy(tmp_path / "store" / "config" / "tieredStoreMetadata.json",
                jdir / "store" / "config")
    ns = start_namesrv()
    b = None
    try:
        b = start_java_broker(home, str(jdir), ns.addr, BROKER, cluster=CLUSTER,
                              extra=dict(PLUGIN, tieredStoreFilePath=str(tmp_path / "tier")))
        create_topic(ns.addr, b.addr, "TierT", 2)
        assert wait_for(lambda: route_brokers(ns.addr, "TierT") == {BROKER}, timeout=60)
        with PullConsumer("tier-java-readers", ns.addr) as c:
            for q in (0, 1):
                got = pull_all(c, "TierT", q)
                assert [(m.queue_offset, m.body, m.keys, m.uniq_key) for m in got] == \
                    [(qo, m.body, m.keys, m.uniq_key) for qo, m in want[q]]
    finally:
        if b is not None:
            b.stop()
        ns.stop()


@pytest.mark.timeout(300)
def test_our_broker_serves_a_tier_java_wrote(tmp_path):
    from rocketstore.client import Producer

    from ...broker.conftest import start_server
    from .tierutil import tier_queue
    home = referee.home(referee.V5)
    tier = str(tmp_path / "tier")
    ns = start_namesrv()
    b = None
    try:
        b = start_java_broker(home, str(tmp_path / "jb"), ns.addr, "java-tier", cluster="JTier",
                              extra=dict(PLUGIN, tieredStoreFilePath=tier,
                                         tieredStoreGroupCommitCount=1,
                                         tieredStoreGroupCommitTimeout=100))
        create_topic(ns.addr, b.addr, "JTierT", 2)
        assert wait_for(lambda: route_brokers(ns.addr, "JTierT") == {"java-tier"}, timeout=60)
        with Producer("jtier-pg", ns.addr) as p:
            sent = [p.send("JTierT", b"java-%03d" % i + b"j" * (i % 29), keys=[f"jk{i}"],
                           queue_id=i % 2) for i in range(40)]
        assert all(s.status == "SEND_OK" for s in sent)
        # RocketMQ's dispatcher copies to the tier on its own schedule (rounds every 20 s)
        assert wait_for(lambda: all(len(tier_queue(tier, "JTier", "java-tier", "JTierT", q)[0]) == 20
                                    for q in (0, 1)), timeout=120)
    finally:
        if b is not None:
            b.stop()
        ns.stop()
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join(["brokerClusterName=JTier", "brokerName=java-tier",
                               *(f"{k}={v}" for k, v in PLUGIN.items()),
                               f"tieredStoreFilePath={tier}", ""]))
    srv = start_server(str(tmp_path / "ours"), "--config", str(conf))  # no local copy at all
    try:
        create_topic(srv.namesrv, srv.broker, "JTierT", 2)
        with PullConsumer("jtier-readers", srv.namesrv) as c:
            for q in (0, 1):
                got = pull_all(c, "JTierT", q)
                want = [s for s in sent if s.message_queue.queue_id == q]
                assert [m.uniq_key for m in got] == [s.msg_id for s in want]
                assert [m.body for m in got] == [b"java-%03d" % i + b"j" * (i % 29)
                                                 for i in range(q, 40, 2)]
                assert [m.queue_offset for m in got] == list(range(20))
    finally:
        assert srv.stop() == 0, srv.log()
