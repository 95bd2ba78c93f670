"""The sink's ``deliveryGuarantee=exactly-once`` against real brokers: RocketMQ transactions
underneath (``rocketstore.spark.sink_transactions``). Every test counts what a plain pull
consumer finds on the target topic, and compares it with the source rows it sent itself."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rocketstore.client import AdminClient, Producer, PullConsumer
from rocketstore.client._sync import LoopThread
from tests.cluster.conftest import start_cluster_broker, start_namesrv, wait_for

pytestmark = pytest.mark.spark
DRIVER = Path(__file__).with_name("eo_driver.py")
TXN_CONF = {"transactionTimeOut": 1000, "transactionCheckInterval": 500,
            "transactionCheckMax": 1000}


def txn_conf(path: Path) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in TXN_CONF.items()))
    return str(path)


def bodies_of(ns: str, topic: str) -> Counter:
    """Every message body of ``topic`` on every broker (plain pulls, no Spark)."""
    out: Counter = Counter()
    with PullConsumer("eo-expect", ns) as c:
        for mq in LoopThread.shared().run(c.instance.route(topic, refresh=True)).read_queues:
            off = 0
            while True:
                r = c.pull_from(mq, off, 32)
                if r.status != "FOUND":
                    break
                out.update(m.body for m in r.messages)
                off = r.next_begin_offset
    return out


def settled(ns: str, topic: str, want: int, quiet_s: float = 4.0, timeout: float = 90) -> Counter:
    """The target's bodies once ``want`` arrived (or the deadline passed) and nothing more came
    for ``quiet_s`` (the broker's checks of left-over halves have had their turn)."""
    deadline = time.monotonic() + timeout
    got = bodies_of(ns, topic)
    while sum(got.values()) < want and time.monotonic() < deadline:
        time.sleep(0.5)
        got = bodies_of(ns, topic)
    time.sleep(quiet_s)
    return bodies_of(ns, topic)


def create_topics(ns: str, brokers: int, *topics: str) -> None:
    with AdminClient(namesrv=ns) as a:
        assert wait_for(lambda: len(a.brokers()) == brokers)
        for t in topics:
            assert len(a.create_topic(t, 4, 4)) == brokers
    for t in topics:
        assert wait_for(lambda: _route_brokers(ns, t) == brokers)


def _route_brokers(ns: str, topic: str) -> int:
    with PullConsumer("probe", ns) as c:
        try:
            return len({q.broker_name for q in LoopThread.shared().run(
                c.instance.route(topic, refresh=True)).read_queues})
        except Exception:  # not registered yet
            return 0


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("eocluster")
    conf = txn_conf(root / "broker.conf")
    ns = start_namesrv()
    brokers = []
    try:
        for name in ("broker-a", "broker-b"):
            brokers.append(start_cluster_broker(str(root), ns.addr, name, "--config", conf))
        yield ns.addr
    finally:
        for b in brokers:
            b.stop()
        ns.stop()


def _write(df, ns, topic, **opts):
    w = df.write.format("rocketmq").option("namesrv", ns).option("topic", topic)
    for k, v in opts.items():
        w = w.option(k, v)
    w.mode("append").save()


def test_batch_write_commits_once_and_abort_delivers_nothing(spark, txn_cluster, tmp_path):
    ns = txn_cluster
    create_topics(ns, 2, "EoBatch", "EoAbort")
    rows = [(f"row-{i}",) for i in range(60)]
    df = spark.createDataFrame(rows, "body string").repartition(3)
    _write(df, ns, "EoBatch", deliveryGuarantee="exactly-once",
           checkpointLocation=str(tmp_path / "w1"))
    got = settled(ns, "EoBatch", 60)
    assert got == Counter(r[0].encode() for r in rows)
    # one task fails after the others sent their rows: nothing of that write is delivered
    bad = spark.createDataFrame([(f"ok-{i}",) for i in range(40)] + [(None,)], "body string")
    with pytest.raises(Exception, match="null body"):
        _write(bad.repartition(3), ns, "EoAbort", deliveryGuarantee="exactly-once",
               checkpointLocation=str(tmp_path / "w2"))
    assert sum(settled(ns, "EoAbort", 1, quiet_s=3, timeout=6).values()) == 0


def _send_source(ns: str, topic: str, n: int) -> Counter:
    with Producer("eo-src", ns) as p:
        for i in range(n):
            p.send(topic, b"src-%05d" % i)
    return Counter(b"src-%05d" % i for i in range(n))


def _run_driver(ns, ck, source, target, per_batch, guarantee="exactly-once", log=None,
                kill_at=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    env.pop("ROCKETSTORE_SPARK_EO_KILL_AT", None)
    if kill_at:
        env["ROCKETSTORE_SPARK_EO_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, str(DRIVER), ns, str(ck), source, target,
                             str(per_batch), guarantee], env=env, stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _drop_last_commit(ck: Path) -> None:
    commits = sorted((ck / "commits").iterdir(), key=lambda p: int(p.name)
                     if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    crc = ck / "commits" / f".{last.name}.crc"
    if crc.exists():
        crc.unlink()


@pytest.mark.timeout(600)
def test_replayed_micro_batch_is_not_delivered_twice(txn_cluster, tmp_path):
    """Spark's commit log loses the last batch (as a driver dying after the sink's commit):
    the batch runs again; exactly once delivers it once, at least once twice (the baseline)."""
    ns = txn_cluster
    create_topics(ns, 2, "EoReplaySrc", "EoReplayDst", "AloReplayDst")
    want = _send_source(ns, "EoReplaySrc", 50)
    for target, guarantee in (("EoReplayDst", "exactly-once"), ("AloReplayDst", "at-least-once")):
        ck = tmp_path / guarantee
        for _ in range(2):
            p = _run_driver(ns, ck, "EoReplaySrc", target, 1000, guarantee,
                            log=open(tmp_path / f"{guarantee}.log", "ab"))
            assert p.wait(timeout=240) == 0, (tmp_path / f"{guarantee}.log").read_text()[-3000:]
            _drop_last_commit(ck)
        got = settled(ns, target, 50 if guarantee == "exactly-once" else 100)
        if guarantee == "exactly-once":
            assert got == want
        else:
            assert got == Counter({b: 2 for b in want})


def _decisions(ck: Path) -> int:
    d = ck / "rocketmq-sink" / "committed"
    return len([p for p in d.iterdir() if p.suffix == ".json"]) if d.exists() else 0


@pytest.mark.timeout(900)
def test_driver_killed_at_random_points_every_row_exactly_once(txn_cluster, tmp_path):
    """SIGKILL of the whole driver (JVM, Python workers): right after a batch's decision and
    before any END_TRANSACTION, after its halves were sent but before the decision, and twice
    at a random moment once the query made progress; then the query runs to the end. Every
    source row is in the target exactly once."""
    ns = txn_cluster
    create_topics(ns, 2, "EoKillSrc", "EoKillDst")
    want = _send_source(ns, "EoKillSrc", 300)
    ck = tmp_path / "ck"
    log = open(tmp_path / "driver.log", "ab")
    seed = int(os.environ.get("EO_KILL_SEED", "0")) or random.randrange(1 << 30)
    rnd = random.Random(seed)
    kills = []
    for kill_at in ("decided:1", "sent:3", None, None):
        before = _decisions(ck)
        p = _run_driver(ns, ck, "EoKillSrc", "EoKillDst", 25, log=log, kill_at=kill_at)
        if kill_at is None:  # once this run decided a batch of its own, at a random moment
            assert wait_for(lambda: _decisions(ck) > before or p.poll() is not None,
                            timeout=240)
            delay = rnd.uniform(0.0, 3.0)
            time.sleep(delay)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            kills.append((f"random +{delay:.2f}s", _decisions(ck)))
        else:
            kills.append((kill_at, _decisions(ck)))
        p.wait(timeout=300)
        assert p.returncode == -signal.SIGKILL, (kill_at, p.returncode)
    assert _decisions(ck) >= 3
    p = _run_driver(ns, ck, "EoKillSrc", "EoKillDst", 25, log=log)
    assert p.wait(timeout=400) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    got = settled(ns, "EoKillDst", 300, quiet_s=5)
    missing, extra = want - got, got - want
    assert not missing and not extra, (f"seed {seed}, kills {kills}: missing "
                                       f"{sorted(missing)[:5]} ({sum(missing.values())}), "
                                       f"extra {sorted(extra)[:5]} ({sum(extra.values())})")


@pytest.mark.interop
@pytest.mark.timeout(900)
@pytest.mark.xfail(strict=True, reason="issue 35 open gap: after a driver killed between the "
                   "decision and END_TRANSACTION, RocketMQ 4.9.7's broker delivered rows of the "
                   "checked batch twice (its check re-puts the half and may ask again; each "
                   "COMMIT answer stores the message); ours delivers once")
def test_java_broker_exactly_once_batch_and_killed_stream(spark, tmp_path):
    """RocketMQ 4.9.7's own name server and broker (its transaction service, its checks): a
    batch write, and a stream whose driver dies right after a decision and once before one."""
    from rocketstore.client import ClientInstance
    from rocketstore.remoting.codes import RequestCode
    from tests.cluster.java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv
    home = rocketmq_home()
    jns = start_java_namesrv(home, str(tmp_path / "jns"))
    broker = None
    try:
        broker = start_java_broker(home, str(tmp_path / "jb"), jns.addr, "broker-java",
                                   extra=dict(TXN_CONF, transactionCheckInterval=1000))
        ci = ClientInstance(jns.addr)
        try:
            for t in ("JSrc", "JBatch", "JDst"):
                LoopThread.shared().run(ci.invoke(broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                  {"topic": t, "readQueueNums": 4,
                                                   "writeQueueNums": 4, "perm": 6,
                                                   "topicFilterType": "SINGLE_TAG"}))
        finally:
            ci.close()
        for t in ("JSrc", "JBatch", "JDst"):
            assert wait_for(lambda: _route_brokers(jns.addr, t) == 1, timeout=90)
        rows = [(f"jb-{i}",) for i in range(40)]
        _write(spark.createDataFrame(rows, "body string").repartition(2), jns.addr, "JBatch",
               deliveryGuarantee="exactly-once", checkpointLocation=str(tmp_path / "jw"))
        assert settled(jns.addr, "JBatch", 40) == Counter(r[0].encode() for r in rows)
        want = _send_source(jns.addr, "JSrc", 120)
        ck = tmp_path / "ck"
        log = open(tmp_path / "driver.log", "ab")
        for kill_at in ("decided:1", "sent:2"):
            p = _run_driver(jns.addr, ck, "JSrc", "JDst", 30, log=log, kill_at=kill_at)
            p.wait(timeout=300)
            assert p.returncode == -signal.SIGKILL, (kill_at, p.returncode,
                                                     (tmp_path / "driver.log").read_text()[-3000:])
        p = _run_driver(jns.addr, ck, "JSrc", "JDst", 30, log=log)
        assert p.wait(timeout=400) == 0, (tmp_path / "driver.log").read_text()[-3000:]
        got = settled(jns.addr, "JDst", 120, quiet_s=6)
        assert got == want, (sorted((want - got).items())[:5], sorted((got - want).items())[:5])
    finally:
        if broker is not None:
            broker.stop()
        jns.stop()
