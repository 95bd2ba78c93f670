"""The sink's ``deliveryGuarantee=exactly-once`` against real brokers: RocketMQ transactions
underneath (``rocketstore.spark.sink_transactions``). Every test counts what a plain pull
consumer finds on the target topic, and compares it with the source rows it sent itself."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
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


def test_task_halves_travel_small_and_list_every_half():
    """A task's commit message (``TaskHalves``) carries its halves as runs: a pickle round trip
    lists the same halves in the same order (with the rows of packed ones), single sends to one
    topic and broker share a run, and the pickle builds a few objects a run, not one a half (10,000 halves here)."""
    import pickle
    import pickletools
    import uuid
    from array import array

    from rocketstore.client.transaction import HalfRef
    from rocketstore.spark import sink_transactions as st
    t = st.TaskHalves("task", "batch")
    want = []
    for b in range(40):  # batches of 250 into two topics on two brokers
        topic, broker = f"T{b % 2}", f"broker-{b % 3}"
        refs = [HalfRef(b * 1000 + i, (b * 1000 + i) * 300, uuid.uuid4().hex.upper())
                for i in range(250)]
        t.add_run(topic, broker, b * 1000, array("q", [r.commitlog_offset for r in refs]),
                  [r.msg_id for r in refs])
        want += [st.Half(topic, broker, r.queue_offset, r.commitlog_offset, r.msg_id)
                 for r in refs]
    for i in range(5):  # single sends: one run
        t.add_one("T9", "broker-9", i, i * 7, f"ID{i}")
        want.append(st.Half("T9", "broker-9", i, i * 7, f"ID{i}"))
    t.add_one("T9", "broker-8", 9, 9, "ID9")
    want.append(st.Half("T9", "broker-8", 9, 9, "ID9"))
    for i in range(3):  # packed halves (a batch's rows each), after a plain one in the run
        t.add_one("T9", "broker-8", 10 + i, 100 * i, f"P{i}", rows=256 - i)
        want.append(st.Half("T9", "broker-8", 10 + i, 100 * i, f"P{i}", 256 - i))
    assert len(t.runs) == 40 + 2 and len(t) == len(want) == 10_009
    assert t.rows == 10_006 + 256 + 255 + 254
    back = pickle.loads(pickle.dumps(t))
    assert (back.task, back.batch, back.halves, back.rows) == ("task", "batch", want, t.rows)
    def objects(data: bytes) -> int:  # the objects an unpickling builds: calls and containers
        kinds = {"REDUCE", "NEWOBJ", "BUILD", "EMPTY_DICT", "EMPTY_LIST", "TUPLE", "TUPLE3"}
        return sum(op.name in kinds for op, _, _ in pickletools.genops(data))
    assert objects(pickle.dumps(want)) > 10_009  # a Half each (the form before runs)
    assert objects(pickle.dumps(t)) < 10 * len(t.runs)


def test_responder_exits_with_its_driver_or_its_state_directory(txn_cluster, tmp_path):
    """The responder follows the process named in ``owner``: it exits when that process ends,
    and when the state directory (``owner`` with it) is removed — no pid is no driver."""
    procs = []
    try:
        for gone in ("owner", "directory"):
            state = tmp_path / gone
            state.mkdir()
            owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            procs.append(owner)
            (state / "owner").write_text(str(owner.pid))
            r = subprocess.Popen([sys.executable, "-m", "rocketstore.spark.sink_transactions",
                                  str(state), f"PG_resp_{gone}", txn_cluster],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(r)
            time.sleep(3)
            assert r.poll() is None  # its driver lives: it stays
            if gone == "owner":
                owner.kill()
                owner.wait()
            else:
                import shutil
                shutil.rmtree(state)
            assert r.wait(timeout=30) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


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


def test_rows_sharing_an_idempotency_key_are_delivered_once(spark, txn_cluster, tmp_path):
    """Rows that carry the caller's UNIQ_KEY (an ``idempotencyKey`` column) count as one row
    across exactly-once writes into our broker: the second write's rows whose keys the first
    delivered are not delivered again (the sink sends such rows as one half message each, not
    packed: the broker decides each key on its own). One broker and queue (pinned columns),
    where the broker's decisions are one memory."""
    ns = txn_cluster
    create_topics(ns, 2, "EoIdem")

    def write(keys: str) -> None:
        df = spark.createDataFrame([(k, f"body-{k}", "broker-a", 1) for k in keys],
                                   "idempotencyKey string, body string, broker_name string, "
                                   "queue_id int").repartition(2)
        _write(df, ns, "EoIdem", deliveryGuarantee="exactly-once",
               checkpointLocation=str(tmp_path / "ck"))
    write("abc")
    write("bcde")
    got = settled(ns, "EoIdem", 5)
    assert got == Counter(f"body-{k}".encode() for k in "abcde")


