"""Question: what do the operator's admin requests cost on ``rocketstore serve`` as a topic's
queue count grows, next to the cheapest request (GET_MAX_OFFSET) in the same run — and what does
the fastjson-dialect codec cost next to the standard library's ``json`` on the same bodies?

    .venv/bin/python benchmarks/bench_admin.py [--queues 8,64,512] [--rounds 200]

Prints one line per (request, queue count): median and p99 round-trip µs over one held
connection, and the ratio to GET_MAX_OFFSET's median; then the codec timings.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from rocketstore.remoting import fastjson
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import NEED_DATA, RemotingConnection
from netutil import free_port



class Conn:
    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.codec = RemotingConnection()

    def call(self, code: int, fields: dict | None = None, body: bytes = b"") -> RemotingCommand:
        self.sock.sendall(self.codec.send(RemotingCommand.request(code, fields or {}, body)))
        while True:
            r = self.codec.next_command()
            if r is not NEED_DATA:
                return r  # type: ignore[return-value]
            self.codec.receive_data(self.sock.recv(1 << 20))


def timed(conn: Conn, rounds: int, code: int, fields: dict) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        r = conn.call(code, fields)
        samples.append((time.perf_counter() - t) * 1e6)
        assert r.code == 0, (code, r.code, r.remark)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", default="8,64,512")
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port, ns = free_port(), free_port()
        proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                                 os.path.join(tmp, "store"), "--port", str(port),
                                 "--namesrv-port", str(ns), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            proc.stdout.readline()  # the "ready" line
            conn = Conn(f"127.0.0.1:{port}")
            print(f"{'request':<34} {'queues':>6} {'median µs':>10} {'p99 µs':>8} {'× max-offset':>12}")
            for n in [int(x) for x in args.queues.split(",")]:
                topic = f"Bench{n}"
                conn.call(17, {"topic": topic, "readQueueNums": n, "writeQueueNums": n})
                for q in range(n):  # one message and a committed offset in every queue
                    props = "\u0001".join(["WAIT\u0002true"]) + "\u0001"
                    conn.call(10, {"producerGroup": "BP", "topic": topic, "defaultTopic": "TBW102",
                                   "defaultTopicQueueNums": 4, "queueId": q, "sysFlag": 0,
                                   "bornTimestamp": int(time.time() * 1000), "flag": 0,
                                   "properties": props, "reconsumeTimes": 0}, )
                    conn.call(15, {"consumerGroup": "BG", "topic": topic, "queueId": q,
                                   "commitOffset": 1})
                base, _ = timed(conn, args.rounds, 30, {"topic": topic, "queueId": 0})
                print(f"{'GET_MAX_OFFSET (30)':<34} {n:>6} {base:>10.0f} {'':>8} {1.0:>12.1f}")
                for name, code, fields in (
                        ("GET_TOPIC_STATS_INFO (202)", 202, {"topic": topic}),
                        ("GET_CONSUME_STATS (208)", 208, {"consumerGroup": "BG", "topic": topic}),
                        ("GET_BROKER_RUNTIME_INFO (28)", 28, {}),
                        ("GET_ALL_TOPIC_CONFIG (21)", 21, {})):
                    med, p99 = timed(conn, args.rounds, code, fields)
                    print(f"{name:<34} {n:>6} {med:>10.0f} {p99:>8.0f} {med / base:>12.1f}")
            body = conn.call(208, {"consumerGroup": "BG", "topic": f"Bench{n}"}).body
        finally:
            proc.terminate()
            proc.wait(30)
    text = body.decode()
    std = json.dumps({"consumeTps": 0.0, "offsetTable": [
        {"mq": dict(k), "v": v} for k, v in fastjson.loads(text)["offsetTable"].items()]})
    for label, fn in (("fastjson.loads (object keys)", lambda: fastjson.loads(text)),
                      ("json.loads (same data, list form)", lambda: json.loads(std))):
        t = time.perf_counter()
        for _ in range(200):
            fn()
        print(f"{label:<36} {len(text):>7} bytes  {(time.perf_counter() - t) / 200 * 1e6:>8.0f} µs")


if __name__ == "__main__":
    main()
