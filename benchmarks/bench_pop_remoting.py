"""POP_MESSAGE and ACK_MESSAGE latency on ``rocketstore serve`` alone, as RocketMQ's proxy sends them.

N 1 KiB messages on a 4-queue topic, then C connections each loop: one POP_MESSAGE (32, any
queue), then that batch's ACK_MESSAGEs all at once on the same connection (RocketMQ 5.3.3's proxy
acks a received batch message by message, without waiting between them), until all are acked.
Prints the drain rate and the median time of a POP_MESSAGE and of a batch's acks.

    .venv/bin/python benchmarks/bench_pop_remoting.py --messages 2000 --connections 4
"""
from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rocketstore.remoting.command import RemotingCommand  # noqa: E402
from rocketstore.remoting.connection import NEED_DATA, RemotingConnection  # noqa: E402
from tests.broker.admin_wire import call, wait_dispatched  # noqa: E402
from tests.broker.conftest import start_server  # noqa: E402

TOPIC, GROUP = "PopBench", "G_pop_bench"


class Conn:
    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.codec = RemotingConnection()

    def many(self, reqs: list[tuple[int, dict, bytes]]) -> list[RemotingCommand]:
        """Send every request, then read every answer (in request order)."""
        cmds = [RemotingCommand.request(c, f, b, language="JAVA") for c, f, b in reqs]
        self.sock.sendall(b"".join(self.codec.send(c) for c in cmds))
        got: dict[int, RemotingCommand] = {}
        while len(got) < len(cmds):
            r = self.codec.next_command()
            if r is NEED_DATA:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                self.codec.receive_data(data)
            else:
                got[r.opaque] = r
        return [got[c.opaque] for c in cmds]


def acks_for(pop: RemotingCommand, broker_name: str) -> list[tuple[int, dict, bytes]]:
    """One ACK_MESSAGE per popped message, the receipt handle built from the POP answer's
    header as RocketMQ's client builds it (``ExtraInfoUtil``)."""
    f = pop.ext_fields
    starts = {tuple(e.split(" ")[:2]): e.split(" ")[2] for e in f["startOffsetInfo"].split(";")}
    out = []
    for entry in f["msgOffsetInfo"].split(";"):
        retry, qid, offsets = entry.split(" ")
        for o in offsets.split(","):
            extra = (f"{starts[(retry, qid)]} {f['popTime']} {f['invisibleTime']} "
                     f"{f['reviveQid']} {retry} {broker_name} {qid} {o}")
            out.append((200051, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": int(qid),
                                 "extraInfo": extra, "offset": int(o)}, b""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--connections", type=int, default=4)
    args = ap.parse_args()
    n = args.messages - args.messages % 4
    work = Path(tempfile.mkdtemp(prefix="bench-pop-remoting-"))
    srv = start_server(str(work / "store"), "--workers", "1")
    try:
        r = call(srv.broker, 17, {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": 4,
                                  "writeQueueNums": 4, "perm": 6, "order": "false",
                                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0})
        assert r.code == 0, r.remark
        c = Conn(srv.broker)
        for i in range(0, n, 50):
            c.many([(10, {"producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102",
                          "defaultTopicQueueNums": 4, "queueId": j % 4, "sysFlag": 0,
                          "bornTimestamp": int(time.time() * 1000), "flag": 0,
                          "properties": "", "reconsumeTimes": 0}, b"x" * 1024)
                    for j in range(i, min(i + 50, n))])
        wait_dispatched(srv.broker, TOPIC, {q: n // 4 for q in range(4)})
        lock, acked = threading.Lock(), [0]
        pops: list[float] = []
        ack_batches: list[float] = []
        failures: list[str] = []

        def consume() -> None:
            conn = Conn(srv.broker)
            while True:
                with lock:
                    if acked[0] >= n or failures:
                        return
                t0 = time.perf_counter()
                [pop] = conn.many([(200050, {
                    "consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 32,
                    "invisibleTime": 60_000, "pollTime": 1000,
                    "bornTime": int(time.time() * 1000), "initMode": 1, "expType": "TAG",
                    "exp": "*", "order": "false"}, b"")])
                t1 = time.perf_counter()
                if pop.code != 0:
                    continue  # nothing left right now: the others hold the rest
                answers = conn.many(acks_for(pop, "broker-a"))
                t2 = time.perf_counter()
                with lock:
                    if any(a.code != 0 for a in answers):
                        failures.append(next(a.remark for a in answers if a.code != 0))
                    acked[0] += len(answers)
                    pops.append(t1 - t0)
                    ack_batches.append(t2 - t1)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=consume) for _ in range(args.connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if failures:
            sys.exit(f"an ack failed: {failures[0]}")
        print(f"{n} x 1 KiB, {args.connections} connections: POP(32) + its ACK_MESSAGEs "
              f"{n / elapsed:.0f} msg/s; median POP_MESSAGE {statistics.median(pops) * 1e3:.1f} "
              f"ms, median batch of acks {statistics.median(ack_batches) * 1e3:.1f} ms "
              f"({len(pops)} batches)")
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
