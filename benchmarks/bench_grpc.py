"""How fast is the RocketMQ 5.x gRPC port next to the 4.x remoting port of the same broker?

One ``rocketstore serve --grpc-port 0`` subprocess; the same number of 1 KiB messages is sent
and consumed both ways, one after the other, in this process:

- gRPC send: ``SendMessage`` with one message per call (what every 5.x client does), in turn
  and with 16 calls in flight;
- remoting send: ``rocketstore.client.Producer.send``, one message per call, in turn;
- gRPC consume: ``ReceiveMessage`` of 32 + one ``AckMessage`` for the batch (the pop path:
  one checkpoint record per receive, one ack record per message);
- remoting consume: ``PullConsumer.pull`` of 32 (no per-message state on the broker).

Prints one table; ratios are gRPC / remoting in the same run.

    .venv/bin/python benchmarks/bench_grpc.py --messages 5000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from rocketstore.broker.state.topics import TopicConfigManager  # noqa: E402
from rocketstore.client import Producer, PullConsumer  # noqa: E402
from rocketstore.proxy.protocol import pb, services  # noqa: E402
from tests.broker.conftest import start_server  # noqa: E402

MD = [("x-mq-client-id", "bench")]
BODY = b"x" * 1024


def _grpc_send(stub, n: int, topic: str, inflight: int) -> float:
    def one(i: int) -> None:
        m = pb.Message(topic=pb.Resource(name=topic), body=BODY,
                       system_properties=pb.SystemProperties(message_id=f"B{topic}{i:08d}",
                                                             tag="T"))
        r = stub.SendMessage(pb.SendMessageRequest(messages=[m]), metadata=MD, timeout=30)
        assert r.status.code == pb.OK, r

    t = time.perf_counter()
    if inflight <= 1:
        for i in range(n):
            one(i)
    else:
        with ThreadPoolExecutor(inflight) as ex:
            list(ex.map(one, range(n)))
    return n / (time.perf_counter() - t)


def _grpc_consume(stub, n: int, topic: str, group: str) -> float:
    got = 0
    t = time.perf_counter()
    while got < n:
        req = pb.ReceiveMessageRequest(group=pb.Resource(name=group),
                                       message_queue=pb.MessageQueue(
                                           topic=pb.Resource(name=topic), id=-1),
                                       batch_size=32, filter_expression=pb.FilterExpression(
                                           type=pb.TAG, expression="*"))
        req.invisible_duration.FromSeconds(60)
        req.long_polling_timeout.FromSeconds(2)
        msgs = [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=30)
                if r.HasField("message")]
        if not msgs:
            break
        ack = stub.AckMessage(pb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            entries=[pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                        receipt_handle=m.system_properties.receipt_handle)
                     for m in msgs]), metadata=MD, timeout=30)
        assert ack.status.code == pb.OK, ack.status
        got += len(msgs)
    assert got == n, (got, n)
    return n / (time.perf_counter() - t)


def _remoting(namesrv: str, n: int, topic: str) -> tuple[float, float]:
    p = Producer("PG_bench", namesrv)
    t = time.perf_counter()
    for _ in range(n):
        p.send(topic, BODY, tags="T")
    send = n / (time.perf_counter() - t)
    p.shutdown()
    c = PullConsumer("CG_bench", namesrv)
    deadline = time.monotonic() + 30  # until the reput dispatched everything
    while sum(c.max_offset(topic, q) for q in range(4)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    got = 0
    t = time.perf_counter()
    for q in range(4):
        off = 0
        while True:
            r = c.pull(topic, q, off, 32)
            if not r.messages:
                break
            got += len(r.messages)
            off = r.next_begin_offset
    pull = n / (time.perf_counter() - t)
    c.shutdown()
    assert got == n, (got, n)
    return send, pull


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=5000)
    n = ap.parse_args().messages
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        tm = TopicConfigManager(os.path.join(store, "config"))
        for t in ("G1", "G16", "R1"):
            tm.create(t, 4)
        srv = start_server(store, "--grpc-port", "0")
        try:
            ch = grpc.insecure_channel(srv.grpc)
            stub = services.MessagingServiceStub(ch)
            g1 = _grpc_send(stub, n, "G1", 1)
            g16 = _grpc_send(stub, n, "G16", 16)
            gc = _grpc_consume(stub, n, "G1", "CG_grpc")
            rs, rp = _remoting(srv.namesrv, n, "R1")
            ch.close()
        finally:
            srv.stop()
    print(f"{n} messages of 1 KiB, load average {os.getloadavg()[0]:.1f}")
    print("| path | msg/s | gRPC / remoting |")
    print("|---|---|---|")
    print(f"| gRPC SendMessage, one call at a time | {g1:,.0f} | {g1 / rs:.2f}x |")
    print(f"| gRPC SendMessage, 16 in flight | {g16:,.0f} | {g16 / rs:.2f}x |")
    print(f"| remoting send, one at a time | {rs:,.0f} | |")
    print(f"| gRPC ReceiveMessage(32) + AckMessage | {gc:,.0f} | {gc / rp:.2f}x |")
    print(f"| remoting pull(32) | {rp:,.0f} | |")


if __name__ == "__main__":
    main()
