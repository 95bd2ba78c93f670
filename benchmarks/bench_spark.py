"""Spark pipeline benchmark: data source scan vs Parquet, Spark rebuild vs in-process replay.

Question (issue 6): on a generated store of 1 KiB messages, how fast does the ``rocketmq`` data
source scan into a ``noop`` sink (msgs/s, MB/s), next to Spark's own Parquet reader on the same
rows exported to Parquet in the same run; and how long does ``rebuild`` take with Spark
``local[2]`` next to the in-process reput replaying the same CommitLog?

    .venv/bin/python benchmarks/bench_spark.py --size-mib 2048 --json

The store is generated with ``MessageStore.put_messages`` (batches of 64, 8 queues, 2 topics,
keys ``order-<i> user-<i % 100000>``, 1 KiB random bodies) into ``--store`` (kept for reuse).
The rebuild result is also checked byte for byte against the files the reput wrote.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402


def _slice(pool: bytes, i: int) -> bytes:
    at = i * 997 % (len(pool) - 1024)
    return pool[at:at + 1024]


def generate(root: str, size: int, seg: int) -> StoreConfig:
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=seg)
    marker = os.path.join(root, ".bench-size")
    if os.path.exists(marker) and open(marker).read() == f"{size}/{seg}":
        return cfg
    shutil.rmtree(root, ignore_errors=True)
    pool = os.urandom(1 << 22)  # distinct, incompressible 1 KiB bodies (slices of a random pool)
    t0 = time.perf_counter()
    i = 0
    with MessageStore(cfg) as store:
        while store.get_max_phy_offset() < size:
            batch = [Message(topic=f"Bench{(i // 64) % 2}", body=_slice(pool, i + j), tags="TagA",
                             keys=[f"order-{i + j}", f"user-{(i + j) % 100000}"], queue_id=(i // 64) % 8)
                     for j in range(64)]
            r = store.put_messages(batch)
            assert r.ok, r
            i += 64
        store.wait_dispatched(600)
    print(f"generated {i:,} messages, {size / 2**20:,.0f} MiB in {time.perf_counter() - t0:.1f}s",
          file=sys.stderr)
    with open(marker, "w") as fh:
        fh.write(f"{size}/{seg}")
    return cfg


def digest_tree(path: str) -> str:
    h = hashlib.sha256()
    if os.path.basename(path) == "index":  # names are creation times: hash contents in order
        for n in sorted(os.listdir(path)):
            h.update(open(os.path.join(path, n), "rb").read())
        return h.hexdigest()
    for r, ds, fs in sorted(os.walk(path)):
        ds.sort()
        for n in sorted(fs):
            p = os.path.join(r, n)
            h.update(os.path.relpath(p, path).encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def timed(fn, repeat: int = 1) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--segment-mib", type=int, default=1024)
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "rocketstore-bench-spark"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scan-only", action="store_true",
                    help="only the scan against Parquet (no rebuild, no replay)")
    a = ap.parse_args()
    root = a.store
    cfg = generate(root, a.size_mib << 20, a.segment_mib << 20)

    from rocketstore.spark import get_session
    from rocketstore.spark.rebuild_job import rebuild
    from rocketstore.spark.segments import confirmed_offset, list_segments
    spark = get_session(a.master, conf={"spark.driver.memory": "4g",
                                        "spark.sql.shuffle.partitions": "4"})
    segs = list_segments(cfg.commitlog_dir)
    nbytes = confirmed_offset(segs)[0] - segs[0].base
    src = spark.read.format("rocketmq").load(root)
    n = src.count()
    res: dict = {"messages": n, "commitlog_bytes": nbytes, "segments": len(segs),
                 "master": a.master, "cores": os.cpu_count()}

    scan = timed(lambda: src.write.format("noop").mode("overwrite").save(), a.repeat)
    pq = os.path.join(root + "-parquet")
    shutil.rmtree(pq, ignore_errors=True)
    export_s = timed(lambda: src.write.parquet(pq))[0]
    pdf = spark.read.parquet(pq)
    assert pdf.count() == n
    pq_scan = timed(lambda: pdf.write.format("noop").mode("overwrite").save(), a.repeat)
    pq_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(pq) for f in fs)
    best_scan, best_pq = min(scan), min(pq_scan)
    res.update(scan_seconds=scan, scan_msgs_per_s=round(n / best_scan),
               scan_mb_per_s=round(nbytes / best_scan / 1e6, 1),
               parquet_write_seconds=round(export_s, 2), parquet_bytes=pq_bytes,
               parquet_scan_seconds=pq_scan, parquet_msgs_per_s=round(n / best_pq),
               scan_vs_parquet=round(best_pq / best_scan, 3))
    shutil.rmtree(pq, ignore_errors=True)
    from rocketstore import _native
    res.update(compiled_decoder=_native.active().get("rocketstore.format._speedups", False))
    if a.scan_only:
        print(json.dumps(res, indent=1) if a.json else res)
        return

    want = {d: digest_tree(os.path.join(root, d)) for d in ("consumequeue", "index")}
    rb = rebuild(root, engine="spark", cfg=cfg, spark=spark)
    same = {d: digest_tree(os.path.join(root, d)) == want[d] for d in want}
    res.update(rebuild_spark_seconds=rb.seconds, rebuild_identical=same, index_keys=rb.index_keys)
    rl = rebuild(root, engine="local", cfg=cfg)
    res.update(rebuild_local_seconds=rl.seconds)
    # the in-process reput replaying the whole CommitLog: derived files gone, store reopened
    for d in ("consumequeue", "index"):
        shutil.rmtree(os.path.join(root, d))
    t = time.perf_counter()
    with MessageStore(cfg) as store:
        assert store.wait_dispatched(3600)
        replay = time.perf_counter() - t
    res.update(reput_replay_seconds=round(replay, 3),
               replay_identical={d: digest_tree(os.path.join(root, d)) == want[d] for d in want},
               rebuild_speedup=round(replay / rb.seconds["total"], 2))
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
