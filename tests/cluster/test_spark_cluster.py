"""Spark on a real standalone cluster (master + worker from pyspark's ``spark-class``; executors
in their own processes and directories) and through Spark Connect, against a RocketMQ cluster
of two ``rocketstore serve`` brokers. Drivers run as subprocesses."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from rocketstore import Message, MessageStore
from rocketstore.client import PullConsumer
from rocketstore.client._sync import LoopThread
from rocketstore.spark.network_sink import uniq_key_for
from tests.conftest import small_config

from .conftest import start_cluster_broker, start_namesrv, wait_for
from .spark_standalone import free_port, run_driver, spark_env, spark_home, start_standalone

pytestmark = pytest.mark.spark
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_driver.py")


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    pytest.importorskip("pyspark")
    from rocketstore.spark.session import SparkSetupError, check_java
    try:
        check_java()
    except SparkSetupError as exc:
        pytest.skip(str(exc))
    cl = start_standalone(str(tmp_path_factory.mktemp("standalone")))
    yield cl
    cl.stop()


@pytest.fixture
def rmq(tmp_path):
    ns = start_namesrv()
    brokers = []
    try:
        for name in ("broker-a", "broker-b"):
            brokers.append(start_cluster_broker(str(tmp_path / "brokers"), ns.addr, name))
        yield ns, brokers
    finally:
        for b in brokers:
            b.stop()
        ns.stop()


def _create_on_every_broker(ns: str, brokers: list, topic: str) -> None:
    """The topic on each broker (an admin request to each, as an operator's updateTopic -c), then
    wait until the name server routes it to all: sends that auto-create it could all land on the
    broker that created it first, and the source must read from both."""
    from rocketstore.client import ClientInstance
    from rocketstore.remoting.codes import RequestCode
    ci = ClientInstance(ns)
    try:
        for b in brokers:
            LoopThread.shared().run(ci.invoke(b.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                              {"topic": topic, "readQueueNums": 4,
                                               "writeQueueNums": 4, "perm": 6,
                                               "topicFilterType": "SINGLE_TAG"}))
    finally:
        ci.close()

    def routed():
        with PullConsumer("probe", ns) as c:
            try:
                r = LoopThread.shared().run(c.instance.route(topic, refresh=True))
            except Exception:
                return False
            return len({q.broker_name for q in r.read_queues}) == len(brokers)
    assert wait_for(routed)


def _send(ns: str, topic: str, bodies: list[bytes]) -> None:
    from rocketstore.client import Producer
    with Producer("cluster-test", ns) as p:
        res = [p.send(topic, b) for b in bodies]
    want = {r.message_queue.broker_name for r in res}

    def routed():
        with PullConsumer("probe", ns) as c:
            try:
                r = LoopThread.shared().run(c.instance.route(topic, refresh=True))
            except Exception:
                return False
            return {q.broker_name for q in r.read_queues} >= want
    assert wait_for(routed)


def _pull_all(ns: str, topic: str) -> list:
    out = []
    with PullConsumer("expect", ns) as c:
        for mq in LoopThread.shared().run(c.instance.route(topic, refresh=True)).read_queues:
            off = 0
            while True:
                r = c.pull_from(mq, off, 32)
                if r.status != "FOUND":
                    break
                out.extend(r.messages)
                off = r.next_begin_offset
    return out


def test_standalone_cluster(standalone, rmq, tmp_path):
    ns, brokers = rmq
    for topic in ("ClusterNet", "ClusterStream"):
        _create_on_every_broker(ns.addr, brokers, topic)
    _send(ns.addr, "ClusterNet", [b"net-%d" % i for i in range(40)])
    _send(ns.addr, "ClusterStream", [b"st-%d" % i for i in range(10)])
    with MessageStore(small_config(tmp_path / "store")) as store:
        for i in range(25):
            store.put_message(Message("FileTopic", b"f-%d" % i, keys=[f"k{i}"]))
    args = {"master": standalone.master_url, "namesrv": ns.addr, "store": "store",
            "topic": "ClusterNet", "sink_topic": "ClusterSunk", "stream_topic": "ClusterStream",
            "out": str(tmp_path / "stream-out"), "ck": str(tmp_path / "stream-ck")}
    env = spark_env(str(tmp_path))
    r = _driver_until_killed(dict(args, phase="cluster"), str(tmp_path), env,
                             os.path.join(args["ck"], "commits"))
    # executors are other processes in other directories: a relative path would not resolve
    driver_pid, driver_cwd = r["driver"]
    assert r["executors"] and all(pid != driver_pid and cwd != driver_cwd
                                  for pid, cwd in r["executors"])
    assert r["file_count"] == 25
    assert r["exported"] == 25 and r["export_out"] == str(tmp_path / "exported")
    assert r["net_bodies"] == sorted("net-%d" % i for i in range(40))
    assert r["net_brokers"] == sorted(b.broker for b in brokers)
    sunk = _pull_all(ns.addr, "ClusterSunk")
    assert sorted(m.body for m in sunk) == sorted(b"s-%d" % i for i in range(30))
    assert {m.properties["UNIQ_KEY"] for m in sunk} == {uniq_key_for("ClusterSunk", f"id-{i}")
                                                        for i in range(30)}
    # the first driver was killed mid-stream; a new one finishes from the checkpoint, and
    # every message is in the sink exactly once (more were sent meanwhile)
    _send(ns.addr, "ClusterStream", [b"st-%d" % i for i in range(10, 16)])
    r2 = run_driver(DRIVER, dict(args, phase="restart"), cwd=str(tmp_path), env=env)
    assert r2["stream"] == sorted("st-%d" % i for i in range(16))


def _driver_until_killed(args: dict, cwd: str, env: dict, commits: str) -> dict:
    """Run the streaming driver; once it printed its RESULT and the stream committed a batch,
    SIGKILL it (and its JVM) — a crashed driver."""
    import json
    import sys
    p = subprocess.Popen([sys.executable, DRIVER, json.dumps(args)], cwd=cwd, env=env,
                         stdout=subprocess.PIPE, stderr=open(os.path.join(cwd, "driver.err"), "w"),
                         text=True, start_new_session=True)
    try:
        result = None
        for line in p.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
                break
        assert result is not None, open(os.path.join(cwd, "driver.err")).read()[-5000:]
        assert wait_for(lambda: os.path.isdir(commits) and len(os.listdir(commits)) >= 1,
                        timeout=240), open(os.path.join(cwd, "driver.err")).read()[-5000:]
        return result
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)


def _start_connect_server(master: str, workdir: str, env: dict) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = os.path.join(workdir, "connect.log")
    proc = subprocess.Popen(
        ["timeout", "900", os.path.join(spark_home(), "bin", "spark-submit"),
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--master", master, "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.cores.max=2",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
         "--conf", f"spark.pyspark.python={env['PYSPARK_PYTHON']}", "spark-internal"],
        env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Spark Connect server exited: {open(log).read()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError(f"Spark Connect server did not listen: {open(log).read()[-3000:]}")


def test_spark_connect(standalone, rmq, tmp_path):
    try:
        from pyspark.sql.connect.utils import check_dependencies
        check_dependencies()
    except ImportError as exc:
        pytest.skip(f"Spark Connect client dependencies missing: {exc}")
    ns, brokers = rmq
    _send(ns.addr, "ConnectNet", [b"net-%d" % i for i in range(12)])
    env = spark_env(str(tmp_path))
    proc, port = _start_connect_server(standalone.master_url, str(tmp_path), env)
    try:
        args = {"remote": f"sc://127.0.0.1:{port}", "namesrv": ns.addr, "topic": "ConnectNet",
                "sink_topic": "ConnectSunk", "phase": "connect"}
        r = run_driver(DRIVER, args, cwd=str(tmp_path), env=env)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert r["net_bodies"] == sorted("net-%d" % i for i in range(12))
    sunk = _pull_all(ns.addr, "ConnectSunk")
    assert sorted(m.body for m in sunk) == sorted(b"s-%d" % i for i in range(30))
