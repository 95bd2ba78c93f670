"""What a user ran into in the first week, each as real processes on real directories and
sockets: a typo that created a topic, a port that crashed the broker after touching its store,
errors in Python's words, a closed pipe, a slow refusal and an ``updatetopic`` that returned too
early."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from rocketstore.client import Producer
from rocketstore.client._sync import LoopThread
from rocketstore.client.transport import RemotingClient
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

from tests import referee
from tests.broker.conftest import start_server
from tests.cluster.java_rocketmq import start_java_namesrv

NO_ROUTE = "No topic route info in name server for the topic: "


def run(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                          text=True, timeout=timeout, input=stdin)


def raw(addr: str, code: int, fields: dict | None = None) -> RemotingCommand:
    async def go():
        c = RemotingClient(addr)
        await c.connect()
        try:
            return await c.invoke(RemotingCommand.request(code, fields, b""), 10)
        finally:
            c.close()
    return LoopThread.shared().run(go())


def topic_table(store: str) -> set[str]:
    """The topics a broker's topics.json (and its journal) holds, read after it stopped."""
    from rocketstore.broker.state.topics import TopicConfigManager
    return {t.topic_name for t in TopicConfigManager(os.path.join(store, "config")).topics()}


# -- 1. looking up a topic never creates it ------------------------------------------------------
def test_a_lookup_of_a_missing_topic_is_refused_and_creates_nothing(tmp_path):
    store = str(tmp_path / "store")
    srv = start_server(store)
    try:
        with Producer("PG", srv.namesrv) as p:  # a send still creates its topic (TBW102)
            p.send("Orders", b"one")
        c = run("consume", "--namesrv", srv.namesrv, "--topic", "Ordres")
        assert c.returncode == 1 and c.stdout == "", c.stdout + c.stderr
        assert c.stderr == ("error: topic Ordres does not exist (the name server has no route "
                            "for it; create it with `rocketstore updatetopic` or by sending to "
                            "it)\n"), c.stderr
        g = run("get", "--namesrv", srv.namesrv, "--topic", "Ordres", "--queue", "0",
                "--offset", "0")
        assert g.returncode == 1 and "topic Ordres does not exist" in g.stderr, g.stderr
        r = raw(srv.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Ordres"})
        assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, NO_ROUTE + "Ordres")
        t = run("topics", "--namesrv", srv.namesrv, "--json")
        names = {row["topic"] for row in json.loads(t.stdout)["topics"]}
        assert "Orders" in names and "Ordres" not in names, t.stdout
    finally:
        assert srv.stop() == 0, srv.log()
    tables = topic_table(store)
    assert "Orders" in tables and "Ordres" not in tables


