"""Run every benchmark with its default size, one after the other (``make bench``).

Each script prints its own table; ``benchmarks/README.md`` records the numbers with the command
that produced them. The broker benchmark compares against Redis Streams and NATS JetStream and
needs Debian's ``redis-server`` and ``nats-server`` on PATH (``pip install -e '.[bench]'`` brings
their Python clients); it skips the systems it cannot start.
"""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ["bench_store.py", "bench_index.py", "bench_durability.py", "bench_broker.py", "bench_spark.py",
           "bench_ops.py", "bench_grpc.py", "bench_grpc_sql92.py", "bench_transaction.py",
           "bench_sql92.py", "bench_consumer_status.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"\n##### {name}", flush=True)
        rc = subprocess.call([sys.executable, os.path.join(HERE, name)])
        if rc:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