def _send_source(ns: str, topic: str, n: int) -> Counter:
    with Producer("eo-src", ns) as p:
        for i in range(n):
            p.send(topic, b"src-%05d" % i)
    return Counter(b"src-%05d" % i for i in range(n))


def _run_driver(ns, ck, source, target, per_batch, guarantee="exactly-once", log=None,
                kill_at=None, stall_s=0.0):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    env.pop("ROCKETSTORE_SPARK_EO_KILL_AT", None)
    env.pop("ROCKETSTORE_SPARK_EO_STALL_AT", None)
    if kill_at:
        env["ROCKETSTORE_SPARK_EO_KILL_AT"] = kill_at
        if stall_s:
            env["ROCKETSTORE_SPARK_EO_STALL_AT"] = f"{kill_at}={stall_s}"
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


def _killed_stream(ns: str, tmp_path: Path, source: str, target: str, rows: int,
                   per_batch: int, plan: list, stall_s: float = 0.0,
                   decided_before: int = 3) -> None:
    """Copy ``rows`` source rows with the exactly-once sink, SIGKILLing the driver (its
    process group: the JVM; pyspark daemon's Python workers live on until the daemon notices)
    once per ``plan`` entry — a fault point (``decided:3`` = right after batch
    3's decision, before any END_TRANSACTION; ``sent:N`` = halves sent, no decision yet;
    ``ended:N`` = ended, not yet in Spark's commit log) or None (at a random moment once the
    run decided a batch of its own) — then running the query to the end. Every source row must
    be in the target exactly once. ``stall_s``: the Python worker that runs the commit where a
    fault point killed the driver outlives it by that long (then carries on: its
    END_TRANSACTIONs go out while the next driver and its responder run)."""
    want = _send_source(ns, source, rows)
    ck = tmp_path / f"ck-{target}"
    log = open(tmp_path / f"driver-{target}.log", "ab")
    seed = int(os.environ.get("EO_KILL_SEED", "0")) or random.randrange(1 << 30)
    rnd = random.Random(seed)
    kills = []
    for kill_at in plan:
        before = _decisions(ck)
        p = _run_driver(ns, ck, source, target, per_batch, log=log, kill_at=kill_at,
                        stall_s=stall_s)
        if kill_at is None:
            assert wait_for(lambda: _decisions(ck) > before or p.poll() is not None,
                            timeout=240)
            delay = rnd.uniform(0.0, 3.0)
            time.sleep(delay)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            kills.append((f"random +{delay:.2f}s", _decisions(ck)))
            if p.wait(timeout=300) == 0:
                break  # the run finished first: the final run below has nothing left
        else:
            kills.append((kill_at, _decisions(ck)))
        p.wait(timeout=300)
        assert p.returncode == -signal.SIGKILL, (seed, kill_at, p.returncode,
                                                 (tmp_path / f"driver-{target}.log")
                                                 .read_text()[-3000:])
    assert _decisions(ck) >= decided_before
    p = _run_driver(ns, ck, source, target, per_batch, log=log)
    assert p.wait(timeout=400) == 0, (tmp_path / f"driver-{target}.log").read_text()[-3000:]
    got = settled(ns, target, rows, quiet_s=5)
    missing, extra = want - got, got - want
    assert not missing and not extra, (f"seed {seed}, kills {kills}: missing "
                                       f"{sorted(missing)[:5]} ({sum(missing.values())}), "
                                       f"extra {sorted(extra)[:5]} ({sum(extra.values())})")


