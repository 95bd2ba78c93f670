"""Spark over a broker: the network source and sink against the file source, RocketMQ's Java
benchmark Consumer and our own batched producer, all in one run on the same data.

Questions (issue 16):
1. a network batch read (``spark.read.format("rocketmq").option("namesrv", …)``) of N messages
   of 1 KiB into a ``noop`` sink — rows/s next to the file source reading the *same broker's*
   store files, and next to RocketMQ's benchmark Consumer (``consumer-bench``, Java) draining the
   same backlog from the same broker;
2. the sink (``df.write.format("rocketmq")``) next to our Python producer's batched send
   (``AsyncProducer.send_batch``, 128 messages a batch, 8 batches in flight), same broker;
3. a streaming query's send → row-in-sink latency (p50, p99) at a steady trickle.

    .venv/bin/python benchmarks/bench_spark_network.py --messages 1000000 --json

One ``rocketstore serve`` (its own name server) on 127.0.0.1, topic of 8 queues; Spark
``local[2]``. The Java consumer needs ``ROCKETMQ_HOME`` (the build of
``shared/tools/rocketmq-java``); without it that row is skipped. Its rate is the best full
10-second window it prints while draining (favours Java: no start-up, no tail).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

TOPIC, SINK_TOPIC, LAT_TOPIC = "BenchNet", "BenchSink", "BenchLatency"


def start_broker(store: str):
    from tests.broker.conftest import start_server
    return start_server(store, "-o", "mapped_file_size_commitlog=268435456",
                        "--default-topic-queue-nums", "8", log_path=store + ".log")


def create_topic(ns: str, broker: str, topic: str, queues: int = 8) -> None:
    from rocketstore.client import ClientInstance
    from rocketstore.client._sync import LoopThread
    from rocketstore.remoting.codes import RequestCode
    ci = ClientInstance(ns)
    LoopThread.shared().run(ci.invoke(broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                                      {"topic": topic, "readQueueNums": queues,
                                       "writeQueueNums": queues, "perm": 6}))
    ci.close()


async def _load(ns: str, n: int, size: int, batch: int = 128, inflight: int = 8) -> float:
    """Send ``n`` messages with batched sends; returns msgs/s."""
    from rocketstore.client import AsyncProducer
    from rocketstore.format.message import Message
    p = AsyncProducer("bench-load", ns)
    qs = await p.queues(TOPIC)
    pool = os.urandom(1 << 20)
    span = len(pool) - size
    sem = asyncio.Semaphore(inflight)
    tasks = []

    async def one(i: int, msgs):
        async with sem:
            await p.send_batch(TOPIC, msgs, mq=qs[(i // batch) % len(qs)])

    t0 = time.perf_counter()
    for i in range(0, n, batch):
        msgs = [Message(TOPIC, pool[(j * 997) % span:(j * 997) % span + size], tags="T",
                        keys=[f"k{j}"]) for j in range(i, min(n, i + batch))]
        await sem.acquire()
        sem.release()
        tasks.append(asyncio.ensure_future(one(i, msgs)))
        if len(tasks) > 4 * inflight:
            await asyncio.gather(*tasks)
            tasks = []
    await asyncio.gather(*tasks)
    dt = time.perf_counter() - t0
    await p.shutdown()
    return n / dt


def timed(fn, runs: int = 2) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def java_consumer(ns: str, n: int, broker: str, timeout_s: float) -> dict | None:
    home = os.environ.get("ROCKETMQ_HOME")
    if not home or not os.path.exists(os.path.join(home, "consumer-bench")):
        return None
    from rocketstore.client import PullConsumer
    group = f"bench_java_{int(time.time())}"
    with PullConsumer(group, ns) as c:  # start the group at offset 0 of every queue
        for q in c.queues(TOPIC):
            c.commit_offset(TOPIC, q.queue_id, 0)
    env = dict(os.environ, BENCH_HEAP="1g")
    env.pop("ROCKETMQ_HOME", None)
    proc = subprocess.Popen(["timeout", str(int(timeout_s) + 60),
                             os.path.join(home, "consumer-bench"), "-n", ns, "-t", TOPIC,
                             "-g", group], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    tps: list[int] = []
    total = 0
    t0 = time.monotonic()
    try:
        for line in proc.stdout:
            m = re.search(r"TPS: (\d+)", line)
            if m:
                v = int(m.group(1))
                tps.append(v)
                total += v * 10
                if total >= n or time.monotonic() - t0 > timeout_s:
                    break
                if v == 0 and len([x for x in tps if x]) > 0:
                    break
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    busy = [x for x in tps if x]
    return {"tps_windows": tps, "best_window_msgs_s": max(busy) if busy else 0,
            "received_estimate": total}


def latency(spark, ns: str, seconds: float, rate: float) -> dict:
    from rocketstore.client import Producer
    create_topic(ns, BROKER[0], LAT_TOPIC, 4)
    lat: list[float] = []

    def sink(df, batch_id):
        rows = df.select("body").collect()
        now = time.time()
        for r in rows:
            lat.append(now - float(r.body.decode()))

    q = (spark.readStream.format("rocketmq").option("namesrv", ns).option("topic", LAT_TOPIC)
         .option("startingOffsets", "latest").load().writeStream.foreachBatch(sink)
         .trigger(processingTime="0 seconds").start())
    time.sleep(8)  # the first batches start the Python workers
    stop = threading.Event()

    def produce():
        with Producer("bench-lat", ns) as p:
            while not stop.is_set():
                p.send(LAT_TOPIC, repr(time.time()).encode())
                time.sleep(1.0 / rate)
    t = threading.Thread(target=produce)
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    time.sleep(3)
    q.stop()
    lat.sort()
    pick = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")  # noqa: E731
    return {"rows": len(lat), "p50_s": pick(0.5), "p99_s": pick(0.99), "max_s": lat[-1] if lat else None}


BROKER: list[str] = []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--latency-seconds", type=float, default=20)
    ap.add_argument("--latency-rate", type=float, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="bench-spark-net-")
    srv = start_broker(os.path.join(work, "store"))
    BROKER.append(srv.broker)
    res: dict = {"messages": a.messages, "size": a.size}
    try:
        ns = srv.namesrv
        create_topic(ns, srv.broker, TOPIC)
        create_topic(ns, srv.broker, SINK_TOPIC)
        res["producer_batched_msgs_s"] = asyncio.run(_load(ns, a.messages, a.size))
        print(f"loaded: {res['producer_batched_msgs_s']:,.0f} msgs/s (batched send)", file=sys.stderr)
        from rocketstore.spark import get_session
        spark = get_session("local[2]", conf={"spark.driver.memory": "2g"})
        from pyspark.sql import functions as F
        file_df = lambda: spark.read.format("rocketmq").load(srv.store).filter(  # noqa: E731
            F.col("topic") == TOPIC)
        net_df = lambda: (spark.read.format("rocketmq").option("namesrv", ns)  # noqa: E731
                          .option("topic", TOPIC).load())
        assert net_df().count() == a.messages  # warm-up, and a check
        assert file_df().count() == a.messages
        noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
        res["file_s"] = timed(lambda: noop(file_df()))
        res["network_s"] = timed(lambda: noop(net_df()))
        res["file_msgs_s"] = a.messages / min(res["file_s"])
        res["network_msgs_s"] = a.messages / min(res["network_s"])
        res["network_vs_file"] = res["network_msgs_s"] / res["file_msgs_s"]
        print(f"file {res['file_msgs_s']:,.0f}/s, network {res['network_msgs_s']:,.0f}/s",
              file=sys.stderr)
        j = java_consumer(ns, a.messages, srv.broker, timeout_s=600)
        if j is not None:
            res["java_consumer"] = j
            res["network_vs_java"] = res["network_msgs_s"] / max(1, j["best_window_msgs_s"])
        body = F.expr(f"CAST(rpad(CAST(id AS STRING), {a.size}, 'x') AS BINARY)")
        src = spark.range(a.messages, numPartitions=2).select(body.alias("body")).cache()
        src.count()
        res["sink_s"] = timed(lambda: src.write.format("rocketmq").option("namesrv", ns)
                              .option("topic", SINK_TOPIC).mode("append").save(), runs=1)
        res["sink_msgs_s"] = a.messages / min(res["sink_s"])
        res["sink_vs_producer"] = res["sink_msgs_s"] / res["producer_batched_msgs_s"]
        res["stream_latency"] = latency(spark, ns, a.latency_seconds, a.latency_rate)
        spark.stop()
    finally:
        srv.stop()
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:28} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
