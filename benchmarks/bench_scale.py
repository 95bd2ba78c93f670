"""How cost grows with the number of queues and topics (issue 21 §5), embedded, in one process.

Question: on a fresh store with default file sizes, what does putting one 1 KiB message into
each of N queues (N/8 topics × 8 queues) cost — disk use (``du``), files, time — how long does
reopening take until the first accepted put, and how long does writing topics.json take with
1,000 / 5,000 / 20,000 topics?

Usage:
  python benchmarks/bench_scale.py [--queues 1000] [--workdir /tmp] [--json out.json]
Run it once with PYTHONPATH pointing at each source tree to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from rocketstore import Message, MessageStore, StoreConfig


def queues(n: int, workdir: str) -> dict:
    root = tempfile.mkdtemp(prefix="scale-", dir=workdir)
    try:
        cfg = StoreConfig(store_path_root_dir=root)
        t0 = time.perf_counter()
        with MessageStore(cfg) as s:
            for i in range(n):
                r = s.put_message(Message(topic=f"Scale{i // 8}", body=b"x" * 1024, queue_id=i % 8,
                                          keys=[f"k{i}"]))
                assert r.ok, r
            s.wait_dispatched(60)
        put_s = time.perf_counter() - t0
        du_kib = int(subprocess.run(["du", "-sk", root], capture_output=True, text=True,
                                    check=True).stdout.split()[0])
        cl_kib = int(subprocess.run(["du", "-sk", os.path.join(root, "commitlog")],
                                    capture_output=True, text=True, check=True).stdout.split()[0])
        files = sum(len(f) for _, _, f in os.walk(root))
        t1 = time.perf_counter()
        with MessageStore(cfg) as s:
            assert s.put_message(Message(topic="Scale0", body=b"y", queue_id=0)).ok
        reopen_s = time.perf_counter() - t1
        return {"queues": n, "put_s": round(put_s, 2), "du_kib": du_kib,
                "du_without_commitlog_kib": du_kib - cl_kib, "files": files,
                "reopen_to_first_put_s": round(reopen_s, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def topics_json(workdir: str) -> dict:
    from rocketstore.broker.state.topics import TopicConfigManager
    d = tempfile.mkdtemp(prefix="topics-", dir=workdir)
    out = {}
    try:
        m = TopicConfigManager(d)
        for n in (1000, 5000, 20000):
            while len(m.topics()) < n:
                m.create(f"T{len(m.topics())}", 8, persist=False)
            m.persist()
            t = time.perf_counter()
            m.persist()
            out[f"persist_ms_{n}"] = round((time.perf_counter() - t) * 1e3, 1)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = {"load_avg": os.getloadavg(), **queues(args.queues, args.workdir),
              **topics_json(args.workdir)}
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
