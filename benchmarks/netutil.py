"""Loopback helpers shared by the benchmark scripts (run as ``python benchmarks/bench_*.py``)."""
from __future__ import annotations

import socket
import time
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


async def send_and_pull(namesrv: str, topic: str, body: bytes, n: int, conns: int = 8,
                        credentials: Any = None) -> tuple[float, float]:
    """(sends/s, pulled msgs/s): ``n`` sends from ``conns`` producer connections, then one
    consumer drains every queue of ``topic`` 32 at a time (our Python client, signing when
    ``credentials`` are given)."""
    import asyncio

    from rocketstore.client import AsyncProducer, AsyncPullConsumer
    prods = [AsyncProducer("bench", namesrv, credentials=credentials) for _ in range(conns)]
    for p in prods:
        await p.send(topic, body)

    async def worker(p, k):
        for _ in range(k):
            await p.send(topic, body)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(p, n // conns) for p in prods))
    send_rate = n / (time.perf_counter() - t0)
    for p in prods:
        await p.shutdown()
    c = AsyncPullConsumer("bench-pull", namesrv, credentials=credentials)
    total = 0
    t0 = time.perf_counter()
    for q in await c.queues(topic):
        off = 0
        while True:
            r = await c.pull(topic, q.queue_id, off, 32)
            if not r.messages:
                break
            total += len(r.messages)
            off = r.next_begin_offset
    pull_rate = total / (time.perf_counter() - t0)
    await c.shutdown()
    return send_rate, pull_rate


def ab_report(out: dict, rates: dict, base: str, other: str) -> None:
    """Print and record (in ``out``) the median send and pull rates of two alternated kinds of
    broker, and ``other`` over ``base``."""
    import statistics
    print(f"{'':8} {'send msg/s (median)':>20} {'pull msg/s (median)':>20}")
    for kind in (base, other):
        s = statistics.median(r[0] for r in rates[kind])
        p = statistics.median(r[1] for r in rates[kind])
        out[kind] = {"send": s, "pull": p, "runs": rates[kind]}
        print(f"{kind:8} {s:20,.0f} {p:20,.0f}")
    out["send_ratio"] = out[other]["send"] / out[base]["send"]
    out["pull_ratio"] = out[other]["pull"] / out[base]["pull"]
    print(f"{other}/{base}: send {out['send_ratio']:.3f}, pull {out['pull_ratio']:.3f}")
