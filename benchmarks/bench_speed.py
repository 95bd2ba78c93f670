"""Sends against RocketMQ 4.9.7's Java broker, interleaved, with ratios (issue 21).

Question: with RocketMQ's own benchmark Producer (1 KiB, ``-w THREADS`` synchronous senders on one
connection), how many sends per second does each broker take, and at what broker CPU per message —
measured cell by cell in rotation (every broker of a flush mode runs at once; each cell runs its
brokers one after another, the order rotating each repetition), three repetitions, the median kept.
Brokers:

  java   Apache RocketMQ 4.9.7 (its name server and broker; ``ROCKETMQ_HOME``)
  ours   ``rocketstore serve`` from this checkout (the compiled ``_speedups`` when built);
         ``ours:N`` with ``--workers N`` (default: one worker process per core)
  pure   the same with ``ROCKETSTORE_PURE_PYTHON=1`` (the pure-Python fallback)
  base   ``rocketstore serve`` from another source tree (``--base-src``, e.g. main's ``src``):
         the code before this change, in the same run

Usage:
  ROCKETMQ_HOME=/work/rmq-java python benchmarks/bench_speed.py \\
      [--brokers java,ours,pure,base] [--base-src /path/to/src] [--cells a1,a8,a16,s16] \\
      [--reps 3] [--seconds 12] [--json out.json]
Cells: ``aN`` = ASYNC_FLUSH with N producer threads, ``sN`` = SYNC_FLUSH. Everything binds
127.0.0.1 and is stopped by PID; the machine's load average is recorded per cell.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_java import JavaBroker, OurBroker, proc_cpu_s, run_senders  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class Ours(OurBroker):
    """``rocketstore serve`` with its own environment (pure Python, another source tree)."""

    def __init__(self, workdir: str, sync: bool, name: str, env: dict[str, str],
                 workers: int | None = None) -> None:
        super().__init__(os.path.join(workdir, name.replace(":", "-")), sync, workers)
        self.name = name
        self.env = env

    def start(self) -> None:
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            super().start()
        finally:
            os.environ.clear()
            os.environ.update(saved)


def make(name: str, workdir: str, sync: bool, java_home: str | None, base_src: str | None):
    here = str(ROOT / "src")
    name, _, count = name.partition(":")  # ours:N = serve --workers N
    workers = int(count) if count else None
    label = f"{name}:{count}" if count else name
    if name == "java":
        return JavaBroker(os.path.join(workdir, "java"), sync, java_home)
    if name == "ours":
        return Ours(workdir, sync, label, {"PYTHONPATH": here, "ROCKETSTORE_PURE_PYTHON": "0"},
                    workers)
    if name == "pure":
        return Ours(workdir, sync, label, {"PYTHONPATH": here, "ROCKETSTORE_PURE_PYTHON": "1"},
                    workers)
    if name == "base":
        return Ours(workdir, sync, label, {"PYTHONPATH": base_src,
                                            "ROCKETSTORE_PURE_PYTHON": "1"}, workers)
    raise SystemExit(f"unknown broker {name!r}")


def parse_cell(c: str) -> tuple[bool, int, int]:
    """``a16`` = ASYNC_FLUSH, 16 Producer threads on one client (one connection); ``a16x4`` =
    the 16 threads over 4 client processes (4 connections); ``s`` = SYNC_FLUSH."""
    threads, _, clients = c[1:].partition("x")
    return c[0] == "s", int(threads), int(clients or 1)


def latency_client(java_home: str, workdir: str) -> str:
    """Compile ``benchmarks/java/LatencyProducer.java`` once; its class directory."""
    classes = os.path.join(workdir, "latency-classes")
    if not os.path.exists(os.path.join(classes, "LatencyProducer.class")):
        subprocess.run([os.path.join(java_home, "javac-rmq"), "-d", classes,
                        str(ROOT / "benchmarks" / "java" / "LatencyProducer.java")],
                       check=True, capture_output=True, timeout=300)
    return classes


def run_latency(namesrv: str, topic: str, threads: int, seconds: float, java_home: str,
                workdir: str) -> dict:
    """RocketMQ's own DefaultMQProducer timing every send (p50/p99 round trip)."""
    env = {**os.environ, "HOME": workdir, "CP_EXTRA": latency_client(java_home, workdir),
           "TOOLS_HEAP": "512m"}
    r = subprocess.run([os.path.join(java_home, "java-run"), "LatencyProducer", namesrv, topic,
                        str(threads), str(int(seconds)), "3"], env=env, capture_output=True,
                       text=True, timeout=seconds + 120)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": "LatencyProducer printed no result", "output": (r.stdout + r.stderr)[-500:]}


