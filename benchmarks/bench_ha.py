"""Master/slave replication, rocketstore next to RocketMQ 4.9.7's Java pair, same machine, one run.

Questions (issue 22):
  sync     SYNC_MASTER send TPS with RocketMQ's benchmark Producer (``producer-bench -w 16``,
           1 KiB bodies): every send waits for the slave's acknowledgement
  async    the same on an ASYNC_MASTER pair (what waiting for the slave costs)
  lag      ASYNC_MASTER replication lag under a steady load (``producer-bench -w 8``): the time
           from a master's CommitLog end to the slave holding it, p50/p99 (both brokers' runtime
           ``commitLogMaxOffset`` sampled every 20 ms; resolution about one sampling period)
  catchup  a fresh, empty slave joining a master that holds MB of data in its last CommitLog file
           (RocketMQ starts an empty slave there): MB/s from the slave's first byte to equal
           offsets (and from its start, which includes RocketMQ's 5 s first-report delay)

Pairs: ours = ``rocketstore namesrv`` + two ``rocketstore serve`` (SYNC_MASTER or ASYNC_MASTER /
SLAVE); java = RocketMQ's namesrv + two Java brokers (512 MiB heap each). Both ASYNC_FLUSH,
1 GiB CommitLog files, 127.0.0.1, stopped by PID.

Usage:
  ROCKETMQ_HOME=/work/rmq-java python benchmarks/bench_ha.py [--pairs ours,java]
      [--parts sync,lag,catchup] [--seconds 22] [--catchup-mb 128] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv  # noqa: E402
from tests.ha.procs import start_broker, start_namesrv  # noqa: E402

# RocketMQ's benchmark Producer: 4.9.7 prints "Send TPS: n Max RT(ms): ...", 5.x (the referee's
# producer-bench) separates the fields with " | "
JAVA_TPS = re.compile(r"Send TPS: (\d+)[ |]*Max RT\(ms\): (\d+)[ |]*Average RT\(ms\):\s*([\d.]+)[ |]*"
                      r"Send Failed: (\d+)[ |]*Response Failed: (\d+)")
GIB = 1 << 30
JAVA_KEYS = {"mappedFileSizeCommitLog": GIB, "brokerClusterName": "HaCluster",
             "brokerIP2": "127.0.0.1", "slaveTimeout": 3000}
OURS_KEYS = {"mappedFileSizeCommitLog": GIB, "mappedFileSizeConsumeQueue": 6000000,
             "maxHashSlotNum": 5000000, "maxIndexNum": 20000000, "slaveTimeout": 3000,
             "haSendHeartbeatInterval": 5000}


class Pair:
    def __init__(self, kind: str, workdir: str, role: str, home: str | None) -> None:
        self.kind, self.workdir, self.role, self.home = kind, workdir, role, home
        self.procs: list = []
        self.ns = self.master = self.slave = None

    def start(self, with_slave: bool = True) -> "Pair":
        w = self.workdir
        if self.kind == "java":
            os.environ["BROKER_HEAP"] = "512m"
            self.ns = start_java_namesrv(self.home, f"{w}/ns")
            self.master = start_java_broker(self.home, f"{w}/m", self.ns.addr, "broker-ha",
                                            "HaCluster", {**JAVA_KEYS, "brokerRole": self.role})
        else:
            self.ns = start_namesrv(f"{w}/ns")
            self.master = start_broker(f"{w}/m", self.ns.addr, self.role, **OURS_KEYS)
        self.procs += [self.ns, self.master]
        if with_slave:
            self.start_slave()
        return self

    def start_slave(self) -> None:
        w = self.workdir
        if self.kind == "java":
            self.slave = start_java_broker(self.home, f"{w}/s", self.ns.addr, "broker-ha", "HaCluster",
                                           {**JAVA_KEYS, "brokerRole": "SLAVE", "brokerId": 1})
        else:
            self.slave = start_broker(f"{w}/s", self.ns.addr, "SLAVE", **OURS_KEYS)
        self.procs.append(self.slave)

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001 - best effort at the end of a run
                pass


def runtime_max_offset(admin, addr: str) -> int:
    from rocketstore.errors import BrokerError
    try:
        return int(admin.runtime_info(addr).get("commitLogMaxOffset", "0"))
    except BrokerError:  # a Java broker with an empty CommitLog cannot answer it yet
        return 0


def producer_bench(home: str, ns: str, topic: str, threads: int, seconds: float, size: int = 1024,
                   workdir: str = "/tmp") -> dict:
    env = {**os.environ, "HOME": workdir, "BENCH_HEAP": "512m"}
    env.pop("ROCKETMQ_HOME", None)
    p = subprocess.Popen([f"{home}/producer-bench", "-n", ns, "-t", topic, "-s", str(size),
                          "-w", str(threads)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    windows = [(int(a), int(b), float(c), int(d) + int(e)) for a, b, c, d, e in JAVA_TPS.findall(out)]
    if not windows:
        return {"error": "producer-bench printed no TPS line", "output": out[-500:]}
    tps, max_rt, avg_rt, failed = windows[-1]
    return {"msgs_per_s": tps, "avg_ms": avg_rt, "max_ms": max_rt, "failed": failed,
            "windows": [w[0] for w in windows]}


def warm(ns: str, topic: str, timeout: float = 60.0) -> str:
    """Send until a send is SEND_OK (topic created, slave replicating); the last status."""
    from rocketstore.client.producer import Producer
    deadline = time.monotonic() + timeout
    last = "none"
    with Producer("ha-bench-warm", ns) as p:
        while time.monotonic() < deadline:
            try:
                last = p.send(topic, b"warm").status
            except Exception as exc:  # noqa: BLE001 - the topic appears with the first sends
                last = str(exc)
            if last == "SEND_OK":
                return last
            time.sleep(0.2)
    return last


def part_sync(kind: str, home: str, work: str, seconds: float, role: str = "SYNC_MASTER") -> dict:
    pair = Pair(kind, f"{work}/{kind}-{role}", role, home).start()
    try:
        status = warm(pair.ns.addr, "HaBench")
        if status != "SEND_OK":
            return {"error": f"no SEND_OK from the pair: {status}"}
        r = producer_bench(home, pair.ns.addr, "HaBench", 16, seconds, workdir=work)
        from rocketstore.client.admin import AdminClient
        with AdminClient(namesrv=pair.ns.addr) as admin:
            m = runtime_max_offset(admin, pair.master.addr)
            time.sleep(1.0)
            s = runtime_max_offset(admin, pair.slave.addr)
        r["slave_equal_after_run"] = s == m
        return r
    finally:
        pair.stop()


def part_lag(kind: str, home: str, work: str, seconds: float) -> dict:
    from rocketstore.client.admin import AdminClient
    pair = Pair(kind, f"{work}/{kind}-lag", "ASYNC_MASTER", home).start()
    try:
        warm(pair.ns.addr, "HaLag")
        # until the slave is replicating (Java: ~5 s after it connects)
        with AdminClient(namesrv=pair.ns.addr) as admin:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and runtime_max_offset(admin, pair.slave.addr) < \
                    runtime_max_offset(admin, pair.master.addr):
                time.sleep(0.2)
            samples_m: list[tuple[float, int]] = []
            samples_s: list[tuple[float, int]] = []
            stop = threading.Event()

            def sample() -> None:
                with AdminClient(namesrv=pair.ns.addr) as a2:
                    while not stop.is_set():
                        t = time.monotonic()
                        samples_m.append((t, runtime_max_offset(a2, pair.master.addr)))
                        samples_s.append((time.monotonic(), runtime_max_offset(a2, pair.slave.addr)))
                        time.sleep(0.02)
            th = threading.Thread(target=sample)
            th.start()
            load = producer_bench(home, pair.ns.addr, "HaLag", 8, seconds, workdir=work)
            stop.set()
            th.join()
        lags = []
        j = 0
        for t, off in samples_m:  # the first slave sample at or after t holding off
            while j < len(samples_s) and (samples_s[j][0] < t or samples_s[j][1] < off):
                j += 1
            if j < len(samples_s):
                lags.append(samples_s[j][0] - t)
        lags.sort()
        if not lags:
            return {"error": "no lag samples", "load": load}
        return {"samples": len(lags), "p50_ms": round(lags[len(lags) // 2] * 1e3, 1),
                "p99_ms": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1e3, 1),
                "max_ms": round(lags[-1] * 1e3, 1), "load_msgs_per_s": load.get("msgs_per_s")}
    finally:
        pair.stop()


def part_catchup(kind: str, home: str, work: str, mb: int) -> dict:
    from rocketstore.client.admin import AdminClient
    from rocketstore.client.producer import AsyncProducer
    pair = Pair(kind, f"{work}/{kind}-catchup", "ASYNC_MASTER", home).start(with_slave=False)
    try:
        warm(pair.ns.addr, "HaFill")
        body = os.urandom(16 * 1024)

        async def fill() -> None:
            p = AsyncProducer("ha-bench-fill", pair.ns.addr)
            n = mb * 1024 // 16

            async def worker(k: int) -> None:
                for _ in range(k):
                    await p.send("HaFill", body)
            await asyncio.gather(*(worker(n // 8) for _ in range(8)))
            await p.shutdown()
        asyncio.run(fill())
        with AdminClient(namesrv=pair.ns.addr) as admin:
            target = runtime_max_offset(admin, pair.master.addr)
            t0 = time.monotonic()
            pair.start_slave()
            first = None
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                s = runtime_max_offset(admin, pair.slave.addr)
                if s > 0 and first is None:
                    first = (time.monotonic(), s)
                if s >= target:
                    break
                time.sleep(0.05)
            done = time.monotonic()
        if first is None or s < target:
            return {"error": "the slave did not catch up", "target": target}
        copied = target - first[1]
        return {"bytes": target, "seconds_from_start": round(done - t0, 2),
                "seconds_from_first_byte": round(done - first[0], 2),
                "mb_per_s_from_first_byte": round(copied / max(1e-3, done - first[0]) / 2**20, 1),
                "mb_per_s_from_start": round(target / (done - t0) / 2**20, 1)}
    finally:
        pair.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", default="ours,java")
    ap.add_argument("--parts", default="sync,lag,catchup")
    ap.add_argument("--seconds", type=float, default=22.0)
    ap.add_argument("--catchup-mb", type=int, default=128)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        sys.exit("needs ROCKETMQ_HOME (the Java build) for RocketMQ's benchmark Producer")
    work = tempfile.mkdtemp(prefix="bench-ha-")
    out: dict = {"load_before": os.getloadavg()[0]}
    try:
        for part in args.parts.split(","):
            for kind in args.pairs.split(","):
                t = time.time()
                if part == "sync":
                    r = part_sync(kind, home, work, args.seconds)
                elif part == "async":  # the same load on an ASYNC_MASTER pair, for the cost of SYNC
                    r = part_sync(kind, home, work, args.seconds, "ASYNC_MASTER")
                elif part == "lag":
                    r = part_lag(kind, home, work, args.seconds)
                else:
                    r = part_catchup(kind, home, work, args.catchup_mb)
                r["load"] = round(os.getloadavg()[0], 1)
                r["utc"] = time.strftime("%H:%M", time.gmtime(t))
                out[f"{part}/{kind}"] = r
                print(part, kind, json.dumps(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
