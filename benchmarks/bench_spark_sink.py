"""The ``rocketmq`` sink's two delivery guarantees side by side (issue 35 §6): rows/s of a
``df.write`` of N rows into one ``rocketstore serve`` broker, at least once (batched sends)
and exactly once (half messages in batches, the decision file, batched END_TRANSACTIONs: the
broker's ``transactionBatchEnable``).
Goal: exactly-once ≥ 0.7 × at-least-once. Beside them RocketMQ 4.9.7's own
``TransactionMQProducer`` (``benchmarks/java/TxnProducerBench.java``: ``--java-threads``
threads calling ``sendMessageInTransaction``, the local transaction answering COMMIT) sends
the same number of rows of the same size into the same broker (skipped with ``--no-java`` or
without the referee).

    .venv/bin/python benchmarks/bench_spark_sink.py --rows 50000 --json [--store small]

Spark ``local[2]``; each guarantee writes the same cached frame ``--repeat`` times, into its own
topic of 8 queues, alternating; the best run of each counts. Every run's rows are counted on the
broker afterwards (a plain pull), so a fast wrong answer cannot win.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from tests.spark.test_sink_exactly_once import bodies_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=256, help="body bytes")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--java-threads", type=int, default=16)
    ap.add_argument("--no-java", action="store_true")
    ap.add_argument("--no-txn-batch", action="store_true",
                    help="transactionBatchEnable=false: the per-row path RocketMQ's brokers get")
    ap.add_argument("--store", choices=("small", "default"), default="default",
                    help="default: serve's own sizes (1 GiB segments, 20 M entries), what a "
                    "user's broker runs; small: the tests' store (1 MiB CommitLog segments, "
                    "index files of 4,000 entries: a segment roll every ~2,500 rows)")
    ap.add_argument("--state-per-write", action="store_true",
                    help="each exactly-once write in a state directory of its own (so each "
                    "starts its own responder process); default: one for the run")
    ap.add_argument("--stream", type=int, default=0, metavar="B",
                    help="a stream of B micro-batches (--rows each, read from Parquet files, "
                    "two a batch) instead of batch writes; timed until every row is on the "
                    "broker (a stream's exactly-once END runs in the responder, beside the "
                    "next batch)")
    a = ap.parse_args()
    from tests.spark.test_sink_exactly_once import create_topics
    tmp = tempfile.mkdtemp(prefix="bench-sink-")
    srv = start_txn_broker(tmp, a.store, not a.no_txn_batch)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from rocketstore.spark.session import prepare_environment
    prepare_environment()
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstore.spark import register
    register(spark)
    out = {"rows": a.rows, "size": a.size, "txn_batch": not a.no_txn_batch, "store": a.store,
           "state_per_write": a.state_per_write,
           "runs": {}, "load_before": round(os.getloadavg()[0], 1)}
    try:
        if a.stream:
            return stream_runs(spark, srv, a, tmp, out)
        df = rows_frame(spark, a.rows, a.size).repartition(2).cache()
        df.count()
        for i in range(a.repeat):
            for g in ("at-least-once", "exactly-once"):
                topic = f"Bench{g.replace('-', '')}{i}"
                create_topics(srv.namesrv, 1, topic)
                w = (df.write.format("rocketmq").option("namesrv", srv.namesrv)
                     .option("topic", topic).option("deliveryGuarantee", g))
                if g == "exactly-once":  # one state directory for the run's writes, as a
                    # batch write without checkpointLocation has (one per producer group);
                    # --state-per-write: a new one each (a responder started per write)
                    w = w.option("checkpointLocation", os.path.join(
                        tmp, f"ck-{i}" if a.state_per_write else "ck"))
                t0 = time.perf_counter()
                w.mode("append").save()
                dt = time.perf_counter() - t0
                n = sum(bodies_of(srv.namesrv, topic).values())
                assert n == a.rows, (g, n)
                out["runs"].setdefault(g, []).append(round(a.rows / dt))
        # each exactly-once run against the at-least-once run just before it (the first pair
        # left out: Spark's warm-up): robust to a load that changes between runs
        summarize(out)
        best = out["best_rows_per_s"]
        if not a.no_java:
            for i in range(a.repeat):
                topic = f"BenchJavaTxn{i}"
                create_topics(srv.namesrv, 1, topic, topic + "Warm")
                r = java_txn(srv.namesrv, topic, a, tmp)
                if "rows_per_s" in r:  # its END_TRANSACTIONs are one-way: some land late
                    deadline = time.monotonic() + 60
                    n = sum(bodies_of(srv.namesrv, topic).values())
                    while n < a.rows and time.monotonic() < deadline:
                        time.sleep(1)
                        n = sum(bodies_of(srv.namesrv, topic).values())
                    # its one-way END_TRANSACTION can be lost: count, do not stop the run
                    r["delivered_after_60s"] = n
                out["runs"].setdefault("java TransactionMQProducer", []).append(
                    r.get("rows_per_s", r))
                out.setdefault("java_runs", []).append(r)
            j = [v for v in out["runs"]["java TransactionMQProducer"]
                 if isinstance(v, (int, float))]
            if j:
                best["java TransactionMQProducer"] = max(j)
                out["exactly_once_vs_java"] = round(best["exactly-once"] / max(j), 3)
    finally:
        spark.stop()
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        out["load_after"] = round(os.getloadavg()[0], 1)
        print(json.dumps(out) if a.json else out)


def rows_frame(spark, n: int, size: int):
    """``n`` rows: a body of about ``size`` bytes, and keys."""
    return spark.range(n).selectExpr(
        f"CAST(concat(CAST(id AS STRING), repeat('x', {size})) AS BINARY) AS body",
        "CAST(id AS STRING) AS keys")


def summarize(out: dict) -> None:
    best = {g: max(v) for g, v in out["runs"].items()}
    out["best_rows_per_s"] = best
    out["ratio"] = round(best["exactly-once"] / best["at-least-once"], 3)
    pairs = [e / w for w, e in zip(out["runs"]["at-least-once"][1:],
                                   out["runs"]["exactly-once"][1:])]
    if pairs:
        out["pair_ratios"] = [round(x, 3) for x in pairs]
        out["median_pair_ratio"] = round(statistics.median(pairs), 3)


def stream_runs(spark, srv, a, tmp: str, out: dict) -> None:
    """``--stream B``: each guarantee copies the same B x ``--rows`` rows (Parquet files, two
    a micro-batch) into its own topic, ``availableNow``; rows/s until the broker holds all."""
    from rocketstore.client import AdminClient
    from tests.spark.test_sink_exactly_once import create_topics
    total = a.rows * a.stream
    src = os.path.join(tmp, "src")
    rows_frame(spark, total, a.size).repartition(2 * a.stream).write.parquet(src)
    schema = spark.read.parquet(src).schema
    out["stream_batches"] = a.stream
    with AdminClient(srv.namesrv) as admin:
        def stored(topic: str) -> int:
            return sum(r["maxOffset"] for r in admin.topic_stats(topic))
        for i in range(a.repeat):
            for g in ("at-least-once", "exactly-once"):
                topic = f"BenchS{g.replace('-', '')}{i}"
                create_topics(srv.namesrv, 1, topic)
                q = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 2)
                     .parquet(src).writeStream.format("rocketmq")
                     .option("namesrv", srv.namesrv).option("topic", topic)
                     .option("deliveryGuarantee", g)
                     .option("checkpointLocation", os.path.join(tmp, f"ck-{g}-{i}"))
                     .trigger(availableNow=True))
                t0 = time.perf_counter()
                q.start().awaitTermination()
                while stored(topic) < total:
                    time.sleep(0.005)
                dt = time.perf_counter() - t0
                n = sum(bodies_of(srv.namesrv, topic).values())
                assert n == total, (g, n)
                out["runs"].setdefault(g, []).append(round(total / dt))
    summarize(out)


def start_txn_broker(tmp: str, store: str, txn_batch: bool):
    """``rocketstore serve`` in ``tmp`` for the transaction benchmarks: checks once a minute,
    ``transactionBatchEnable`` as asked, 8 queues a topic; ``store``: "small" (the tests'
    sizes) or "default" (serve's own)."""
    from tests.broker.conftest import start_server
    conf = os.path.join(tmp, "broker.conf")
    with open(conf, "w") as f:
        f.write("transactionTimeOut=60000\ntransactionCheckInterval=60000\n"
                f"transactionBatchEnable={'true' if txn_batch else 'false'}\n")
    sizes = [] if store == "small" else [  # (later -o options win over the tests' sizes)
        "-o", f"mapped_file_size_commitlog={1 << 30}",
        "-o", f"mapped_file_size_consume_queue={300_000 * 20}",
        "-o", "max_hash_slot_num=5000000", "-o", "max_index_num=20000000"]
    return start_server(os.path.join(tmp, "store"), "--config", conf,
                        "--default-topic-queue-nums", "8", *sizes,
                        log_path=os.path.join(tmp, "serve.log"))


def java_txn(namesrv: str, topic: str, a, tmp: str) -> dict:
    """Run ``benchmarks/java/TxnProducerBench.java`` (compiled once into ``tmp``)."""
    import subprocess
    from tests import referee
    referee.export_env()
    try:
        home = referee.home(referee.V4)
    except BaseException as exc:  # pytest's skip outside pytest: no referee here
        return {"error": f"no RocketMQ 4.9.7 referee: {exc}"}
    classes = os.path.join(tmp, "java-classes")
    if not os.path.exists(os.path.join(classes, "TxnProducerBench.class")):
        subprocess.run([os.path.join(home, "javac-rmq"), "-d", classes,
                        os.path.join(HERE, "java", "TxnProducerBench.java")],
                       check=True, capture_output=True, timeout=300)
    env = {**os.environ, "HOME": tmp, "CP_EXTRA": classes, "TOOLS_HEAP": "512m"}
    r = subprocess.run([os.path.join(home, "java-run"), "TxnProducerBench", namesrv, topic,
                        str(a.rows), str(a.size), str(a.java_threads)], env=env,
                       capture_output=True, text=True, timeout=1800)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "TxnProducerBench printed no result", "output": (r.stdout + r.stderr)[-500:]}


if __name__ == "__main__":
    main()
