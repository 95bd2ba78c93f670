"""The exactly-once sink's broker side alone (issue 35 §6): on loopback, one ``rocketstore serve``
broker takes N rows as plain batches (what the at-least-once sink sends), then N rows as
batches of half messages (what the exactly-once tasks send), then ends every half with
batched END_TRANSACTION COMMITs (what the exactly-once driver does after its decision), then N
rows as packed half messages (one half message a batch: what the exactly-once tasks send to a
broker with ``transactionPackEnable``) and their END.

For each phase: wall seconds and the broker's CPU seconds (its main process and its protocol
workers, read from ``/proc``). The END phase is the part of an exactly-once write that cannot
overlap the tasks, so its wall time against the plain send's is what bounds the sink's ratio.
Every row is counted on the broker afterwards (a plain pull of the target topic).

    .venv/bin/python benchmarks/bench_txn_end.py --rows 20000 --repeat 3 [--store default]
    .venv/bin/python benchmarks/bench_txn_end.py --rows 20000 --profile /tmp/end.svg
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its children still alive (utime + stime)."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        pids += [int(p) for p in kids.split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            total += (int(parts[11]) + int(parts[12])) / tck
        except (OSError, IndexError):
            pass
    return total


async def _run(srv, rows: int, size: int, batch: int, topic: str, pid: int, profile: str | None,
               profile_phase: str = "end") -> dict:
    from rocketstore.client.producer import AsyncProducer
    from rocketstore.client.transaction import send_half_run, send_packed_half
    from rocketstore.format.message import Message
    from rocketstore.spark import sink_transactions as st

    group = f"bench-{topic}"
    p = AsyncProducer(group, srv.namesrv, timeout_s=30, retries=0)
    await p.start()
    try:
        mqs = (await p.instance.route(topic, refresh=True)).write_queues
        body = os.urandom(size)
        chunks = [[Message(topic, body, properties={"row": str(i + k)})
                   for k in range(min(batch, rows - i))] for i in range(0, rows, batch)]
        sem = asyncio.Semaphore(8)

        async def plain(k: int, msgs: list) -> None:
            async with sem:
                await p.send_batch(topic, msgs, mq=mqs[k % len(mqs)])

        c0, t0 = _cpu_s(pid), time.perf_counter()
        await asyncio.gather(*[plain(k, c) for k, c in enumerate(chunks)])
        plain_wall, plain_cpu = time.perf_counter() - t0, _cpu_s(pid) - c0

        halves: list = []

        async def half(k: int, msgs: list) -> None:
            mq = mqs[k % len(mqs)]
            async with sem:
                run = await send_half_run(p, topic, msgs, mq, {st.TXN_PROPERTY: "bench/0/x"})
            halves.append(st.HalfRun.of_run(topic, mq.broker_name, *run))

        def spy_on(phase: str):
            if not profile or phase != profile_phase:
                return None
            spy = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "-o", profile, "-r", "1000", "--gil", "-f", "raw",
                                    "--pid", str(pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            return spy

        def spy_off(spy) -> None:
            if spy is not None:
                time.sleep(0.3)
                spy.send_signal(2)
                spy.wait(30)

        async def measured(phase: str, work) -> tuple:
            """(``work``'s result, wall seconds, broker CPU seconds), profiled when asked."""
            spy = spy_on(phase)
            c0, t0 = _cpu_s(pid), time.perf_counter()
            out = await work
            wall, cpu = time.perf_counter() - t0, _cpu_s(pid) - c0
            spy_off(spy)
            return out, wall, cpu

        _, half_wall, half_cpu = await measured(
            "half", asyncio.gather(*[half(k, c) for k, c in enumerate(chunks)]))
        failed, end_wall, end_cpu = await measured(
            "end", st.end_halves(p.instance, group, halves, True))

        packed = st.TaskHalves("bench", "0")

        async def pack(k: int, msgs: list) -> None:
            mq = mqs[k % len(mqs)]
            async with sem:
                ref = await send_packed_half(p, topic, msgs, mq, {st.TXN_PROPERTY: "bench/0/y"})
            packed.add_one(topic, mq.broker_name, ref.queue_offset, ref.commitlog_offset,
                           ref.msg_id, rows=len(msgs))

        _, pack_wall, pack_cpu = await measured(
            "pack", asyncio.gather(*[pack(k, c) for k, c in enumerate(chunks)]))
        pack_failed, pack_end_wall, pack_end_cpu = await measured(
            "pack_end", st.end_halves(p.instance, group, packed.runs, True))
    finally:
        await p.shutdown()
    return {"plain_wall_s": plain_wall, "plain_cpu_s": plain_cpu, "half_wall_s": half_wall,
            "half_cpu_s": half_cpu, "end_wall_s": end_wall, "end_cpu_s": end_cpu,
            "end_failed": failed, "pack_wall_s": pack_wall, "pack_cpu_s": pack_cpu,
            "pack_end_wall_s": pack_end_wall, "pack_end_cpu_s": pack_end_cpu,
            # a packed half that failed to end leaves all its rows out
            "pack_end_failed": pack_failed * a_batch(chunks)}


def a_batch(chunks: list) -> int:
    return len(chunks[0]) if chunks else 0


def _count(srv, topic: str, want: int, wait_s: float = 30.0) -> int:
    """Messages in the topic's consume queues, once the broker has dispatched ``want`` of them
    (or ``wait_s`` passed: then what it has)."""
    from rocketstore.client.consumer import PullConsumer
    deadline = time.monotonic() + wait_s
    with PullConsumer("bench-count", srv.namesrv) as c:
        while True:
            n = sum(c.max_offset(topic, q) - c.min_offset(topic, q) for q in range(8))
            if n >= want or time.monotonic() > deadline:
                return n
            time.sleep(0.2)


def _routed(ns: str, topic: str) -> bool:
    from rocketstore.client._sync import LoopThread
    from rocketstore.client.consumer import PullConsumer
    with PullConsumer("bench-probe", ns) as c:
        try:
            return len(LoopThread.shared().run(c.instance.route(topic, refresh=True)).write_queues) == 8
        except Exception:
            return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store", choices=("small", "default"), default="default",
                    help="as bench_spark_sink.py's: serve's own sizes, or the tests' (small)")
    ap.add_argument("--profile", help="py-spy raw profile (--gil) of the broker during the "
                    "last run's --profile-phase")
    ap.add_argument("--profile-phase", choices=("half", "end", "pack", "pack_end"),
                    default="end")
    a = ap.parse_args()
    from rocketstore.client import AdminClient
    from bench_spark_sink import start_txn_broker
    from tests.cluster.conftest import wait_for
    tmp = tempfile.mkdtemp(prefix="bench-txn-end-")
    srv = start_txn_broker(tmp, a.store, True)
    runs = []
    try:
        for r in range(a.repeat):
            topic = f"BenchEnd{r}"
            with AdminClient(namesrv=srv.namesrv) as adm:
                adm.create_topic(topic, 8, 8)
            wait_for(lambda: _routed(srv.namesrv, topic))
            out = asyncio.run(_run(srv, a.rows, a.size, a.batch, topic, srv.proc.pid,
                                   a.profile if r == a.repeat - 1 else None,
                                   a.profile_phase))
            out["expected"] = 3 * a.rows - out["end_failed"] - out["pack_end_failed"]
            out["stored"] = _count(srv, topic, out["expected"])
            runs.append(out)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                              for k, v in out.items()}), file=sys.stderr)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    warm = runs[1:] or runs
    summary = {"rows": a.rows, "store": a.store, "runs": runs,
               "median_end_over_plain_wall": statistics.median(
                   r["end_wall_s"] / r["plain_wall_s"] for r in warm),
               "median_end_cpu_s": statistics.median(r["end_cpu_s"] for r in warm),
               "median_plain_cpu_s": statistics.median(r["plain_cpu_s"] for r in warm),
               "median_pack_cpu_s": statistics.median(r["pack_cpu_s"] for r in warm),
               "median_pack_end_cpu_s": statistics.median(r["pack_end_cpu_s"] for r in warm),
               "median_pack_end_over_plain_wall": statistics.median(
                   r["pack_end_wall_s"] / r["plain_wall_s"] for r in warm),
               "load": os.getloadavg()[0]}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