def run_clients(namesrv: str, topic: str, threads: int, clients: int, seconds: float,
                java_home: str | None, workdir: str, latency: bool = False) -> dict:
    """RocketMQ's benchmark Producer: ``clients`` processes at once, ``threads`` in all
    (``latency``: RocketMQ's DefaultMQProducer timing each send, one client)."""
    if latency and java_home:
        return run_latency(namesrv, topic, threads, seconds, java_home, workdir)
    if clients == 1:
        return run_senders("java", namesrv, topic, threads, seconds, java_home, workdir)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(clients) as ex:
        rs = list(ex.map(lambda i: run_senders("java", namesrv, topic, max(1, threads // clients),
                                               seconds, java_home, workdir), range(clients)))
    ok = [r for r in rs if r.get("msgs_per_s")]
    if not ok:
        return rs[0]
    return {"msgs_per_s": sum(r["msgs_per_s"] for r in ok),
            "avg_ms": round(statistics.mean(r["avg_ms"] for r in ok), 3),
            "max_ms": max(r["max_ms"] for r in ok), "failed": sum(r["failed"] for r in ok)}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="java,ours")
    ap.add_argument("--base-src", default=None, help="source tree of the 'base' broker")
    ap.add_argument("--cells", default="a1,a16,s16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--latency", action="store_true",
                    help="drive with benchmarks/java/LatencyProducer (p50/p99 round trips) "
                         "instead of the benchmark Producer")
    args = ap.parse_args()
    java_home = os.environ.get("ROCKETMQ_HOME")
    names = args.brokers.split(",")
    if "java" in names and not (java_home and os.path.exists(f"{java_home}/producer-bench")):
        raise SystemExit("the Java broker and Producer need ROCKETMQ_HOME (RocketMQ 4.9.7)")
    if "base" in names and not args.base_src:
        raise SystemExit("--brokers base needs --base-src")
    cells = [parse_cell(c) for c in args.cells.split(",")]
    workdir = tempfile.mkdtemp(prefix="bench-speed-")
    runs: list[dict] = []
    out = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "cpus": os.cpu_count(), "brokers": names, "runs": runs}
    try:
        for sync in (False, True):
            mode_cells = [(t, k) for s, t, k in cells if s == sync]
            if not mode_cells:
                continue
            brokers = [make(n, os.path.join(workdir, "sync" if sync else "async"), sync,
                            java_home, args.base_src) for n in names]
            try:
                for b in brokers:
                    b.start()
                for rep in range(args.reps):
                    for threads, clients in mode_cells:
                        order = brokers[rep % len(brokers):] + brokers[:rep % len(brokers)]
                        for b in order:
                            load = os.getloadavg()[0]
                            cpus0 = [proc_cpu_s(p) for p in b.pids]
                            cpu0 = sum(cpus0)
                            t0 = time.monotonic()
                            r = run_clients(b.namesrv, f"Speed{threads}x{clients}", threads,
                                            clients, args.seconds, java_home, workdir,
                                            args.latency)
                            wall = time.monotonic() - t0
                            cpus = [proc_cpu_s(p) - c for p, c in zip(b.pids, cpus0)]
                            cpu = sum(cpus)
                            row = {"broker": b.name, "flush": "SYNC" if sync else "ASYNC",
                                   "threads": threads, "clients": clients, "rep": rep, "load_1m": round(load, 2),
                                   "msgs_per_s": r.get("msgs_per_s"), "avg_ms": r.get("avg_ms"),
                                   "p50_ms": r.get("p50_ms"), "p99_ms": r.get("p99_ms"),
                                   "max_ms": r.get("max_ms"), "failed": r.get("failed"),
                                   # broker CPU over the whole run / messages the run's rate
                                   # implies (the Producer reports rates, not counts)
                                   "server_us_per_msg": round(cpu / max(1, (r.get("msgs_per_s") or 0)
                                                                        * wall) * 1e6, 1),
                                   # the same per process: the writer (or the one process)
                                   # first, then each worker
                                   "process_us_per_msg": [
                                       round(c / max(1, (r.get("msgs_per_s") or 0) * wall) * 1e6, 1)
                                       for c in cpus]}
                            runs.append(row)
                            print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                for b in brokers:
                    try:
                        b.stop()
                    except AttributeError:  # never started
                        pass
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {}
    for sync, threads, clients in cells:
        key = f"{'SYNC' if sync else 'ASYNC'}-{threads}" + (f"x{clients}" if clients > 1 else "")
        cell = {}
        for n in names:
            rows = [r for r in runs if r["broker"] == ("java-4.9.7" if n == "java" else n)
                    and r["threads"] == threads and r["clients"] == clients
                    and r["flush"] == ("SYNC" if sync else "ASYNC")]
            if rows:
                cell[n] = {"msgs_per_s": statistics.median(r["msgs_per_s"] or 0 for r in rows),
                           "avg_ms": statistics.median(r["avg_ms"] or 0 for r in rows),
                           "p99_ms": statistics.median(r["p99_ms"] or 0 for r in rows),
                           "server_us_per_msg": statistics.median(r["server_us_per_msg"] for r in rows),
                           "load_1m": [r["load_1m"] for r in rows]}
        if "java" in cell:
            for n in names:
                if n != "java" and n in cell and cell["java"]["msgs_per_s"]:
                    cell[n]["ratio_to_java"] = round(cell[n]["msgs_per_s"] / cell["java"]["msgs_per_s"], 2)
        summary[key] = cell
    out["summary"] = summary
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    text = json.dumps(out, indent=1)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(text)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
