"""Broker throughput and latency on loopback: rocketstore vs Redis Streams vs NATS JetStream.

Question: how many 1 KiB messages per second does ``rocketstore serve`` take and give, and how
long does a message take from send to a long-polling consumer — next to Redis Streams and NATS
JetStream at equal durability (acknowledged once in the server's page cache, fsynced about every
second or later: our ASYNC_FLUSH, Redis ``appendonly yes`` + ``appendfsync everysec``, JetStream
file storage)?

Workloads (the same for the three systems, each from Python asyncio clients in this process):
  send-1x1     one message per request, 1 connection, each awaited before the next
  send-1x8     the same on 8 connections at once
  send-32x1    batches of 32 (ours: SEND_BATCH_MESSAGE; Redis: pipelined XADD; NATS: 32
               publishes awaited together), 1 connection
  send-32x8    the same on 8 connections
  pull         read everything back, 32 per request
  e2e          p50/p99 from just before send to receipt by a long-polling consumer
               (ours: PULL with SUSPEND; Redis: XREAD BLOCK; NATS: pull-consumer fetch)

Usage: python benchmarks/bench_broker.py [--messages 10000] [--batch-messages 64000]
       [--latency-messages 2000] [--only rocketstore,redis,nats] [--json out.json]
Needs redis-server, nats-server on PATH and the redis / nats-py packages; a missing one is
reported and skipped.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable
from netutil import free_port, wait_port

BODY = b"x" * 1024
TOPIC = "BenchTopic"




def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


async def timed(n: int, fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await fn()
    return n / (time.perf_counter() - t0)


# ---- rocketstore ------------------------------------------------------------------------------
class RocketStoreTarget:
    name = "rocketstore"

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        port, ns = free_port(), free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "serve", "--store",
             os.path.join(self.workdir, "rocketstore"), "--port", str(port), "--namesrv-port",
             str(ns), "--json", "--default-topic-queue-nums", "8",
             "-o", "mapped_file_size_commitlog=268435456"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready = json.loads(self.proc.stdout.readline())
        self.namesrv = ready["namesrv"]

    def stop(self) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    async def send_single(self, n: int, conns: int) -> float:
        from rocketstore.client import AsyncProducer
        prods = [AsyncProducer("bench", self.namesrv) for _ in range(conns)]
        for p in prods:
            await p.send(TOPIC, BODY)  # warm route + connection

        async def worker(p, k):
            for _ in range(k):
                await p.send(TOPIC, BODY)
        rate = await timed(n, lambda: asyncio.gather(*(worker(p, n // conns) for p in prods)))
        for p in prods:
            await p.shutdown()
        return rate

    async def send_batch(self, n: int, conns: int, size: int = 32) -> float:
        from rocketstore.client import AsyncProducer
        prods = [AsyncProducer("bench", self.namesrv) for _ in range(conns)]
        batch = [BODY] * size
        for p in prods:
            await p.send_batch(TOPIC, batch)

        async def worker(p, k):
            for _ in range(k):
                await p.send_batch(TOPIC, batch)
        rate = await timed(n, lambda: asyncio.gather(
            *(worker(p, n // conns // size) for p in prods)))
        for p in prods:
            await p.shutdown()
        return rate

    async def pull_all(self) -> tuple[float, int]:
        from rocketstore.client import AsyncPullConsumer
        c = AsyncPullConsumer("bench-pull", self.namesrv)
        queues = await c.queues(TOPIC)
        total = 0

        async def drain():
            nonlocal total
            for q in queues:
                off = 0
                while True:
                    r = await c.pull(TOPIC, q.queue_id, off, 32)
                    if not r.messages:
                        break
                    total += len(r.messages)
                    off = r.next_begin_offset
        t0 = time.perf_counter()
        await drain()
        rate = total / (time.perf_counter() - t0)
        await c.shutdown()
        return rate, total

    async def latency(self, n: int) -> list[float]:
        from rocketstore.client import AsyncProducer, AsyncPullConsumer
        topic = "BenchLatency"
        p = AsyncProducer("bench-lat", self.namesrv)
        c = AsyncPullConsumer("bench-lat", self.namesrv)
        await p.send(topic, BODY, queue_id=0)
        start = await c.max_offset(topic, 0)
        lat: list[float] = []

        async def consume():
            off = start
            while len(lat) < n:
                r = await c.pull(topic, 0, off, 32, suspend_ms=15_000)
                now = time.perf_counter()
                for m in r.messages:
                    lat.append(now - float(m.properties["t"]))
                off = r.next_begin_offset
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        for _ in range(n):
            await p.send(topic, BODY, queue_id=0, properties={"t": repr(time.perf_counter())})
            await asyncio.sleep(0.001)
        await asyncio.wait_for(task, 60)
        await p.shutdown()
        await c.shutdown()
        return lat


# ---- Redis Streams ----------------------------------------------------------------------------
class RedisTarget:
    name = "redis"

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.join(workdir, "redis")
        os.makedirs(self.workdir)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             self.workdir, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
             "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(30)

    def _client(self):
        import redis.asyncio as aioredis
        return aioredis.Redis(host="127.0.0.1", port=self.port)

    async def send_single(self, n: int, conns: int) -> float:
        clients = [self._client() for _ in range(conns)]
        for r in clients:
            await r.xadd(TOPIC, {"b": BODY})

        async def worker(r, k):
            for _ in range(k):
                await r.xadd(TOPIC, {"b": BODY})
        rate = await timed(n, lambda: asyncio.gather(*(worker(r, n // conns) for r in clients)))
        for r in clients:
            await r.aclose()
        return rate

    async def send_batch(self, n: int, conns: int, size: int = 32) -> float:
        clients = [self._client() for _ in range(conns)]

        async def worker(r, k):
            for _ in range(k):
                pipe = r.pipeline(transaction=False)
                for _ in range(size):
                    pipe.xadd(TOPIC, {"b": BODY})
                await pipe.execute()
        rate = await timed(n, lambda: asyncio.gather(
            *(worker(r, n // conns // size) for r in clients)))
        for r in clients:
            await r.aclose()
        return rate

    async def pull_all(self) -> tuple[float, int]:
        r = self._client()
        total, last = 0, "0-0"
        t0 = time.perf_counter()
        while True:
            res = await r.xread({TOPIC: last}, count=32)
            if not res:
                break
            entries = res[0][1]
            total += len(entries)
            last = entries[-1][0]
        rate = total / (time.perf_counter() - t0)
        await r.aclose()
        return rate, total

    async def latency(self, n: int) -> list[float]:
        prod, cons = self._client(), self._client()
        stream = "BenchLatency"
        await prod.xadd(stream, {"b": BODY, "t": "0"})
        last = (await prod.xinfo_stream(stream))["last-generated-id"]
        lat: list[float] = []

        async def consume():
            nonlocal last
            while len(lat) < n:
                res = await cons.xread({stream: last}, count=32, block=15_000)
                now = time.perf_counter()
                for mid, fields in (res[0][1] if res else []):
                    lat.append(now - float(fields[b"t"]))
                    last = mid
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        for _ in range(n):
            await prod.xadd(stream, {"b": BODY, "t": repr(time.perf_counter())})
            await asyncio.sleep(0.001)
        await asyncio.wait_for(task, 60)
        await prod.aclose()
        await cons.aclose()
        return lat


# ---- NATS JetStream ---------------------------------------------------------------------------
class NatsTarget:
    name = "nats"

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.join(workdir, "nats")
        os.makedirs(self.workdir)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["nats-server", "-js", "-sd", self.workdir, "-a", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        asyncio.run(self._setup())

    async def _setup(self) -> None:
        nc, js = await self._connect()
        from nats.js.api import StorageType
        await js.add_stream(name="BENCH", subjects=["bench.>"], storage=StorageType.FILE)
        await nc.close()

    async def _connect(self):
        import nats
        nc = await nats.connect(f"nats://127.0.0.1:{self.port}")
        return nc, nc.jetstream()

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(30)

    async def send_single(self, n: int, conns: int) -> float:
        pairs = [await self._connect() for _ in range(conns)]

        async def worker(js, k):
            for _ in range(k):
                await js.publish("bench.data", BODY)
        rate = await timed(n, lambda: asyncio.gather(*(worker(js, n // conns) for _, js in pairs)))
        for nc, _ in pairs:
            await nc.close()
        return rate

    async def send_batch(self, n: int, conns: int, size: int = 32) -> float:
        pairs = [await self._connect() for _ in range(conns)]

        async def worker(js, k):
            for _ in range(k):
                await asyncio.gather(*(js.publish("bench.data", BODY) for _ in range(size)))
        rate = await timed(n, lambda: asyncio.gather(
            *(worker(js, n // conns // size) for _, js in pairs)))
        for nc, _ in pairs:
            await nc.close()
        return rate

    async def pull_all(self) -> tuple[float, int]:
        import nats.errors
        nc, js = await self._connect()
        sub = await js.pull_subscribe("bench.data", durable="bench-pull")
        total = 0
        t0 = time.perf_counter()
        while True:
            try:
                msgs = await sub.fetch(32, timeout=0.5)
            except nats.errors.TimeoutError:
                break
            total += len(msgs)
        rate = total / (time.perf_counter() - t0 - 0.5)  # minus the final empty wait
        await nc.close()
        return rate, total

    async def latency(self, n: int) -> list[float]:
        import nats.errors
        nc, js = await self._connect()
        pnc, pjs = await self._connect()
        sub = await js.pull_subscribe("bench.lat", durable="bench-lat")
        lat: list[float] = []

        async def consume():
            while len(lat) < n:
                try:
                    msgs = await sub.fetch(32, timeout=15)
                except nats.errors.TimeoutError:
                    continue
                now = time.perf_counter()
                for m in msgs:
                    lat.append(now - float(m.headers["t"]))
                    await m.ack()
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        for _ in range(n):
            await pjs.publish("bench.lat", BODY, headers={"t": repr(time.perf_counter())})
            await asyncio.sleep(0.001)
        await asyncio.wait_for(task, 60)
        await nc.close()
        await pnc.close()
        return lat


# ---- driver -----------------------------------------------------------------------------------
def available(name: str) -> str | None:
    """Why a target cannot run here, or None."""
    if name == "redis":
        if not shutil.which("redis-server"):
            return "redis-server not installed (apt-get install redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "python package redis not installed"
    if name == "nats":
        if not shutil.which("nats-server"):
            return "nats-server not installed (apt-get install nats-server)"
        try:
            import nats  # noqa: F401
        except ImportError:
            return "python package nats-py not installed"
    return None


def run_target(cls, workdir: str, args) -> dict:
    t = cls(workdir)
    t.start()
    try:
        out: dict[str, Any] = {}
        out["send-1x1"] = asyncio.run(t.send_single(args.messages, 1))
        out["send-1x8"] = asyncio.run(t.send_single(args.messages, 8))
        out["send-32x1"] = asyncio.run(t.send_batch(args.batch_messages, 1))
        out["send-32x8"] = asyncio.run(t.send_batch(args.batch_messages, 8))
        out["pull"], out["pulled"] = asyncio.run(t.pull_all())
        lat = asyncio.run(t.latency(args.latency_messages))
        out["e2e-p50-ms"] = pct(lat, 50) * 1000
        out["e2e-p99-ms"] = pct(lat, 99) * 1000
        return out
    finally:
        t.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--batch-messages", type=int, default=64_000)
    ap.add_argument("--latency-messages", type=int, default=2_000)
    ap.add_argument("--only", default="rocketstore,redis,nats")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    targets = {"rocketstore": RocketStoreTarget, "redis": RedisTarget, "nats": NatsTarget}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as workdir:
        for name in args.only.split(","):
            why = available(name)
            if why:
                print(f"{name}: skipped: {why}", file=sys.stderr)
                results[name] = {"skipped": why}
                continue
            print(f"{name}: running", file=sys.stderr)
            results[name] = run_target(targets[name], workdir, args)
    cols = ["send-1x1", "send-1x8", "send-32x1", "send-32x8", "pull", "e2e-p50-ms", "e2e-p99-ms"]
    print("| system | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name, r in results.items():
        if "skipped" in r:
            print(f"| {name} | skipped: {r['skipped']} |")
            continue
        cells = [f"{r[c]:,.0f}" if not c.startswith("e2e") else f"{r[c]:.2f}" for c in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if "rocketstore" in results and "skipped" not in results["rocketstore"]:
        ours = results["rocketstore"]
        for other in ("redis", "nats"):
            r = results.get(other)
            if not r or "skipped" in r:
                continue
            ratios = [f"{c} {ours[c] / r[c]:.2f}x" for c in cols if not c.startswith("e2e")]
            ratios += [f"{c} {r[c] / ours[c]:.2f}x" for c in cols if c.startswith("e2e")]
            print(f"rocketstore vs {other} (>1 = rocketstore better): " + ", ".join(ratios))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
