"""``rocketstore serve`` next to Apache RocketMQ 4.9.7's Java broker, on the same machine, in one run.

Question (issue 11): how many 1 KiB single sends per second does each broker take, at what p50/p99
round trip, from 1, 8 and 16 concurrent senders (ASYNC_FLUSH, and SYNC_FLUSH with 16), and how
fast does a new consumer group drain a page-cached backlog?

Clients (each in its own processes, so the client is not the broker's bottleneck; their CPU
seconds are reported):
  java    RocketMQ's own benchmark Producer (``producer-bench -w THREADS``: one connection,
          THREADS synchronous senders) and Consumer (``consumer-bench``), 4.x remoting clients
  python  ``rocketstore.client.AsyncProducer``: PROCS processes x CONNS connections, each
          connection one synchronous sender; every round trip timed (p50/p99)
  cpp     Apache's C++ client (PyPI ``rocketmq==0.4.4``, built into ``.cache/interop-venv`` as
          the interop test does): PROCS processes, one ``send_sync`` loop each, timed

Usage:
  python benchmarks/bench_vs_java.py [--brokers ours,java] [--clients java,python,cpp]
      [--seconds 12] [--senders 1,8,16] [--sync] [--backlog 200000] [--json out.json]
Needs ROCKETMQ_HOME (``/work/rmq-java`` here) for the Java broker and clients; without it the
Java parts are skipped with a note. Everything binds 127.0.0.1 and is stopped by PID.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from netutil import free_port, wait_port

ROOT = Path(__file__).resolve().parents[1]
BODY = b"x" * 1024
# RocketMQ's benchmark Producer: 4.9.7 prints "Send TPS: n Max RT(ms): ...", 5.x (the referee's
# producer-bench) separates the fields with " | "
JAVA_TPS = re.compile(r"Send TPS: (\d+)[ |]*Max RT\(ms\): (\d+)[ |]*Average RT\(ms\):\s*([\d.]+)[ |]*"
                      r"Send Failed: (\d+)[ |]*Response Failed: (\d+)")
# the benchmark Consumer: 4.9.7 "TPS: n FAIL TPS: ...", 5.x "Consume TPS: n | AVG(B2C) ..."
JAVA_CONSUME = re.compile(r"TPS: (\d+)(?: FAIL| \| AVG)")




def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (all threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def child_pids(pid: int) -> list[int]:
    """The live child processes of ``pid`` (a multi-process broker's workers)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# ---- brokers -------------------------------------------------------------------------------------
class OurBroker:
    name = "rocketstore"

    def __init__(self, workdir: str, sync: bool, workers: int | None = None) -> None:
        self.dir = os.path.join(workdir, f"ours-{workers}" if workers else "ours")
        if workers:
            self.name = f"rocketstore:{workers}"
        self.sync = sync
        self.workers = workers  # serve --workers (None: the default, one per core)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        port, ns = free_port(), free_port()
        flush = "SYNC_FLUSH" if self.sync else "ASYNC_FLUSH"
        extra = ["--workers", str(self.workers)] if self.workers else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "serve", "--store", self.dir, "--port",
             str(port), "--namesrv-port", str(ns), "--json", "--default-topic-queue-nums", "8",
             "-o", "mapped_file_size_commitlog=1073741824", "-o", f"flush_disk_type={flush}",
             *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready = json.loads(self.proc.stdout.readline())
        self.namesrv = ready["namesrv"]
        self.pids = [self.proc.pid] + child_pids(self.proc.pid)  # the worker processes too

    def stop(self) -> None:
        stop(self.proc)


class JavaBroker:
    name = "java-4.9.7"

    def __init__(self, workdir: str, sync: bool, home: str) -> None:
        self.dir = os.path.join(workdir, "java")
        os.makedirs(self.dir, exist_ok=True)
        self.sync = sync
        self.home = home
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        ns_port, port = free_port(), free_port()
        ns_conf = os.path.join(self.dir, "namesrv.conf")
        Path(ns_conf).write_text(f"listenPort={ns_port}\n")
        conf = os.path.join(self.dir, "broker.conf")
        Path(conf).write_text("\n".join([
            "brokerClusterName=DefaultCluster", "brokerName=broker-a", "brokerId=0",
            "brokerRole=ASYNC_MASTER", f"flushDiskType={'SYNC_FLUSH' if self.sync else 'ASYNC_FLUSH'}",
            f"listenPort={port}", f"namesrvAddr=127.0.0.1:{ns_port}", "brokerIP1=127.0.0.1",
            f"storePathRootDir={self.dir}/store", f"storePathCommitLog={self.dir}/store/commitlog",
            "autoCreateTopicEnable=true", "defaultTopicQueueNums=8", ""]))
        env = {**os.environ, "HOME": self.dir, "NAMESRV_HEAP": "512m", "BROKER_HEAP": "2g"}
        log = open(os.path.join(self.dir, "java.log"), "w")
        self.procs.append(subprocess.Popen([f"{self.home}/namesrv", "-c", ns_conf], env=env,
                                           stdout=log, stderr=subprocess.STDOUT))
        wait_port(ns_port)
        self.procs.append(subprocess.Popen([f"{self.home}/broker", "-c", conf], env=env,
                                           stdout=log, stderr=subprocess.STDOUT))
        wait_port(port)
        time.sleep(3)  # registration with the name server
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.pids = [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop(p)


# ---- clients -------------------------------------------------------------------------------------
def _python_sender(namesrv: str, topic: str, conns: int, seconds: float, q) -> None:
    from rocketstore.client import AsyncProducer
    from rocketstore.errors import BrokerError

    async def main() -> None:
        prods = [AsyncProducer("bench", namesrv) for _ in range(conns)]
        for p in prods:
            await p.send(topic, BODY)
        lat: list[float] = []
        failed = 0
        deadline = time.perf_counter() + seconds

        async def worker(p) -> None:
            nonlocal failed
            while True:
                t0 = time.perf_counter()
                if t0 >= deadline:
                    return
                try:
                    await p.send(topic, BODY)
                except (BrokerError, ConnectionError, TimeoutError):
                    failed += 1  # e.g. the Java broker's flow control: counted, not timed
                    continue
                lat.append(time.perf_counter() - t0)
        await asyncio.gather(*(worker(p) for p in prods))
        for p in prods:
            await p.shutdown()
        q.put((lat, failed))
    asyncio.run(main())


CPP_DRIVER = r'''
import sys, time, json
from rocketmq.client import Producer, Message
ns, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
p = Producer("bench_cpp_" + str(time.time_ns()), timeout=15000)
p.set_namesrv_addr(ns)
p.start()
body = "x" * 1024
def one():
    m = Message(topic); m.set_body(body); p.send_sync(m)
one()
lat, failed = [], 0
deadline = time.perf_counter() + seconds
while True:
    t0 = time.perf_counter()
    if t0 >= deadline:
        break
    try:
        one()
    except Exception:
        failed += 1
        continue
    lat.append(time.perf_counter() - t0)
p.shutdown()
print(json.dumps([lat, failed]))
'''


def cpp_python() -> str | None:
    py = ROOT / ".cache" / "interop-venv" / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import rocketmq.client"],
                                      capture_output=True, timeout=60).returncode == 0:
        return str(py)
    return None


def run_senders(kind: str, namesrv: str, topic: str, senders: int, seconds: float,
                java_home: str | None, workdir: str) -> dict:
    """Drive ``senders`` synchronous senders; returns rate, latency and client CPU."""
    cpu0 = children_cpu_s()
    t0 = time.perf_counter()
    lat: list[float] = []
    extra: dict = {}
    if kind == "python":
        procs_n = min(senders, max(1, os.cpu_count() or 1) * 2)
        per = [senders // procs_n + (1 if i < senders % procs_n else 0) for i in range(procs_n)]
        q: mp.Queue = mp.Queue()
        ps = [mp.Process(target=_python_sender, args=(namesrv, topic, c, seconds, q))
              for c in per]
        for p in ps:
            p.start()
        failed = 0
        for _ in ps:
            got, bad = q.get(timeout=seconds + 120)
            lat += got
            failed += bad
        for p in ps:
            p.join(30)
        extra["processes"] = procs_n
        extra["failed"] = failed
    elif kind == "cpp":
        py = cpp_python()
        if py is None:
            return {"skipped": "no .cache/interop-venv with rocketmq==0.4.4 (run the interop test)"}
        env = {**os.environ, "HOME": workdir}
        ps = [subprocess.Popen([py, "-c", CPP_DRIVER, namesrv, topic, str(seconds)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
              for _ in range(senders)]
        failed = 0
        for p in ps:
            out, _ = p.communicate(timeout=seconds + 120)
            lines = out.strip().splitlines()
            if not lines:
                failed += 1
                continue
            got, bad = json.loads(lines[-1])
            lat += got
            failed += bad
        extra["processes"] = senders
        extra["failed"] = failed
    elif kind == "java":
        if not java_home:
            return {"skipped": "ROCKETMQ_HOME not set"}
        run_s = max(seconds, 12) + 12  # it prints a 10 s window every 10 s
        env = {**os.environ, "HOME": workdir, "BENCH_HEAP": "512m"}
        p = subprocess.Popen([f"{java_home}/producer-bench", "-n", namesrv, "-t", topic, "-s",
                              "1024", "-w", str(senders)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=run_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            out, _ = p.communicate(timeout=30)
        windows = [(int(a), int(b), float(c), int(d) + int(e))
                   for a, b, c, d, e in JAVA_TPS.findall(out)]
        if not windows:
            return {"error": "producer-bench printed no TPS line", "output": out[-500:]}
        tps, max_rt, avg_rt, failed = windows[-1]
        return {"msgs_per_s": tps, "avg_ms": avg_rt, "max_ms": max_rt, "failed": failed,
                "client_cpu_s": round(children_cpu_s() - cpu0, 2),
                "client_cpu_per_msg_us": round((children_cpu_s() - cpu0) / max(1, tps * run_s) * 1e6, 1),
                "note": "producer-bench's last 10 s window; it reports average and max RT only"}
    wall = time.perf_counter() - t0
    n = len(lat)
    cpu = children_cpu_s() - cpu0
    return {"msgs_per_s": round(n / seconds), "p50_ms": round(pct(lat, 50) * 1e3, 3),
            "p99_ms": round(pct(lat, 99) * 1e3, 3), "messages": n,
            "client_cpu_s": round(cpu, 2), "client_cpu_per_msg_us": round(cpu / max(1, n) * 1e6, 1),
            "wall_s": round(wall, 1), **extra}


# ---- backlog drain -------------------------------------------------------------------------------
def _fill(namesrv: str, topic: str, n: int) -> None:
    from rocketstore.client import AsyncProducer

    async def main() -> None:
        p = AsyncProducer("bench-fill", namesrv)
        batch = [BODY] * 64
        qs = await p.queues(topic)
        sent = 0
        while sent < n:
            await asyncio.gather(*(p.send_batch(topic, batch, queue_id=q.queue_id) for q in qs))
            sent += 64 * len(qs)
        await p.shutdown()
    asyncio.run(main())


def drain_java_consumer(namesrv: str, topic: str, seconds: float, java_home: str,
                        workdir: str) -> dict:
    env = {**os.environ, "HOME": workdir, "BENCH_HEAP": "1g"}
    cpu0 = children_cpu_s()
    p = subprocess.Popen([f"{java_home}/consumer-bench", "-n", namesrv, "-t", topic, "-g",
                          f"drain{time.time_ns()}"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=max(seconds, 12) + 12)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    tps = [int(x) for x in JAVA_CONSUME.findall(out)]
    return {"windows_msgs_per_s": tps, "best_msgs_per_s": max(tps) if tps else None,
            "client_cpu_s": round(children_cpu_s() - cpu0, 2)}


def drain_python(namesrv: str, topic: str) -> dict:
    from rocketstore.client import AsyncPullConsumer

    async def main() -> dict:
        c = AsyncPullConsumer(f"drain{time.time_ns()}", namesrv)
        qs = await c.queues(topic)
        total = 0
        t0 = time.perf_counter()

        async def one(q) -> None:
            nonlocal total
            off = 0
            while True:
                r = await c.pull(topic, q.queue_id, off, 32)
                if not r.messages:
                    return
                total += len(r.messages)
                off = r.next_begin_offset
        await asyncio.gather(*(one(q) for q in qs))
        dt = time.perf_counter() - t0
        await c.shutdown()
        return {"messages": total, "msgs_per_s": round(total / dt)}
    return asyncio.run(main())


# ---- main ----------------------------------------------------------------------------------------
def bench_broker(broker, clients: list[str], senders: list[int], seconds: float,
                 java_home: str | None, workdir: str, backlog: int) -> dict:
    out: dict = {}
    broker.start()
    try:
        for kind in (c for c in clients if c):
            for s in senders:
                topic = f"Send_{kind}_{s}"
                load = os.getloadavg()[0]
                cpu0 = sum(proc_cpu_s(p) for p in broker.pids)
                r = run_senders(kind, broker.namesrv, topic, s, seconds, java_home, workdir)
                r["server_cpu_s"] = round(sum(proc_cpu_s(p) for p in broker.pids) - cpu0, 2)
                r["load_avg_1m"] = load
                out[f"send-{kind}-{s}"] = r
                print(broker.name, kind, s, json.dumps(r), file=sys.stderr, flush=True)
        if backlog:
            topic = "Backlog"
            t0 = time.perf_counter()
            _fill(broker.namesrv, topic, backlog)
            out["backlog_fill_s"] = round(time.perf_counter() - t0, 1)
            time.sleep(2)
            if java_home:
                cpu0 = sum(proc_cpu_s(p) for p in broker.pids)
                r = drain_java_consumer(broker.namesrv, topic, seconds, java_home, workdir)
                r["server_cpu_s"] = round(sum(proc_cpu_s(p) for p in broker.pids) - cpu0, 2)
                r["load_avg_1m"] = os.getloadavg()[0]
                out["drain-java-consumer"] = r
                print(broker.name, "drain-java", json.dumps(r), file=sys.stderr, flush=True)
            r = drain_python(broker.namesrv, topic)
            r["load_avg_1m"] = os.getloadavg()[0]
            out["drain-python"] = r
            print(broker.name, "drain-python", json.dumps(r), file=sys.stderr, flush=True)
    finally:
        broker.stop()
    return out


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the brokers on the way out
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="ours,java")
    ap.add_argument("--clients", default="java,python,cpp")
    ap.add_argument("--senders", default="1,8,16")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--sync", action="store_true", help="SYNC_FLUSH on both brokers")
    ap.add_argument("--backlog", type=int, default=0, help="messages to drain (0: skip)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    java_home = os.environ.get("ROCKETMQ_HOME")
    if java_home and not os.path.exists(f"{java_home}/producer-bench"):
        java_home = None
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-vs-java-")
    clients = args.clients.split(",")
    senders = [int(s) for s in args.senders.split(",")]
    result: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "load_avg": os.getloadavg(), "cpus": os.cpu_count(),
                    "flush": "SYNC_FLUSH" if args.sync else "ASYNC_FLUSH", "brokers": {}}
    try:
        for name in args.brokers.split(","):
            if name == "java" and not java_home:
                result["brokers"]["java-4.9.7"] = {"skipped": "ROCKETMQ_HOME not set"}
                continue
            kind, _, workers = name.partition(":")  # ours:N = serve --workers N
            broker = JavaBroker(workdir, args.sync, java_home) if kind == "java" \
                else OurBroker(workdir, args.sync, int(workers) if workers else None)
            result["brokers"][broker.name] = bench_broker(
                broker, [c for c in clients if c != "java" or java_home], senders, args.seconds,
                java_home, workdir, args.backlog)
    finally:
        result["load_avg_end"] = os.getloadavg()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(result, indent=1)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