@referee.skip_unless(referee.V4)
def test_rocketmq_answers_a_missing_topics_route_the_same_way(tmp_path):
    ns = start_java_namesrv(referee.home(referee.V4), str(tmp_path / "java"))
    try:
        r = raw(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Ordres"})
    finally:
        ns.stop()
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and r.remark.startswith(NO_ROUTE + "Ordres")


# -- 4. ports and sizes are checked before the store is touched ----------------------------------
def test_serve_refuses_a_bad_port_or_size_before_touching_the_store(tmp_path):
    conf = tmp_path / "broker.conf"
    cases = [(["--port", "99999"], "99999: a broker port is 3 to 65534"),
             (["--port", "-5"], "-5: a broker port is 3 to 65534"),
             (["--port", "65535"], "65535: a broker port is 3 to 65534 (its HA port is "
                                   "listenPort + 1"),
             (["--port", "0", "--namesrv-port", "70000"], "--namesrv-port: 70000: a port is 0 "
                                                          "to 65535"),
             (["--port", "0", "--grpc-port", "65536"], "grpcServerPort: 65536"),
             (["--config", str(conf)], "listenPort: 70000")]
    for args, expect in cases:
        conf.write_text("listenPort=70000\n")
        store = tmp_path / "store"
        p = run("serve", "--store", str(store), "--namesrv-port", "0", *args, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and expect in p.stderr, (args, p.stderr)
        assert not store.exists(), args  # nothing created, nothing marked unclean
    for line, key in (("mappedFileSizeCommitLog=99999999999", "mappedFileSizeCommitLog"),
                      ("haTransferBatchSize=0", "haTransferBatchSize"),
                      ("haMasterAddress=127.0.0.1:99999", "haMasterAddress"),
                      ("serverMaxConnections=-1", "serverMaxConnections")):
        conf.write_text(line + "\n")
        store = tmp_path / "store"
        p = run("serve", "--store", str(store), "--port", "0", "--namesrv-port", "0",
                "--config", str(conf), timeout=60)
        assert p.returncode == 2 and key in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not store.exists(), line


# -- 7. errors in the user's words ---------------------------------------------------------------
def test_errors_name_what_the_user_wrote(tmp_path):
    store = str(tmp_path / "s")
    assert run("put", "--store", store, "--topic", "T", "hello").returncode == 0
    for cmd in (["consume", "--topic", "T"], ["topics"], ["get", "--topic", "T", "--queue", "0",
                                                          "--offset", "0"]):
        p = run(*cmd, "--namesrv", "nonsense")
        assert p.returncode == 1, p.stderr
        assert p.stderr == ("error: name server address 'nonsense': want HOST:PORT with a port "
                            "1 to 65535, e.g. 127.0.0.1:9876\n"), (cmd, p.stderr)
    p = run("put", "--store", store, "--topic", "T", "--property", "TIMER_DELIVER_MS=tomorrow", "x")
    assert p.returncode == 1 and "invalid literal" not in p.stdout + p.stderr, p.stdout
    assert "TIMER_DELIVER_MS='tomorrow' is not a whole number of milliseconds" in p.stdout
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC\n")
    p = run("serve", "--store", str(tmp_path / "new"), "--config", str(conf), "--port", "0",
            "--namesrv-port", "0")
    assert p.returncode == 1 and not (tmp_path / "new").exists(), p.stderr
    assert p.stderr == "error: flushDiskType=SYNC (flush_disk_type): use ASYNC_FLUSH or SYNC_FLUSH\n"
    p = run("get", "--store", store, "--topic", "T", "--queue", "0", "--offset", "-5")
    assert p.returncode == 2 and "NO_MATCHED_LOGIC_QUEUE" not in p.stdout + p.stderr, p.stdout
    assert "error: Invalid value for '--offset': -5 is not in the range x>=0." in p.stderr


# -- 8. a closed pipe ends quietly ----------------------------------------------------------------
def test_a_reader_that_goes_away_ends_consume_and_get_quietly(tmp_path):
    store = str(tmp_path / "store")
    bodies = [f"m{i:04d}-" + "x" * 60 for i in range(3000)]  # far more than a pipe holds
    p = run("put", "--store", store, "--topic", "Piped", "--queue", "0",
            "-o", "mapped_file_size_commitlog=1048576", "-o", "mapped_file_size_consume_queue=20000",
            "-o", "max_hash_slot_num=1000", "-o", "max_index_num=4000", *bodies)
    assert p.returncode == 0, p.stderr
    srv = start_server(store)  # the store was written offline: its topic is served
    try:
        for cmd in (["consume", "--namesrv", srv.namesrv, "--topic", "Piped"],
                    ["consume", "--namesrv", srv.namesrv, "--topic", "Piped", "--json"]):
            proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", *cmd],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            first = proc.stdout.readline()
            proc.stdout.close()  # what `| head -1` does
            err = proc.stderr.read().decode()
            assert proc.wait(60) == 141 and err == "", (cmd, err)
            assert b"m0000-" in first
    finally:
        assert srv.stop() == 0, srv.log()


# -- 5. updatetopic answers once the name server knows the topic ---------------------------------
def test_updatetopic_returns_once_the_name_server_has_the_route(tmp_path):
    from rocketstore.client.admin import AdminClient
    from tests.ha.procs import start_namesrv

    ns = start_namesrv(str(tmp_path / "ns"))
    srv = start_server(str(tmp_path / "store"), "--namesrv", ns.addr)
    try:
        with AdminClient(namesrv=ns.addr) as admin:
            for i in range(3):
                admin.create_topic(f"Made{i}", 2, 2)
                r = raw(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"Made{i}"})
                assert r.code == ResponseCode.SUCCESS, r.remark  # at once, not ~1 s later
                assert json.loads(r.body)["queueDatas"][0]["writeQueueNums"] == 2
        c = run("consume", "--namesrv", ns.addr, "--topic", "Made0")
        assert c.returncode == 0 and c.stderr == "", c.stderr
    finally:
        assert srv.stop() == 0, srv.log()
        ns.stop()


# -- 9. the banner says what runs -------------------------------------------------------------------
def test_the_banner_names_the_writer_and_its_workers(tmp_path):
    import signal

    from tests.broker.conftest import free_port
    for workers, expect in (("2", " (writer + 1 worker process), "), ("3", " (writer + 2 worker "
                            "processes), "), ("1", " (one process), ")):
        proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                                 str(tmp_path / f"s{workers}"), "--port", str(free_port()),
                                 "--namesrv-port", "0", "--workers", workers,
                                 "-o", "mapped_file_size_commitlog=1048576"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            banner = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        assert banner.startswith("rocketstore broker on 127.0.0.1:") and expect in banner, banner


# -- 11. request-reply: the request is committed before shutdown returns --------------------------
def test_a_push_consumer_commits_what_it_consumed_before_shutdown(tmp_path):
    from rocketstore.client import PullConsumer, PushConsumer
    srv = start_server(str(tmp_path / "store"))
    ns = srv.namesrv
    try:
        with Producer("PG0", ns) as p:
            p.send("Service", b"warm-up", queue_id=0)  # the topic exists before the service
        for round_ in range(3):  # the README's example, as written there
            responder = Producer("Responder", ns).start()
            service = PushConsumer("Svc", ns, {"Service": "*"},
                                   lambda request_msg: responder.reply(request_msg, b"pong")
                                   or True).start()
            reply = Producer("PG", ns).start().request("Service", b"ping %d" % round_,
                                                       timeout_s=15)
            assert reply.body == b"pong"
            service.shutdown()
            responder.shutdown()
            with PullConsumer("Svc", ns) as c:  # nothing left for the group
                left = {q.queue_id: c.max_offset("Service", q.queue_id)
                        - (c.committed_offset("Service", q.queue_id) or 0)
                        for q in c.queues("Service")}
            assert sum(left.values()) == 0, (round_, left)
    finally:
        assert srv.stop() == 0, srv.log()


# -- 10. rebuild refuses a live store before starting Spark ---------------------------------------
def test_rebuild_of_a_live_store_is_refused_before_spark_starts(tmp_path):
    import time
    store = str(tmp_path / "store")
    srv = start_server(store)
    try:
        with Producer("PG", srv.namesrv) as prod:
            prod.send("Live", b"x")
        t0 = time.monotonic()
        p = run("rebuild", "--store", store)  # the Spark engine, the default
        took = time.monotonic() - t0
    finally:
        assert srv.stop() == 0, srv.log()
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("error: ") and "open in another process" in p.stderr, p.stderr
    assert took < 5.0, f"{took:.1f} s: Spark was started first"


# -- 10. a normal Spark run prints no warnings of ours -------------------------------------------
SPARK_SCRIPT = r'''
import sys, time
from pyspark.sql import SparkSession
from rocketstore.spark import register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
register(spark)
store = sys.argv[1]
assert spark.read.format("rocketmq").load(store).count() == 3
q = (spark.readStream.format("rocketmq").option("startingOffsets", "earliest").load(store)
     .writeStream.format("memory").queryName("copy").start())
q.processAllAvailable()
assert spark.sql("select count(*) from copy").first()[0] == 3
q.stop()
if len(sys.argv) > 2:  # a sink batch in which one idempotencyKey comes with two bodies
    rows = spark.createDataFrame([("same", "one"), ("same", "two"), ("other", "three")],
                                 "idempotencyKey string, body string").coalesce(1)
    rows.write.format("rocketmq").option("namesrv", sys.argv[2]).option("topic", "Sunk") \
        .mode("append").save()
spark.stop()
print("done")
'''


def test_a_normal_spark_run_is_quiet_and_a_shared_sink_key_is_warned_about(tmp_path):
    import pytest
    pytest.importorskip("pyspark")
    store = str(tmp_path / "s")
    assert run("put", "--store", store, "--topic", "T", "a", "b", "c").returncode == 0
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_CONF_DIR", "ROCKETSTORE_SPARK_LOG")}  # Spark's own log settings
    env["PYSPARK_PYTHON"] = sys.executable  # as in an activated virtualenv
    srv = start_server(str(tmp_path / "broker"))
    try:
        p = subprocess.run([sys.executable, "-c", SPARK_SCRIPT, store, srv.namesrv],
                           capture_output=True, text=True, timeout=400, env=env)
    finally:
        assert srv.stop() == 0, srv.log()
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stdout + p.stderr
    for noise in ("replaced a statically registered data source", "Failed to cancel job group"):
        assert noise not in p.stderr, p.stderr
    assert ("rocketmq sink: 1 row(s) share an idempotencyKey with a row of the same batch whose "
            "body differs (e.g. 'same' in topic Sunk)") in p.stderr, p.stderr
