"""ConsumeQueue units one at a time, as the reput writes a trickle of sends.

Question: what does one ``ConsumeQueue.put_unit`` cost (a 20-byte unit into a sparse file through
``MappedFile.write_at``)? Run against several source trees in one run to compare a change with
its base (each tree in its own interpreter, alternating, best of ``--reps``).

Usage:
  python benchmarks/bench_cq_units.py [--trees new=src,base=/path/to/base/src] [--units 200000]
      [--reps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, shutil, sys, tempfile, time
from rocketstore import StoreConfig
from rocketstore.store.dispatch import ConsumeQueueTable
n = int(sys.argv[1])
d = tempfile.mkdtemp(prefix="cq-units-")
try:
    t = ConsumeQueueTable(StoreConfig(store_path_root_dir=d))
    t.load()
    cq = t.find_or_create("T", 0)
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(n):
        cq.put_unit(i, i * 1100, 1100, 7)
    t1, c1 = time.perf_counter(), time.thread_time()
    for q in t:
        q.close()
finally:
    shutil.rmtree(d, ignore_errors=True)
print(json.dumps({"wall_us": (t1 - t0) / n * 1e6, "cpu_us": (c1 - c0) / n * 1e6}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    ap.add_argument("--trees", default=f"this={here}")
    ap.add_argument("--units", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.trees.split(","))
    runs: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.reps):
        for name, src in trees.items():
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.units)], check=True,
                                 capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
            runs[name].append(json.loads(out.stdout))
    best = {k: min(r["wall_us"] for r in v) for k, v in runs.items()}
    result = {"units": args.units, "best_wall_us_per_unit": {k: round(v, 2) for k, v in best.items()}}
    first = next(iter(best))
    result[f"ratio to {first}"] = {k: round(v / best[first], 2) for k, v in best.items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
