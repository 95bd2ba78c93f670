"""Tiered store benchmark: how fast a store's messages go up to the tier (posix and S3), and how
fast Spark scans them straight from the tier next to the local CommitLog.

Question (issue 32): on a generated store of 1 KiB messages (8 queues, 2 topics, two keys each),
(1) the upload rate into a posix tier and into an S3 bucket (versitygw on 127.0.0.1, the test
suite's server), next to the rate the store itself took the same messages; (2) a Spark scan
(``count`` then a ``noop`` write of every column) of the local CommitLog, the posix tier and the
bucket (``s3://tier/bench``), all in the same run on the same machine.

    .venv/bin/python benchmarks/bench_tier.py --size-mib 256 --json

The store is kept in ``--store`` for reuse (``bench_spark.generate``); the tiers are rebuilt on
every run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from bench_spark import generate, timed  # noqa: E402

from rocketstore import MessageStore  # noqa: E402
from rocketstore.config import TierConfig  # noqa: E402


def upload(cfg, tcfg) -> dict:
    t0 = time.perf_counter()
    with MessageStore(cfg.replace(tier=tcfg, timer_wheel_enable=False)) as s:
        t_open = time.perf_counter() - t0
        t1 = time.perf_counter()
        assert s.tier.wait_caught_up(3600)
        up = time.perf_counter() - t1
        t2 = time.perf_counter()
        s.tier.seal_index()
        seal = time.perf_counter() - t2
        st = s.tier.status()
    flat = sum(q["commitLogBytes"] for q in st["queues"])
    n = sum(q["maxOffset"] - q["minOffset"] for q in st["queues"])
    return {"messages": n, "flat_bytes": flat, "open_s": round(t_open, 2),
            "upload_s": round(up, 2), "upload_mb_per_s": round(flat / up / 1e6, 1),
            "upload_msgs_per_s": round(n / up), "index_seal_s": round(seal, 2)}


S3A_JARS = (  # what `make bench-s3a` resolves (hadoop-aws for the hadoop-client 3.5.0 PySpark ships)
    "org/apache/hadoop/hadoop-aws/3.5.0/hadoop-aws-3.5.0.jar",
    "software/amazon/awssdk/bundle/2.35.4/bundle-2.35.4.jar",
    "software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/1.3.1/"
    "analyticsaccelerator-s3-1.3.1.jar",
)


def s3a_conf(srv) -> dict:
    """Spark's own S3 connector (hadoop-aws, ``s3a://``) pointed at the test S3 server."""
    repo = os.path.expanduser("~/.m2/repository")
    jars = [os.path.join(repo, j) for j in S3A_JARS]
    missing = [j for j in jars if not os.path.exists(j)]
    if missing:
        sys.exit(f"--parquet needs {missing[0]}: run `make bench-s3a` first")
    h = "spark.hadoop.fs.s3a."
    return {"spark.jars": ",".join(jars), h + "endpoint": srv.endpoint,
            h + "endpoint.region": "us-east-1", h + "path.style.access": "true",
            h + "connection.ssl.enabled": "false", h + "access.key": srv.access_key,
            h + "secret.key": srv.secret_key,
            h + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}


def parquet_on_s3(spark, store: str, work: str, srv):
    """The store's rows as Parquet (written by Spark from the local file source), copied into
    the bucket with pyarrow, read back by Spark through ``s3a://``."""
    from pyarrow import fs
    local = os.path.join(work, "parquet")
    t = time.perf_counter()
    spark.read.format("rocketmq").load(store).write.mode("overwrite").parquet(local)
    s3 = fs.S3FileSystem(endpoint_override=srv.endpoint, access_key=srv.access_key,
                         secret_key=srv.secret_key, scheme="http", region="us-east-1")
    fs.copy_files(local, "tier/parquet", source_filesystem=fs.LocalFileSystem(),
                  destination_filesystem=s3)
    print(f"parquet written and copied to s3://tier/parquet in {time.perf_counter() - t:.1f}s",
          file=sys.stderr)
    return spark.read.parquet("s3a://tier/parquet")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--segment-mib", type=int, default=64, help="tieredStoreCommitLogMaxSize")
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "rocketstore-bench-tier"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-s3", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep-tiers", action="store_true",
                    help="keep the tiers and Parquet under <store>-tiers (removed by default)")
    ap.add_argument("--parquet", action="store_true",
                    help="also Spark reading Parquet of the same rows from the same S3 server "
                         "(s3a://; needs `make bench-s3a`, which resolves hadoop-aws from Maven)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    cfg = generate(a.store, a.size_mib << 20, 256 << 20)
    res: dict = {"size_mib": a.size_mib, "segment_mib": a.segment_mib, "cores": os.cpu_count(),
                 "generate_s_if_fresh": round(time.perf_counter() - t0, 1)}
    work = a.store + "-tiers"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    common = dict(broker_cluster_name="BenchCluster", broker_name="bench-b",
                  commitlog_max_size=a.segment_mib << 20, group_commit_timeout=3_600_000,
                  index_max_hash_slot_num=500_000, index_max_index_num=4_000_000)
    for p in ("config/tieredStoreMetadata.json", "config/tieredIndexOffset.json"):
        if os.path.exists(os.path.join(a.store, p)):
            os.unlink(os.path.join(a.store, p))
    res["posix"] = upload(cfg, TierConfig(file_path=os.path.join(work, "posix"), **common))
    srv = None
    if not a.skip_s3:
        from tests.s3server import start_s3_server
        srv = start_s3_server(os.path.join(work, "s3root"), buckets=("tier",))
        for p in ("config/tieredStoreMetadata.json", "config/tieredIndexOffset.json"):
            os.unlink(os.path.join(a.store, p))
        res["s3"] = upload(cfg, TierConfig(
            backend="s3", file_path="bench", object_store_endpoint=srv.endpoint,
            object_store_bucket="tier", object_store_access_key=srv.access_key,
            object_store_secret_key=srv.secret_key, **common))
    try:
        from rocketstore.spark import get_session
        conf = {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"}
        if a.parquet and srv is not None:
            conf.update(s3a_conf(srv))
        spark = get_session(a.master, conf=conf)
        sources = {"local_commitlog": spark.read.format("rocketmq").load(a.store),
                   "posix_tier": spark.read.format("rocketmq").load(os.path.join(work, "posix"))}
        if srv is not None:
            sources["s3_tier"] = (spark.read.format("rocketmq")
                                  .option("objectStoreEndpoint", srv.endpoint)
                                  .option("objectStoreAccessKey", srv.access_key)
                                  .option("objectStoreSecretKey", srv.secret_key)
                                  .load("s3://tier/bench"))
        if a.parquet and srv is not None:
            sources["s3_parquet"] = parquet_on_s3(spark, a.store, work, srv)
        scans = {}
        for name, df in sources.items():
            n = df.count()
            best = min(timed(lambda: df.write.format("noop").mode("overwrite").save(), a.repeat))
            scans[name] = {"rows": n, "scan_s": round(best, 2), "rows_per_s": round(n / best)}
        base = scans["local_commitlog"]["scan_s"]
        for name, v in scans.items():
            v["vs_local"] = round(base / v["scan_s"], 2)
        res["spark_scan"] = scans
    finally:
        if srv is not None:
            srv.stop()
        if not a.keep_tiers:  # the tiers (and Parquet) hold several copies of the store
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, indent=1) if a.json else res)


if __name__ == "__main__":
    main()