def _random_plan(n_points: int, n_timed: int, batches: int) -> list:
    """``n_points`` fault points (each kind once before any twice) at distinct random batches
    in increasing order — a killed run's successor starts at that batch, so a later point
    fires — then ``n_timed`` kills at random moments."""
    rnd = random.Random(int(os.environ.get("EO_KILL_SEED", "0")) or None)
    points = ["decided", "sent", "ended"]
    rnd.shuffle(points)
    at = sorted(rnd.sample(range(1, batches), n_points))
    return [f"{points[i % 3]}:{b}" for i, b in enumerate(at)] + [None] * n_timed


@pytest.mark.timeout(900)
def test_driver_killed_at_random_points_every_row_exactly_once(txn_cluster, tmp_path):
    """Our brokers (two): the driver killed at fault points of random batches and at random
    moments, then the query runs to the end: every source row in the target exactly once."""
    ns = txn_cluster
    create_topics(ns, 2, "EoKillSrc", "EoKillDst")
    _killed_stream(ns, tmp_path, "EoKillSrc", "EoKillDst", 300, 25, _random_plan(3, 1, 8))


@contextlib.contextmanager
def java_txn_broker(tmp_path: Path, version: str, topics: tuple, queues: int):
    """RocketMQ ``version``'s name server and one broker (checks every second), ``topics``
    created on it and routed; yields the name server's address."""
    from rocketstore.client import ClientInstance
    from rocketstore.remoting.codes import RequestCode
    from tests.cluster.java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv
    home = rocketmq_home(version)
    jns = start_java_namesrv(home, str(tmp_path / "jns"))
    broker = None
    try:
        broker = start_java_broker(home, str(tmp_path / "jb"), jns.addr, "broker-java",
                                   extra=dict(TXN_CONF, transactionCheckInterval=1000))
        ci = ClientInstance(jns.addr)
        try:
            for t in topics:
                LoopThread.shared().run(ci.invoke(broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                  {"topic": t, "readQueueNums": queues,
                                                   "writeQueueNums": queues, "perm": 6,
                                                   "topicFilterType": "SINGLE_TAG"}))
        finally:
            ci.close()
        for t in topics:
            assert wait_for(lambda: _route_brokers(jns.addr, t) == 1, timeout=90)
        yield jns.addr
    finally:
        if broker is not None:
            broker.stop()
        jns.stop()


@pytest.mark.interop
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_java_broker_exactly_once_batch_and_killed_stream(spark, tmp_path, version):
    """RocketMQ's own name server and broker (its transaction service, its checks, which
    re-put a half and ask again, so a half is often asked about after the driver ended it):
    a batch write, and a stream whose driver is killed at random points."""
    with java_txn_broker(tmp_path, version, ("JSrc", "JBatch", "JDst"), 4) as ns:
        if version == "4.9.7":  # the batch write's path is the stream's: once is enough
            rows = [(f"jb-{i}",) for i in range(40)]
            _write(spark.createDataFrame(rows, "body string").repartition(2), ns, "JBatch",
                   deliveryGuarantee="exactly-once", checkpointLocation=str(tmp_path / "jw"))
            assert settled(ns, "JBatch", 40) == Counter(r[0].encode() for r in rows)
        plan = _random_plan(2, 1, 4) if version == "4.9.7" else _random_plan(2, 0, 4)
        _killed_stream(ns, tmp_path, "JSrc", "JDst", 150, 30, plan)


def _rows_of_batch(ck: Path, batch: int) -> int:
    """How many source rows micro-batch ``batch`` read: its end offsets (Spark's offset log)
    less the previous batch's."""
    def ends(b: int) -> dict:
        if b < 0:
            return {}
        last = (ck / "offsets" / str(b)).read_text().strip().splitlines()[-1]
        return {(t, q): o for t, qs in json.loads(last).items() for q, o in qs.items()}
    now, before = ends(batch), ends(batch - 1)
    return sum(o - before.get(k, 0) for k, o in now.items())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", ["handed", "handed-ended"])
