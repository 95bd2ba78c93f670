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
  python benchmarks/bench_vs_java.py --reps 3 [--brokers ours@SRC1,ours@SRC2,java] [--profile DIR]
      issue 36's table: the Java Producer only, brokers interleaved (order turned each
      repetition), ASYNC_FLUSH at --senders and SYNC_FLUSH at 16, medians, ratios to Java, broker
      CPU per message by process (writer, workers, the reput thread; py-spy on PATH names it);
      --profile: py-spy record of each of our broker processes for one window, summarized
Brokers: java, ours, ours:N (serve --workers N), ours@SRC (the package from the directory SRC).
Needs ROCKETMQ_HOME (``/work/rmq-java`` here) for the Java broker and clients; without it the
Java parts are skipped with a note. Everything binds 127.0.0.1 and is stopped by PID.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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

    def __init__(self, workdir: str, sync: bool, workers: int | None = None,
                 src: str | None = None) -> None:
        self.dir = os.path.join(workdir, f"ours-{workers}" if workers else "ours")
        if workers:
            self.name = f"rocketstore:{workers}"
        self.src = src  # another copy of the package (PYTHONPATH), e.g. a build before a change
        if src:
            self.name += f"@{os.path.basename(src.rstrip('/'))}"
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
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONPATH": self.src} if self.src else None)
        ready = json.loads(self.proc.stdout.readline())
        self.namesrv = ready["namesrv"]
        self.pids = [self.proc.pid] + child_pids(self.proc.pid)  # the worker processes too
        self.roles = {self.proc.pid: "writer", **{p: "worker" for p in self.pids[1:]}}
        names = thread_names(self.proc.pid)
        self.reput_tids = [(self.proc.pid, t) for t, n in names.items() if n == "ReputService"]

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
        wait_port(ns_port, 180)  # a loaded machine starts a JVM slowly
        self.procs.append(subprocess.Popen([f"{self.home}/broker", "-c", conf], env=env,
                                           stdout=log, stderr=subprocess.STDOUT))
        wait_port(port, 180)
        time.sleep(3)  # registration with the name server
        self.namesrv = f"127.0.0.1:{ns_port}"
        self.pids = [p.pid for p in self.procs]
        self.roles = {self.procs[0].pid: "namesrv", self.procs[1].pid: "broker"}
        self.reput_tids = []

    def stop(self) -> None:
        for p in reversed(self.procs):
            stop(p)


# ---- where the broker's CPU goes -----------------------------------------------------------------
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def thread_names(pid: int) -> dict[int, str]:
    """OS thread id -> Python thread name of a live Python process (``py-spy dump``; {} without
    py-spy). Python 3.11 names no OS threads, so /proc alone cannot tell the reput's CPU."""
    if not os.path.exists(PY_SPY):
        return {}
    for _ in range(3):
        try:
            out = subprocess.run([PY_SPY, "dump", "--pid", str(pid)], capture_output=True,
                                 text=True, timeout=60).stdout
        except subprocess.TimeoutExpired:
            continue
        names = {int(t): n for t, n in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}
        if names:
            return names
        time.sleep(1)
    return {}


def thread_cpu_s(pid: int, tid: int) -> float:
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def cpu_by_role(broker) -> dict[str, float]:
    """CPU seconds so far of each part of a broker: its processes by role (writer, worker,
    broker, namesrv), the reput thread apart from the writer's other threads."""
    out: dict[str, float] = {}
    for pid, role in broker.roles.items():
        out[role] = out.get(role, 0.0) + proc_cpu_s(pid)
    for pid, tid in broker.reput_tids:
        r = thread_cpu_s(pid, tid)
        out["reput"] = out.get("reput", 0.0) + r
        out[broker.roles[pid]] -= r
    return out


