"""Question: what does ``mqadmin consumerStatus``'s request (GET_CONSUMER_RUNNING_INFO, 307:
admin → broker → the consumer's own connection → broker → admin) cost next to the cheapest
request (GET_MAX_OFFSET) in the same run, as the consumer holds more queues — and what does the
bookkeeping behind its answer (per-queue state and per-topic rates, updated on every pull and
every message) cost a Python push consumer's drain, next to the same drain without it?

    .venv/bin/python benchmarks/bench_consumer_status.py [--queues 8,64,256] [--rounds 100]
                                                        [--messages 20000] [--drains 3]

Prints one line per queue count (median and p99 µs over one held connection, ratio to
GET_MAX_OFFSET), then the drain rates with and without the bookkeeping, alternating runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench_admin import Conn, timed
from netutil import free_port

from rocketstore.client import Producer, PushConsumer
from rocketstore.client import running_info


class _NoStats:
    def pulled(self, *a: object) -> None:
        pass

    def consumed(self, *a: object) -> None:
        pass


def drain(namesrv: str, topic: str, group: str, n: int, bookkeeping: bool) -> float:
    """Messages per second for a fresh group to consume all ``n`` messages from the start."""
    saved = running_info.ProcessQueueState.cache, running_info.ProcessQueueState.consumed
    if not bookkeeping:
        running_info.ProcessQueueState.cache = lambda self, msgs: None  # type: ignore[method-assign]
        running_info.ProcessQueueState.consumed = lambda self, off: None  # type: ignore[method-assign]
    count = [0]
    done = threading.Event()

    def listener(m) -> bool:
        count[0] += 1
        if count[0] == n:
            done.set()
        return True
    try:
        c = PushConsumer(group, namesrv, {topic: "*"}, listener, consume_from="first",
                         pull_batch_size=32, long_poll_ms=1000)
        if not bookkeeping:
            c._impl.stats = _NoStats()
        t0 = time.perf_counter()
        c.start()
        assert done.wait(600), f"only {count[0]} of {n}"
        rate = n / (time.perf_counter() - t0)
        c.shutdown()
        return rate
    finally:
        running_info.ProcessQueueState.cache, running_info.ProcessQueueState.consumed = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", default="8,64,256")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--drains", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port, ns = free_port(), free_port()
        proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                                 os.path.join(tmp, "store"), "--port", str(port),
                                 "--namesrv-port", str(ns), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        namesrv = f"127.0.0.1:{ns}"
        try:
            proc.stdout.readline()  # the "ready" line
            conn = Conn(f"127.0.0.1:{port}")
            print(f"{'request':<36} {'queues':>6} {'median µs':>10} {'p99 µs':>8} "
                  f"{'× max-offset':>12}")
            for n in [int(x) for x in args.queues.split(",")]:
                topic, group = f"Status{n}", f"StatusCG{n}"
                conn.call(17, {"topic": topic, "readQueueNums": n, "writeQueueNums": n})
                c = PushConsumer(group, namesrv, {topic: "*"}, lambda m: True,
                                 long_poll_ms=15000).start()
                deadline = time.monotonic() + 120
                while len(c._impl.process_queues) < n + 1:  # its queues and the retry queue
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                base, _ = timed(conn, args.rounds, 30, {"topic": topic, "queueId": 0})
                print(f"{'GET_MAX_OFFSET (30)':<36} {n:>6} {base:>10.0f} {'':>8} {1.0:>12.1f}")
                med, p99 = timed(conn, args.rounds, 307, {"consumerGroup": group,
                                                          "clientId": c.client_id,
                                                          "jstackEnable": "false"})
                print(f"{'GET_CONSUMER_RUNNING_INFO (307)':<36} {n:>6} {med:>10.0f} {p99:>8.0f} "
                      f"{med / base:>12.1f}")
                c.shutdown()
            with Producer("DrainPG", namesrv) as p:
                for i in range(0, args.messages, 100):
                    p.send_batch("Drain", [b"x" * 100] * min(100, args.messages - i))
            rates: dict[bool, list[float]] = {True: [], False: []}
            for r in range(args.drains):
                for on in (True, False):
                    rates[on].append(drain(namesrv, "Drain", f"Drain{r}{int(on)}",
                                           args.messages, on))
            on, off = statistics.median(rates[True]), statistics.median(rates[False])
            print(f"drain {args.messages} msgs, 4 queues: with bookkeeping {on:,.0f} msg/s, "
                  f"without {off:,.0f} msg/s (with/without {on / off:.2f}; runs "
                  f"{[round(x) for x in rates[True]]} / {[round(x) for x in rates[False]]})")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
