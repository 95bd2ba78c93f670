"""The ``rocketmq`` sink's two delivery guarantees side by side (issue 35 §6): rows/s of a
``df.write`` of N rows into one ``rocketstore serve`` broker, at least once (batched sends)
and exactly once (one half message per row, the decision file, an END_TRANSACTION per row).
Goal: exactly-once ≥ 0.7 × at-least-once.

    .venv/bin/python benchmarks/bench_spark_sink.py --rows 50000 --json

Spark ``local[2]``; each guarantee writes the same cached frame ``--repeat`` times, into its own
topic of 8 queues, alternating; the best run of each counts. Every run's rows are counted on the
broker afterwards (a plain pull), so a fast wrong answer cannot win.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=256, help="body bytes")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from tests.broker.conftest import start_server
    from tests.spark.test_sink_exactly_once import bodies_of, create_topics
    tmp = tempfile.mkdtemp(prefix="bench-sink-")
    conf = os.path.join(tmp, "broker.conf")
    with open(conf, "w") as f:
        f.write("transactionTimeOut=60000\ntransactionCheckInterval=60000\n")
    srv = start_server(os.path.join(tmp, "store"), "--config", conf,
                       "--default-topic-queue-nums", "8", log_path=os.path.join(tmp, "serve.log"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from rocketstore.spark.session import prepare_environment
    prepare_environment()
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstore.spark import register
    register(spark)
    out = {"rows": a.rows, "size": a.size, "runs": {}}
    try:
        df = spark.range(a.rows).selectExpr(
            f"CAST(concat(CAST(id AS STRING), repeat('x', {a.size})) AS BINARY) AS body",
            "CAST(id AS STRING) AS keys").repartition(2).cache()
        df.count()
        for i in range(a.repeat):
            for g in ("at-least-once", "exactly-once"):
                topic = f"Bench{g.replace('-', '')}{i}"
                create_topics(srv.namesrv, 1, topic)
                w = (df.write.format("rocketmq").option("namesrv", srv.namesrv)
                     .option("topic", topic).option("deliveryGuarantee", g))
                if g == "exactly-once":
                    w = w.option("checkpointLocation", os.path.join(tmp, f"ck-{i}"))
                t0 = time.perf_counter()
                w.mode("append").save()
                dt = time.perf_counter() - t0
                n = sum(bodies_of(srv.namesrv, topic).values())
                assert n == a.rows, (g, n)
                out["runs"].setdefault(g, []).append(round(a.rows / dt))
        best = {g: max(v) for g, v in out["runs"].items()}
        out["best_rows_per_s"] = best
        out["ratio"] = round(best["exactly-once"] / best["at-least-once"], 3)
    finally:
        spark.stop()
        srv.stop()
    print(json.dumps(out) if a.json else out)


if __name__ == "__main__":
    main()