def test_stream_commit_hands_its_ends_to_the_responder_killed_around_them(txn_cluster, tmp_path,
                                                                           point):
    """A stream's commit leaves its END_TRANSACTIONs to the responder (they run beside the next
    micro-batch). The responder is SIGKILLed when batch 2 was handed to it: before it ends a
    half (``handed``), or after it ended them all but before it recorded so (``handed-ended``).
    The driver goes on and starts a new responder, which claims batch 2 but must not simply
    end it again (a second COMMIT of a half stores its row twice on RocketMQ's brokers): it
    commits only the halves whose rows the target lacks. Every row exactly once, and later
    batches were ended by the new responder."""
    ns = txn_cluster
    src, dst = f"EoHand{point.replace('-', '')}Src", f"EoHand{point.replace('-', '')}Dst"
    create_topics(ns, 2, src, dst)
    want = _send_source(ns, src, 150)
    ck = tmp_path / "ck"
    log_path = tmp_path / "driver.log"
    p = _run_driver(ns, ck, src, dst, 30, log=open(log_path, "ab"), kill_at=f"{point}:2")
    assert p.wait(timeout=300) == 0, log_path.read_text()[-3000:]
    assert settled(ns, dst, 150, quiet_s=5) == want
    state = ck / "rocketmq-sink"
    log = (state / "responder.log").read_text()
    assert log.count(" up\n") >= 2, log[-3000:]  # the killed responder, then a new one
    assert "batch 2 was handed to responder" in log, log[-3000:]
    # the new responder recovered batch 2: it committed exactly the halves whose rows the
    # target did not hold — all of them when the first died before its ENDs, none after
    got = re.findall(r"recovered batch 2: (\d+) rows in \d+ half messages committed \(0 not "
                     r"acknowledged\), (\d+) rows delivered already", log)
    assert len(got) == 1, log[-3000:]
    committed, held = map(int, got[0])
    assert committed + held == _rows_of_batch(ck, 2), log[-3000:]
    assert (committed, held)[point == "handed"] == 0, log[-3000:]
    # later batches were handed to and ended by the new responder (a new sink's first commit
    # ends its own halves: its responder is only starting)
    ended = set(re.findall(r"ended batch (\d+):", log))
    assert ended & {"3", "4"} and "2" not in ended, log[-3000:]
    # each of those left a stop record naming every task its decision delivers
    stops = [json.loads(f.read_text()) for f in (state / "settling").iterdir()]
    for b in ended:
        tasks = set(json.loads((state / "committed" / f"{b}.json").read_text())["tasks"])
        assert any(set(r.get("ended") or ()) == tasks for r in stops), (b, stops)


@pytest.mark.interop
@pytest.mark.timeout(600)
def test_java_broker_worker_outliving_its_killed_driver_delivers_once(tmp_path):
    """The driver JVM dies right after batch 1's decision; the Python worker that runs the
    commit (pyspark daemon's process group, not the JVM's) lives on for 45 s, then sends its
    END_TRANSACTION COMMITs. Meanwhile the next driver and its responder run, and RocketMQ
    5.3.3's check re-puts each of those halves and asks about the copy. The responder must
    wait for the live worker, then roll the copies back: a COMMIT for a copy stores each row a
    second time when the worker's END for the original lands."""
    with java_txn_broker(tmp_path, "5.3.3", ("OSrc", "ODst"), 2) as ns:
        # the stall outlasts the next driver's start-up (its responder must be up while the
        # worker stalls: 25 s did not always suffice on a loaded CI machine, whose Spark
        # start-up took about that long)
        _killed_stream(ns, tmp_path, "OSrc", "ODst", 90, 30, ["decided:1"], stall_s=45,
                       decided_before=2)
        state = tmp_path / "ck-ODst" / "rocketmq-sink"
        first = json.loads((state / "committed" / "1.json").read_text())["tasks"]
        log = (state / "responder.log").read_text()
        # the case happened: the broker asked about re-put copies of the halves the worker had
        # yet to end, and the responder held them off
        assert any(f"/1/{t}: UNKNOW" in log for t in first), log[-3000:]
