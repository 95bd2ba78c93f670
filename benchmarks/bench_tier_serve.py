"""Tiered store benchmark, the broker's side (issue 32, point 8): send rate with the tier on vs
off, and a pull of cold offsets (not on local disk) from a posix tier, our broker vs RocketMQ
5.3.3's ``TieredMessageStore`` — side by side in one run.

1. **Send, tier on vs off.** The store's put path (``put_messages``, batches of 64 messages of
   1 KiB, 8 queues: what ``rocketstore serve``'s writer process does for a send) for
   ``--messages`` messages, tier off then on (posix, default group commit: the upload thread
   runs beside the puts in the same process), alternated ``--repeat`` times, best of each.
2. **Cold pull, ours vs Java.** One posix tier of ``--pull-messages`` messages (written by our
   store), served by a broker whose local store is empty, so every pull falls through to the
   tier: ``rocketstore serve`` and Java 5.3.3's broker with
   ``messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore`` (the referee home's
   jars), each read from offset 0 to the end of every queue by the same client (our
   ``PullConsumer``, 32 a pull), twice (the second read is warm for both: read-ahead caches).

    .venv/bin/python benchmarks/bench_tier_serve.py --messages 100000 --pull-messages 20000 --json
    .venv/bin/python benchmarks/bench_tier_serve.py --skip-send --skip-pull --network --json

3. **Network send, tier on vs off** (``--network``): ``rocketstore serve`` with and without a
   posix tier under RocketMQ 5.3.3's own ``producer-bench`` (16 synchronous senders, 1 KiB), its
   last 10 s window, alternated ``--repeat`` times.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.config import TierConfig  # noqa: E402

CLUSTER, BROKER, TOPIC, QUEUES = "BenchTierC", "bench-tier", "BenchTier", 4
POOL = os.urandom(1 << 20)


def body(i: int) -> bytes:
    at = (i * 1031) % (len(POOL) - 1024)
    return POOL[at:at + 1024]


def send_rate(root: str, tier: TierConfig | None, n: int) -> dict:
    shutil.rmtree(root, ignore_errors=True)
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=128 << 20, tier=tier,
                      timer_wheel_enable=False)
    with MessageStore(cfg) as s:
        t0 = time.perf_counter()
        for i in range(0, n, 64):
            batch = [Message(topic=TOPIC, body=body(i + j), keys=[f"k{i + j}"],
                             queue_id=(i // 64) % 8) for j in range(64)]
            assert s.put_messages(batch).ok
        dt = time.perf_counter() - t0
        out = {"messages": n, "put_s": round(dt, 2), "msgs_per_s": round(n / dt)}
        if tier is not None:
            t1 = time.perf_counter()
            assert s.tier.wait_caught_up(3600)
            out["tier_behind_at_end_s"] = round(time.perf_counter() - t1, 2)
    shutil.rmtree(root, ignore_errors=True)
    return out


def build_tier(work: str, n: int) -> str:
    tier = os.path.join(work, "tier")
    t = TierConfig(file_path=tier, broker_cluster_name=CLUSTER, broker_name=BROKER,
                   group_commit_timeout=100)
    cfg = StoreConfig(store_path_root_dir=os.path.join(work, "src-store"), tier=t,
                      mapped_file_size_commitlog=128 << 20, timer_wheel_enable=False)
    with MessageStore(cfg) as s:
        for i in range(0, n, 64):
            assert s.put_messages([Message(topic=TOPIC, body=body(i + j), keys=[f"k{i + j}"],
                                           queue_id=(i // 64) % QUEUES) for j in range(64)]).ok
        assert s.wait_dispatched(600) and s.tier.wait_caught_up(3600)
        s.tier.seal_index()
    return tier


def pull_everything(namesrv: str, n: int) -> list[float]:
    from rocketstore.client import PullConsumer
    times = []
    with PullConsumer("bench-tier-readers", namesrv) as c:
        for _ in range(2):
            t0, got = time.perf_counter(), 0
            for q in range(QUEUES):
                off = 0
                while True:
                    r = c.pull(TOPIC, q, off, 32)
                    got += len(r.messages)
                    if r.status != "FOUND":
                        break
                    off = r.next_begin_offset
            assert got == n, (got, n)
            times.append(time.perf_counter() - t0)
    return times


def cold_pull(work: str, n: int) -> dict:
    from tests import referee
    from tests.broker.conftest import start_server
    from tests.cluster.conftest import start_namesrv, wait_for
    from tests.cluster.java_rocketmq import start_java_broker
    from tests.ops.test_console_cluster import create_topic, route_brokers
    referee.export_env()  # the resolved RocketMQ homes, as tests/conftest.py does
    tier = build_tier(work, n)
    plugin = {"messageStorePlugIn": "org.apache.rocketmq.tieredstore.TieredMessageStore",
              "tieredBackendServiceProvider":
                  "org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
              "tieredStorageLevel": "NOT_IN_DISK", "tieredStoreFilePath": tier}
    out: dict = {"messages": n}
    conf = os.path.join(work, "broker.conf")
    with open(conf, "w") as fh:
        fh.write("\n".join([f"brokerClusterName={CLUSTER}", f"brokerName={BROKER}",
                            *(f"{k}={v}" for k, v in plugin.items()), ""]))
    srv = start_server(os.path.join(work, "ours"), "--config", conf)  # local store empty
    try:
        create_topic(srv.namesrv, srv.broker, TOPIC, QUEUES)
        out["ours_s"] = [round(x, 2) for x in pull_everything(srv.namesrv, n)]
    finally:
        srv.stop()
    jdir = os.path.join(work, "jb")
    os.makedirs(os.path.join(jdir, "store", "config"))
    shutil.copy(os.path.join(work, "src-store", "config", "tieredStoreMetadata.json"),
                os.path.join(jdir, "store", "config"))
    ns = start_namesrv()
    b = None
    try:
        b = start_java_broker(referee.home(referee.V5), jdir, ns.addr, BROKER, cluster=CLUSTER,
                              extra=plugin)
        create_topic(ns.addr, b.addr, TOPIC, QUEUES)
        assert wait_for(lambda: route_brokers(ns.addr, TOPIC) == {BROKER}, timeout=60)
        out["java_s"] = [round(x, 2) for x in pull_everything(ns.addr, n)]
    finally:
        if b is not None:
            b.stop()
        ns.stop()
    out["ours_vs_java_cold"] = round(out["java_s"][0] / out["ours_s"][0], 2)
    out["ours_vs_java_warm"] = round(out["java_s"][1] / out["ours_s"][1], 2)
    return out


def network_send(work: str, tier_on: bool, seconds: int, threads: int) -> dict:
    """``rocketstore serve`` (tier off, or on: a posix tier) under RocketMQ 5.3.3's
    ``producer-bench`` (``-w threads``, 1 KiB): its last 10 s window of send TPS."""
    import signal
    import subprocess

    from bench_vs_java import JAVA_TPS
    from tests import referee
    from tests.broker.conftest import start_server
    from tests.ops.test_console_cluster import create_topic
    referee.export_env()
    root = os.path.join(work, "net")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    conf = os.path.join(root, "broker.conf")
    lines = [f"brokerClusterName={CLUSTER}", f"brokerName={BROKER}"]
    if tier_on:
        lines += ["messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore",
                  "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
                  f"tieredStoreFilePath={os.path.join(root, 'tier')}"]
    with open(conf, "w") as fh:
        fh.write("\n".join(lines + [""]))
    srv = start_server(os.path.join(root, "store"), "--config", conf)
    try:
        create_topic(srv.namesrv, srv.broker, TOPIC, 8)
        home = referee.home(referee.V5)
        env = {**os.environ, "HOME": root, "BENCH_HEAP": "512m"}
        p = subprocess.Popen([f"{home}/producer-bench", "-n", srv.namesrv, "-t", TOPIC, "-s", "1024",
                              "-w", str(threads)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            out, _ = p.communicate(timeout=30)
        windows = [int(w[0]) for w in JAVA_TPS.findall(out)]
        cpu = tree_cpu_seconds(srv.proc.pid)  # the broker's processes, before they exit
        res = {"tier": tier_on, "windows_tps": windows, "msgs_per_s": windows[-1] if windows else 0}
    finally:
        srv.stop()
    try:
        stored = stored_messages(os.path.join(root, "store"), TOPIC)
        # CPU per stored message: what the tier costs the broker, whatever else runs on the
        # machine (the TPS windows swing with the load; this does not)
        res.update(stored=stored, broker_cpu_s=round(cpu, 2),
                   cpu_us_per_msg=round(cpu / stored * 1e6, 1) if stored else None)
        return res
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick)  # ppid, utime+stime
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, (pp, _) in stats.items() if pp == p and c not in tree]
    return sum(stats[p][1] for p in tree if p in stats)


def stored_messages(store: str, topic: str) -> int:
    """Messages of ``topic`` in the store (its ConsumeQueues' max offsets), read after stop."""
    with MessageStore(StoreConfig(store_path_root_dir=store)) as s:
        return sum(cq.max_offset_in_queue() for cq in s.cq_table if cq.topic == topic)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--pull-messages", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "rocketstore-bench-tier-serve"))
    ap.add_argument("--skip-send", action="store_true")
    ap.add_argument("--skip-pull", action="store_true")
    ap.add_argument("--network", action="store_true",
                    help="also: rocketstore serve under Java's producer-bench, tier off vs on")
    ap.add_argument("--network-seconds", type=int, default=34)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    a.messages, a.pull_messages = (-(-n // 64) * 64 for n in (a.messages, a.pull_messages))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    res: dict = {"cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()[0]}
    try:
        if not a.skip_send:
            runs: dict = {"off": [], "on": []}
            for _ in range(a.repeat):
                runs["off"].append(send_rate(os.path.join(a.work, "s"), None, a.messages))
                runs["on"].append(send_rate(os.path.join(a.work, "s"), TierConfig(
                    file_path=os.path.join(a.work, "send-tier"), broker_cluster_name=CLUSTER,
                    broker_name=BROKER), a.messages))
                shutil.rmtree(os.path.join(a.work, "send-tier"), ignore_errors=True)
            best = {k: max(v, key=lambda r: r["msgs_per_s"]) for k, v in runs.items()}
            res["send"] = {"runs": runs, "best_off": best["off"]["msgs_per_s"],
                           "best_on": best["on"]["msgs_per_s"],
                           "on_vs_off": round(best["on"]["msgs_per_s"] / best["off"]["msgs_per_s"], 2)}
        if a.network:
            runs = {"off": [], "on": []}
            for _ in range(a.repeat):
                for k in ("off", "on"):
                    runs[k].append(network_send(a.work, k == "on", a.network_seconds, a.threads))
            best = {k: max(r["msgs_per_s"] for r in v) for k, v in runs.items()}
            cpu = {k: min(r["cpu_us_per_msg"] for r in v if r["cpu_us_per_msg"])
                   for k, v in runs.items()}
            res["network_send"] = {"runs": runs, "best_off": best["off"], "best_on": best["on"],
                                   "on_vs_off": round(best["on"] / max(1, best["off"]), 2),
                                   "cpu_us_per_msg": cpu,
                                   "cpu_off_vs_on": round(cpu["off"] / cpu["on"], 2)}
        if not a.skip_pull:
            res["cold_pull"] = cold_pull(a.work, a.pull_messages)
    finally:
        shutil.rmtree(a.work, ignore_errors=True)
    res["load_avg_at_end"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1) if a.json else res)


if __name__ == "__main__":
    main()
