"""How cost grows with the number of topics, queues and connections (issue 21 §5).

Question: side by side, on fresh stores, ``rocketstore serve`` and RocketMQ 4.9.7's Java broker
(8 queues a topic, topics created through RocketMQ's admin API — UPDATE_AND_CREATE_TOPIC, what
``mqadmin updateTopic`` sends — one message into each of 1,000 queues):

* topic creation rate for the first 1,000, around 5,000 and around 20,000 topics;
* the time to send the 1,000 one-message queues, the store on disk (``du``) and the broker's
  open files (``/proc/PID/fd``, worker processes included) after it;
* restart (SIGTERM, start again) to the first accepted send, with 5,000 topics, and the open
  files after it;
* send TPS of RocketMQ's benchmark Producer with 0 / 200 / 1,000 idle connections open;
* ``--stored-gib N``: send TPS on a fresh store against the same brokers on one store that
  already holds N GiB (written once by the embedded store, byte-compatible, then opened by both
  brokers in turn; the page cache is dropped before each broker starts when the kernel lets us).

``--embedded`` measures the store in process instead (the numbers of round 3's first pass).

Usage:
  ROCKETMQ_HOME=/work/rmq-java python benchmarks/bench_scale.py [--brokers ours,java]
      [--topics 1000,5000,20000] [--queues 1000] [--idle 0,200,1000] [--seconds 12]
      [--workdir /tmp] [--json out.json]
  python benchmarks/bench_scale.py --embedded [--queues 1000]
  ROCKETMQ_HOME=/work/rmq-java python benchmarks/bench_scale.py --stored-gib 20 [--reps 3]
Without ROCKETMQ_HOME the Java broker is skipped with a note. Everything binds 127.0.0.1 and is
stopped by PID.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netutil import free_port, wait_port  # noqa: E402
from bench_vs_java import child_pids, run_senders, stop  # noqa: E402

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


# ---- brokers ----------------------------------------------------------------------------------------
class Ours:
    name = "rocketstore"

    def __init__(self, workdir: str, store: str | None = None) -> None:
        self.dir = store or os.path.join(workdir, "ours")
        self.port, self.ns_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "serve", "--store", self.dir, "--port",
             str(self.port), "--namesrv-port", str(self.ns_port), "--json",
             "--default-topic-queue-nums", "8", "-o", "mapped_file_size_commitlog=1073741824"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ready = json.loads(self.proc.stdout.readline())
        self.namesrv = ready["namesrv"]
        self.addr = f"127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        return [self.proc.pid] + child_pids(self.proc.pid)

    def stop_broker(self) -> None:
        stop(self.proc)

    start_broker = start
    stop = stop_broker
    store = property(lambda self: self.dir)


class Java:
    name = "java-4.9.7"

    def __init__(self, workdir: str, home: str, store: str | None = None) -> None:
        self.dir = os.path.join(workdir, "java")
        os.makedirs(self.dir, exist_ok=True)
        self.store_dir = store or os.path.join(self.dir, "store")
        self.home = home
        self.port, self.ns_port = free_port(), free_port()
        self.env = {**os.environ, "HOME": self.dir, "NAMESRV_HEAP": "512m", "BROKER_HEAP": "2g"}
        self.ns: subprocess.Popen | None = None
        self.broker: subprocess.Popen | None = None
        self.log = open(os.path.join(self.dir, "java.log"), "w")

    def start(self) -> None:
        ns_conf = os.path.join(self.dir, "namesrv.conf")
        Path(ns_conf).write_text(f"listenPort={self.ns_port}\n")
        self.ns = subprocess.Popen([f"{self.home}/namesrv", "-c", ns_conf], env=self.env,
                                   stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.ns_port)
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.addr = f"127.0.0.1:{self.port}"
        self.start_broker()

    def start_broker(self) -> None:
        conf = os.path.join(self.dir, "broker.conf")
        Path(conf).write_text("\n".join([
            "brokerClusterName=DefaultCluster", "brokerName=broker-a", "brokerId=0",
            "brokerRole=ASYNC_MASTER", "flushDiskType=ASYNC_FLUSH", f"listenPort={self.port}",
            f"namesrvAddr={self.namesrv}", "brokerIP1=127.0.0.1",
            f"storePathRootDir={self.store_dir}",
            f"storePathCommitLog={self.store_dir}/commitlog",
            "autoCreateTopicEnable=true", "defaultTopicQueueNums=8", ""]))
        self.broker = subprocess.Popen([f"{self.home}/broker", "-c", conf], env=self.env,
                                       stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, 120)

    def pids(self) -> list[int]:
        return [self.broker.pid]

    def stop_broker(self) -> None:
        stop(self.broker)

    def stop(self) -> None:
        stop(self.broker)
        stop(self.ns)

    store = property(lambda self: self.store_dir)


def open_files(pids: list[int]) -> int:
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
    return n


def du_kib(path: str) -> int:
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True,
                              check=True).stdout.split()[0])


# ---- steps --------------------------------------------------------------------------------------------
async def create_topics(addr: str, first: int, last: int) -> float:
    """UPDATE_AND_CREATE_TOPIC for topics ``first..last-1`` straight to the broker, one after
    another (``mqadmin updateTopic``'s request); returns topics per second."""
    from rocketstore.client.admin import AsyncAdminClient
    from rocketstore.remoting.codes import RequestCode
    admin = AsyncAdminClient(broker=addr)
    t0 = time.perf_counter()
    try:
        for i in range(first, last):
            r = await admin.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": f"Scale{i}", "defaultTopic": "TBW102", "readQueueNums": 8,
                "writeQueueNums": 8, "perm": 6, "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0, "order": "false"})
            if r.code != 0:
                raise RuntimeError(f"create Scale{i}: {r.code} {r.remark}")
    finally:
        await admin.close()
    return (last - first) / (time.perf_counter() - t0)


async def send_one_per_queue(namesrv: str, queues: int) -> float:
    """One 1 KiB message into each of ``queues`` queues (topics Scale0.., 8 queues each)."""
    from rocketstore.client import AsyncProducer
    p = AsyncProducer("scale-bench", namesrv)
    t0 = time.perf_counter()
    try:
        for i in range(queues):
            await p.send(f"Scale{i // 8}", b"x" * 1024, queue_id=i % 8)
    finally:
        await p.shutdown()
    return time.perf_counter() - t0


async def first_send(namesrv: str, t0: float, timeout: float = 120.0) -> float:
    """Seconds from ``t0`` until a send is accepted (retrying every 50 ms)."""
    from rocketstore.client import AsyncProducer
    while time.perf_counter() - t0 < timeout:
        p = AsyncProducer("scale-restart", namesrv, timeout_s=2.0, retries=0)
        try:
            await p.send("Scale0", b"y", queue_id=0)
            return time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - not up yet: no route, refused, timeout
            await asyncio.sleep(0.05)
        finally:
            try:
                await p.shutdown()
            except Exception:  # noqa: BLE001
                pass
    raise RuntimeError("no send accepted after restart")


def idle_connections(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def run_broker(b, args, java_home: str | None, workdir: str) -> dict:
    marks = sorted(int(x) for x in args.topics.split(","))
    out: dict = {"broker": b.name, "load_avg_start": os.getloadavg()}
    b.start()
    try:
        made, rates = 0, {}
        for m in marks:
            if m > 1000 and m - 1000 > made:  # up to the last thousand before the mark, unmeasured
                asyncio.run(create_topics(b.addr, made, m - 1000))
                made = m - 1000
            rates[m] = round(asyncio.run(create_topics(b.addr, made, m)), 1)
            made = m
            if m == min(max(marks), 5000) or m == marks[0] and max(marks) < 5000:
                out["topics_at_restart"] = made
                out.update(queues_and_restart(b, args.queues))
        out["topic_creation_per_s_last_1000_before"] = rates
        time.sleep(1)
        tps = {}
        for n in (int(x) for x in args.idle.split(",")):
            socks = idle_connections(b.port, n)
            try:
                time.sleep(1)
                r = run_senders("java", b.namesrv, "ScaleTps", args.threads, args.seconds,
                                java_home, workdir)
                tps[n] = {"msgs_per_s": r.get("msgs_per_s"), "avg_ms": r.get("avg_ms"),
                          "open_files": open_files(b.pids()), "load_avg": os.getloadavg()[0]}
            finally:
                for s in socks:
                    s.close()
        out["send_tps_by_idle_connections"] = tps
    finally:
        b.stop()
    out["load_avg_end"] = os.getloadavg()
    return out


def queues_and_restart(b, queues: int) -> dict:
    res: dict = {"send_one_per_queue_s": round(asyncio.run(send_one_per_queue(b.namesrv, queues)), 2)}
    time.sleep(2)  # let flushes settle before counting
    res["open_files_after_sends"] = open_files(b.pids())
    res["du_kib"] = du_kib(b.store)
    b.stop_broker()
    t0 = time.perf_counter()
    b.start_broker()
    res["restart_to_first_send_s"] = round(asyncio.run(first_send(b.namesrv, t0)), 2)
    time.sleep(2)
    res["open_files_after_restart"] = open_files(b.pids())
    return res


def brokers_main(args) -> dict:
    java_home = os.environ.get("ROCKETMQ_HOME")
    result: dict = {"load_avg": os.getloadavg(), "runs": []}
    for name in args.brokers.split(","):
        if name == "java" and not (java_home and os.path.exists(f"{java_home}/broker")):
            result["runs"].append({"broker": "java-4.9.7", "skipped": "ROCKETMQ_HOME not set"})
            continue
        workdir = tempfile.mkdtemp(prefix=f"scale-{name}-", dir=args.workdir)
        try:
            b = Java(workdir, java_home) if name == "java" else Ours(workdir)
            result["runs"].append(run_broker(b, args, java_home, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(json.dumps(result["runs"][-1]), file=sys.stderr)
    return result


# ---- send TPS with data already stored -----------------------------------------------------------
def fill_store(path: str, gib: float, body_kib: int = 32) -> dict:
    """Write ``gib`` GiB into a store at ``path`` with the embedded store (1 GiB CommitLog
    segments, RocketMQ's default; topic ``Stored``, 8 queues, batches of 32 messages)."""
    cfg = StoreConfig(store_path_root_dir=path, mapped_file_size_commitlog=1 << 30)
    body = os.urandom(body_kib * 1024)
    target = int(gib * (1 << 30))
    t0 = time.perf_counter()
    n = 0
    with MessageStore(cfg) as store:
        while store.get_max_phy_offset() < target:
            q = (n // 32) % 8
            r = store.put_messages([Message("Stored", body, queue_id=q) for _ in range(32)])
            if r.status.name != "PUT_OK":
                raise RuntimeError(f"filling the store: {r.status.name} {r.error}")
            n += 32
        store.wait_dispatched(600)
        stored = store.get_max_phy_offset()
    return {"stored_bytes": stored, "messages": n, "fill_s": round(time.perf_counter() - t0, 1)}


def drop_page_cache() -> bool:
    """Write back and drop the page cache (root only): the old segments start cold."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def stored_tps(b, args, java_home: str, workdir: str) -> dict:
    dropped = drop_page_cache()
    t0 = time.perf_counter()
    b.start()
    try:
        up = round(time.perf_counter() - t0, 1)
        r = run_senders("java", b.namesrv, "StoredTps", args.threads, args.seconds, java_home,
                        workdir)
        return {"msgs_per_s": r.get("msgs_per_s"), "avg_ms": r.get("avg_ms"),
                "failed": r.get("failed"), "start_s": up, "page_cache_dropped": dropped,
                "load_avg": os.getloadavg()[0]}
    finally:
        b.stop()


def stored_main(args) -> dict:
    """Send TPS on a fresh store and on one holding ``--stored-gib`` GiB, for both brokers, the
    runs interleaved (fresh and stored, ours and Java, ``--reps`` times)."""
    java_home = os.environ.get("ROCKETMQ_HOME")
    if not (java_home and os.path.exists(f"{java_home}/broker")):
        raise SystemExit("--stored-gib compares with the Java broker: set ROCKETMQ_HOME")
    root = tempfile.mkdtemp(prefix="stored-", dir=args.workdir)
    try:
        big = os.path.join(root, "big")
        result: dict = {"load_avg": os.getloadavg(), "threads": args.threads,
                        "seconds": args.seconds, "fill": fill_store(big, args.stored_gib),
                        "runs": []}
        print(json.dumps(result["fill"]), file=sys.stderr)
        for rep in range(args.reps):
            for name in ("ours", "java") if rep % 2 == 0 else ("java", "ours"):
                for where in ("fresh", "stored"):
                    wd = tempfile.mkdtemp(prefix=f"{name}-{where}-", dir=root)
                    store = big if where == "stored" else None
                    b = Java(wd, java_home, store) if name == "java" else Ours(wd, store)
                    run = {"broker": b.name, "store": where, "rep": rep,
                           **stored_tps(b, args, java_home, wd)}
                    if where == "fresh":
                        shutil.rmtree(wd, ignore_errors=True)
                    result["runs"].append(run)
                    print(json.dumps(run), file=sys.stderr)
        summary: dict = {}
        for name in ("rocketstore", "java-4.9.7"):
            for where in ("fresh", "stored"):
                vals = sorted(r["msgs_per_s"] or 0 for r in result["runs"]
                              if r["broker"] == name and r["store"] == where)
                summary[f"{name} {where}"] = {"runs": vals, "median": vals[len(vals) // 2]}
            f, st = summary[f"{name} fresh"]["median"], summary[f"{name} stored"]["median"]
            summary[f"{name} stored / fresh"] = round(st / f, 2) if f else None
        summary["ours / java, stored"] = round(
            summary["rocketstore stored"]["median"] / summary["java-4.9.7 stored"]["median"], 2)
        result["summary"] = summary
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--brokers", default="ours,java")
    ap.add_argument("--topics", default="1000,5000,20000")
    ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--idle", default="0,200,1000")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--embedded", action="store_true")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--json", default=None)
    ap.add_argument("--stored-gib", type=float, default=None,
                    help="send TPS fresh against N GiB already stored (both brokers)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.stored_gib:
        result = stored_main(args)
    elif args.embedded:
        result = {"load_avg": os.getloadavg(), **queues(args.queues, args.workdir),
                  **topics_json(args.workdir)}
    else:
        result = brokers_main(args)
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
