"""Where the Spark file source's per-partition time goes, in one process (no Spark).

What one ``read()`` of the ``rocketmq`` data source does: ``segments.read_range`` (the shared
batch decoder over 16 MiB windows) and ``arrow_columns.to_batches`` (the 21 contract columns as
Arrow). Timed per record — decode only; decode + one narrow column; decode + all 21 columns —
best of 5, then a cProfile of the all-columns pass (``--profile``). Run it twice to compare the
compiled decoder with the pure-Python one:

    .venv/bin/python benchmarks/profile_spark_scan.py --size-mib 48 --profile
    ROCKETSTORE_PURE_PYTHON=1 .venv/bin/python benchmarks/profile_spark_scan.py --size-mib 48 --profile

The store is ``bench_spark.py``'s (1 KiB bodies, TAGS, two KEYS, UNIQ_KEY), one segment.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_spark import generate  # noqa: E402

from rocketstore import _native  # noqa: E402
from rocketstore.spark.arrow_columns import COLUMNS, arrow_schema, to_batches  # noqa: E402
from rocketstore.spark.segments import list_segments, plan_ranges, read_range  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=48)
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "rocketstore-profile-scan"))
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    size = a.size_mib << 20
    cfg = generate(a.store, size, size + (8 << 20))  # one segment
    rng = plan_ranges(list_segments(cfg.commitlog_dir), None, None, None)[0]

    def scan(cols) -> int:
        schema = arrow_schema(cols) if cols else None
        n = 0
        for buf, rec in read_range(rng):
            if not cols:
                n += len(rec)
                continue
            for b in to_batches(rec, buf, cols, schema):
                n += b.num_rows
        return n

    from rocketstore.format import batch  # noqa: F401  (loads the twins)
    print("compiled twins:", _native.active())
    for name, cols in (("decode only", []), ("decode + commitlog_offset", ["commitlog_offset"]),
                       ("decode + all 21 columns", COLUMNS)):
        scan(cols)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            n = scan(cols)
            times.append(time.perf_counter() - t)
        print(f"{name:>26}: {n:,} records, {min(times) / n * 1e6:.2f} µs/record (best of 5)")
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(scan, COLUMNS)
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