def run_java_producer(namesrv: str, topic: str, senders: int, seconds: float, java_home: str,
                      workdir: str, broker=None, profile: str | None = None) -> dict:
    """RocketMQ's benchmark Producer for its 10 s windows; the broker's CPU read at each window
    line, so CPU per message is the last window's CPU over its messages."""
    windows_n = max(2, int(round(seconds / 10)) + 1)  # the first window includes the warm-up
    cpu0 = children_cpu_s()
    env = {**os.environ, "HOME": workdir, "BENCH_HEAP": "512m"}
    p = subprocess.Popen([f"{java_home}/producer-bench", "-n", namesrv, "-t", topic, "-s",
                          "1024", "-w", str(senders)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()
    seen: list[tuple[tuple, float, dict]] = []  # (parsed, time, broker CPU by role)
    spies: list = []
    deadline = time.monotonic() + 30 + 10 * windows_n
    tail = ""
    try:
        while len(seen) < windows_n and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            tail = (tail + line)[-500:]
            m = JAVA_TPS.search(line)
            if not m:
                continue
            seen.append((m.groups(), time.monotonic(),
                         cpu_by_role(broker) if broker is not None else {}))
            if profile and broker is not None and len(seen) == 1:
                spies = start_profile(broker, profile, topic)
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        for sp in spies:
            sp.wait(60)
    if len(seen) < 2:
        return {"error": "producer-bench printed fewer than two TPS lines", "output": tail}
    (a, b, c, d, e), t1, cpu1 = seen[-1]
    _, t0w, cpu0w = seen[-2]
    tps, msgs = int(a), int(a) * 10
    per_role = {k: round((cpu1[k] - cpu0w.get(k, 0.0)) / max(1, msgs) * 1e6, 1) for k in cpu1}
    out = {"msgs_per_s": tps, "avg_ms": float(c), "max_ms": int(b), "failed": int(d) + int(e),
           "server_cpu_per_msg_us": round(sum(per_role.values()), 1),
           "server_cpu_per_msg_us_by_role": per_role,
           "client_cpu_s": round(children_cpu_s() - cpu0, 2),
           "note": "producer-bench's last 10 s window; it reports average and max RT only"}
    if spies:
        out["profile"] = summarize_profiles(spies)
    return out


def start_profile(broker, outdir: str, label: str) -> list:
    """``py-spy record`` of each broker process for one producer window (10 s, 100 Hz, raw
    collapsed stacks with thread ids; --native shows the compiled frames too)."""
    os.makedirs(outdir, exist_ok=True)
    spies = []
    for pid, role in broker.roles.items():
        path = os.path.join(outdir, f"{broker.name}-{label}-{role}-{pid}.txt")
        sp = subprocess.Popen([PY_SPY, "record", "--pid", str(pid), "-d", "10", "-r", "100",
                               "--threads", "--native", "--format", "raw",
                               "-o", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sp.path, sp.role = path, role
        spies.append(sp)
    return spies


IDLE = ("Condition.wait", "Event.wait", "lock_PyThread_acquire_lock", "epoll_pwait", "epoll_wait",
        "select.poll", "poll (libc", "sem_timedwait", "sem_clockwait", "time_sleep", "accept4")


def summarize_profiles(spies: list, top: int = 14) -> dict:
    """Per process: the samples that were not waiting (a stack through a lock, condition or
    event wait, ``epoll``/``poll`` or ``sleep`` counts as waiting), per thread, and the
    functions (lines merged) with the most of them on top of the stack (self) and anywhere in
    it (total), as % of that process's busy samples; ``busy_pct`` is busy samples over all."""
    out = {}
    for sp in spies:
        selfc: dict[str, int] = {}
        totc: dict[str, int] = {}
        threads: dict[str, int] = {}
        n = busy = 0
        try:
            text = Path(sp.path).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            stack, _, cnt = line.rpartition(" ")
            if not cnt.isdigit():
                continue
            c = int(cnt)
            n += c
            frames = stack.split(";")
            py = [f for f in frames if ".py:" in f]
            if any(w in stack for w in IDLE) or (py and py[-1].startswith("_worker (")):
                continue  # waiting (a pool thread parked in its queue's get, too)
            busy += c
            thread = re.sub(r"^thread \(\d+\): ", "", frames[0])
            threads[thread] = threads.get(thread, 0) + c
            fr = [re.sub(r" \((?:[^()]*/)?([^/():]*)(?::\d+)?\)$", r" (\1)", f)
                  for f in frames[1:]]
            fr = [re.sub(r"^0x[0-9a-f]+ ", "? ", f) for f in fr]
            if fr:
                selfc[fr[-1]] = selfc.get(fr[-1], 0) + c
                for f in set(fr):
                    totc[f] = totc.get(f, 0) + c
        pc = lambda d: [(k, round(100 * v / max(1, busy), 1))
                        for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]]
        ours = {k: v for k, v in totc.items() if ".py)" in k and "runpy" not in k}
        out[f"{sp.role} {os.path.basename(sp.path)}"] = {
            "samples": n, "busy_pct": round(100 * busy / max(1, n), 1), "threads": pc(threads),
            "self": pc(selfc), "total_python": pc(ours)}
    return out


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
                java_home: str | None, workdir: str, broker=None, profile: str | None = None) -> dict:
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
        return run_java_producer(namesrv, topic, senders, seconds, java_home, workdir, broker,
                                 profile)
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
                 java_home: str | None, workdir: str, backlog: int,
                 profile: str | None = None) -> dict:
    out: dict = {}
    broker.start()
    try:
        for kind in (c for c in clients if c):
            for s in senders:
                topic = f"Send_{kind}_{s}"
                load = os.getloadavg()[0]
                cpu0 = sum(proc_cpu_s(p) for p in broker.pids)
                r = run_senders(kind, broker.namesrv, topic, s, seconds, java_home, workdir,
                                broker, profile if isinstance(broker, OurBroker) else None)
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


def make_broker(name: str, workdir: str, sync: bool, java_home: str | None):
    """java, ours, ours:N (serve --workers N), ours@SRC or ours:N@SRC (the package from SRC)."""
    name, _, src = name.partition("@")
    kind, _, workers = name.partition(":")
    return JavaBroker(workdir, sync, java_home) if kind == "java" \
        else OurBroker(workdir, sync, int(workers) if workers else None, src or None)


def interleaved(brokers: list[str], senders: list[int], reps: int, seconds: float,
                java_home: str, workdir: str, profile: str | None) -> dict:
    """Issue 36's point 5 in one run: for each repetition, each broker in turn (fresh store;
    the order turned by one each repetition) takes RocketMQ's benchmark Producer at each of
    ``senders`` threads ASYNC_FLUSH, then each broker SYNC_FLUSH at 16 threads; medians over
    the repetitions, ratios to Java."""
    cells = [(False, s) for s in senders] + [(True, 16)]
    runs: dict[str, dict[str, list[dict]]] = {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for rep in range(reps):
        for sync in (False, True):
            ss = [s for sy, s in cells if sy == sync]
            # the order turns each repetition, so no broker always follows the same one (whose
            # dirty pages the kernel may still be writing back); and those are written first
            for name in brokers[rep % len(brokers):] + brokers[:rep % len(brokers)]:
                os.sync()
                shutil.rmtree(os.path.join(workdir, "java"), ignore_errors=True)
                for d in os.listdir(workdir):
                    if d.startswith("ours"):
                        shutil.rmtree(os.path.join(workdir, d), ignore_errors=True)
                broker = make_broker(name, workdir, sync, java_home)
                try:
                    broker.start()
                except Exception as exc:  # e.g. a JVM that did not start in time: noted
                    broker.stop()
                    for s in ss:
                        cell = f"{s} threads {'SYNC' if sync else 'ASYNC'}_FLUSH"
                        runs.setdefault(broker.name, {}).setdefault(cell, []).append(
                            {"error": f"broker did not start: {exc}"})
                    print(f"rep {rep + 1}", broker.name, "did not start:", exc, file=sys.stderr,
                          flush=True)
                    continue
                try:
                    for s in ss:
                        cell = f"{s} threads {'SYNC' if sync else 'ASYNC'}_FLUSH"
                        r = run_java_producer(broker.namesrv, f"Send_{s}_{rep}", s, seconds,
                                              java_home, workdir, broker,
                                              profile if rep == 0 and name != "java" else None)
                        r["load_avg_1m"] = os.getloadavg()[0]
                        runs.setdefault(broker.name, {}).setdefault(cell, []).append(r)
                        print(f"rep {rep + 1}", broker.name, cell, json.dumps(
                            {k: v for k, v in r.items() if k != "profile"}),
                            file=sys.stderr, flush=True)
                finally:
                    broker.stop()
    def med(xs: list) -> float:
        """The median (of two middle values, their mean); nan for none."""
        v = sorted(xs)
        if not v:
            return float("nan")
        mid = len(v) // 2
        return v[mid] if len(v) % 2 else round((v[mid - 1] + v[mid]) / 2, 3)
    summary: dict[str, dict[str, dict]] = {}
    for bname, by_cell in runs.items():
        for cell, rs in by_cell.items():
            ok = [r for r in rs if "msgs_per_s" in r]
            roles = sorted({k for r in ok for k in r["server_cpu_per_msg_us_by_role"]})
            summary.setdefault(bname, {})[cell] = {
                "msgs_per_s": med([r["msgs_per_s"] for r in ok]),
                "avg_ms": med([r["avg_ms"] for r in ok]),
                "max_ms": med([r["max_ms"] for r in ok]),
                "cpu_us_per_msg": med([r["server_cpu_per_msg_us"] for r in ok]),
                "cpu_us_by_role": {k: med([r["server_cpu_per_msg_us_by_role"].get(k, 0.0)
                                           for r in ok]) for k in roles},
                "each_msgs_per_s": [r.get("msgs_per_s") for r in rs]}
    java = summary.get("java-4.9.7", {})
    rows = ["| cell | broker | msg/s (median; each) | × Java | avg / max RT ms | broker CPU µs/msg"
            " (by process) | × Java CPU |", "|---|---|---|---|---|---|---|"]
    for bname, by_cell in summary.items():
        for cell, m in by_cell.items():
            j = java.get(cell)
            ratio = f"{m['msgs_per_s'] / j['msgs_per_s']:.2f}" if j and j["msgs_per_s"] else "-"
            cr = f"{m['cpu_us_per_msg'] / j['cpu_us_per_msg']:.2f}" \
                if j and j["cpu_us_per_msg"] else "-"
            roles = ", ".join(f"{k} {v}" for k, v in m["cpu_us_by_role"].items())
            rows.append(f"| {cell} | {bname} | {m['msgs_per_s']:,} ({', '.join(map(str, m['each_msgs_per_s']))})"
                        f" | {ratio} | {m['avg_ms']} / {m['max_ms']} | {m['cpu_us_per_msg']} ({roles})"
                        f" | {cr} |")
    profiles = {f"{b} {c}": r[0]["profile"] for b, bc in runs.items() for c, r in bc.items()
                if r and "profile" in r[0]}
    return {"started": started, "ended": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "cpus": os.cpu_count(), "load_avg_end": os.getloadavg(), "reps": reps,
            "summary": summary, "runs": runs, "profiles": profiles, "table": "\n".join(rows)}


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
    ap.add_argument("--reps", type=int, default=0,
                    help="issue 36's table: each broker in turn, REPS rounds, the Java Producer at "
                         "--senders ASYNC_FLUSH and 16 SYNC_FLUSH; medians and ratios to Java")
    ap.add_argument("--profile", default=None,
                    help="py-spy record each of our broker processes for one window into DIR")
    args = ap.parse_args()
    java_home = os.environ.get("ROCKETMQ_HOME")
    if java_home and not os.path.exists(f"{java_home}/producer-bench"):
        java_home = None
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-vs-java-")
    clients = args.clients.split(",")
    senders = [int(s) for s in args.senders.split(",")]
    if args.reps:
        if not java_home:
            sys.exit("--reps needs ROCKETMQ_HOME (RocketMQ 4.9.7's home with producer-bench)")
        try:
            result = interleaved(args.brokers.split(","), senders, args.reps, args.seconds,
                                 java_home, workdir, args.profile)
        finally:
            if not args.workdir:
                shutil.rmtree(workdir, ignore_errors=True)
        text = json.dumps(result, indent=1)
        if args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            Path(args.json).write_text(text)
        print(text)
        print(result["table"])
        return
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
