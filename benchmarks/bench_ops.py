"""What the metrics endpoint and the console cost, and how fast they answer.

Question: does ``rocketstore serve --metrics-port --console`` slow the send and pull paths
(the handler wrappers observe one latency histogram per request), and how long do a
``/metrics`` scrape and the console's pages take on a broker with many topics and groups?

Workloads, on one broker without ops and one with both, alternated (``--rounds`` times each, so
the machine's other load hits both alike), each on a fresh store:
  send   1 KiB messages, one per request, 8 connections
  pull   read them all back, 32 per request
Then on the broker with ops, after creating ``--topics`` topics (4 queues, one message each)
and ``--groups`` groups with committed offsets on 10 topics each: the time of a ``/metrics``
scrape and of the console's overview, topics and groups pages (median and max of 20).

Usage: python benchmarks/bench_ops.py [--messages 8000] [--rounds 3] [--topics 200]
       [--groups 20] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from netutil import ab_report, free_port, send_and_pull

BODY = b"x" * 1024
TOPIC = "BenchOps"



class Broker:
    def __init__(self, workdir: str, ops: bool) -> None:
        self.metrics_port = free_port() if ops else None
        self.console_port = free_port() if ops else None
        extra = (["--metrics-port", str(self.metrics_port), "--console", str(self.console_port)]
                 if ops else [])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "serve", "--store",
             os.path.join(workdir, "store"), "--port", "0", "--namesrv-port", "0", "--json",
             "--default-topic-queue-nums", "4", "-o", "mapped_file_size_commitlog=67108864",
             *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.namesrv = json.loads(self.proc.stdout.readline())["namesrv"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


async def populate(namesrv: str, topics: int, groups: int) -> None:
    from rocketstore.client import AsyncProducer, AsyncPullConsumer
    p = AsyncProducer("bench-topics", namesrv)
    for i in range(topics):
        await p.send(f"T{i:04d}", b"m", queue_id=0)
    await p.shutdown()
    for g in range(groups):
        c = AsyncPullConsumer(f"G{g:03d}", namesrv)
        for i in range(10):
            await c.commit_offset(f"T{(g * 10 + i) % topics:04d}", 0, 0)
        await c.shutdown()


def timed_get(url: str, times: int = 20) -> tuple[float, float]:
    ms = []
    for _ in range(times):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as r:
            r.read()
        ms.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ms), max(ms)


def wrapper_cost_us(n: int = 200_000) -> tuple[float, float]:
    """µs per request that the latency wrappers add to a send and to a pull handler, measured
    in-process against the same handler unwrapped (best of 5)."""
    from prometheus_client import CollectorRegistry

    from rocketstore.ops.stats import HandlerLatency
    from rocketstore.remoting.codes import RequestCode

    class Cmd:
        ext_fields = {"sysFlag": "2"}

    async def handler(conn, cmd):
        return cmd

    lat = HandlerLatency(CollectorRegistry())
    wrapped = lat.instrument({RequestCode.SEND_MESSAGE_V2: handler,
                              RequestCode.PULL_MESSAGE: handler})

    async def loop(fn) -> float:
        cmd = Cmd()
        t0 = time.perf_counter()
        for _ in range(n):
            await fn(None, cmd)
        return (time.perf_counter() - t0) / n * 1e6

    def best(fn) -> float:
        return min(asyncio.run(loop(fn)) for _ in range(5))
    base = best(handler)
    return (best(wrapped[RequestCode.SEND_MESSAGE_V2]) - base,
            best(wrapped[RequestCode.PULL_MESSAGE]) - base)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    put_us, pull_us = wrapper_cost_us()
    print(f"latency wrappers: +{put_us:.2f} µs per send request, +{pull_us:.2f} µs per pull "
          "request (in-process, best of 5)")
    rates: dict[str, list[tuple[float, float]]] = {"plain": [], "ops": []}
    for _ in range(a.rounds):
        for kind in ("plain", "ops"):
            with tempfile.TemporaryDirectory() as d:
                b = Broker(d, kind == "ops")
                try:
                    rates[kind].append(asyncio.run(send_and_pull(b.namesrv, TOPIC, BODY, a.messages)))
                finally:
                    b.stop()
    out: dict = {"load_avg": os.getloadavg()[0], "messages": a.messages, "rounds": a.rounds,
                 "wrapper_us": {"send": put_us, "pull": pull_us}}
    print(f"load average {out['load_avg']:.1f}; {a.messages} x 1 KiB, 8 connections, "
          f"{a.rounds} rounds each, alternated")
    ab_report(out, rates, "plain", "ops")
    with tempfile.TemporaryDirectory() as d:
        b = Broker(d, True)
        try:
            asyncio.run(populate(b.namesrv, a.topics, a.groups))
            time.sleep(1)
            print(f"\n{a.topics} topics x 4 queues, {a.groups} groups x 10 topics: "
                  "median / max of 20, ms")
            for name, url in (("/metrics", f"http://127.0.0.1:{b.metrics_port}/metrics"),
                              ("console /", f"http://127.0.0.1:{b.console_port}/"),
                              ("console /topics", f"http://127.0.0.1:{b.console_port}/topics"),
                              ("console /groups", f"http://127.0.0.1:{b.console_port}/groups")):
                med, mx = timed_get(url)
                out[name] = {"median_ms": med, "max_ms": mx}
                print(f"{name:18} {med:8.1f} {mx:8.1f}")
        finally:
            b.stop()
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
