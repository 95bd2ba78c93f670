"""How fast does a 5.x consumer drain a topic through a SQL92 filter, next to a tag filter?

One ``rocketstore serve --grpc-port 0`` subprocess with ``enablePropertyFilter``,
``enableConsumeQueueExt`` and ``enableCalcFilterBitMap``. Two topics get the same messages
(4 queues, 100-byte bodies; 1 in ``--every`` carries tag ``hit`` and ``region=eu``, the rest
``miss`` and ``region=us``), sent 32 per SendMessage:

- ``Plain``: written before any SQL92 group registered, so no record has a bitmap bit for it
  and the filter reads every record's properties;
- ``Bitmap``: written after the SQL92 group sent its Telemetry settings, so the ConsumeQueue-ext
  bitmaps rule out the misses without a CommitLog read.

Each drain is ReceiveMessage(32) + one AckMessage per batch until every match came; the rate is
messages of the topic scanned per second (the tag drain of ``Plain`` is the baseline of the run).

    .venv/bin/python benchmarks/bench_grpc_sql92.py --messages 20000 --every 10
"""
from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from rocketstore.broker.state.topics import TopicConfigManager  # noqa: E402
from rocketstore.proxy.protocol import pb, services  # noqa: E402
from tests.broker.conftest import start_server  # noqa: E402

MD = [("x-mq-client-id", "bench-sql")]
BODY = b"x" * 100
SQL = pb.FilterExpression(type=pb.SQL, expression="region = 'eu'")
TAG = pb.FilterExpression(type=pb.TAG, expression="hit")


def _send(stub, n: int, topic: str, every: int) -> int:
    hits = 0
    for start in range(0, n, 32):
        msgs = []
        for i in range(start, min(start + 32, n)):
            hit = i % every == 0
            hits += hit
            msgs.append(pb.Message(
                topic=pb.Resource(name=topic), body=BODY,
                user_properties={"region": "eu" if hit else "us"},
                system_properties=pb.SystemProperties(message_id=f"S{topic}{i:09d}",
                                                      tag="hit" if hit else "miss")))
        r = stub.SendMessage(pb.SendMessageRequest(messages=msgs), metadata=MD, timeout=60)
        assert r.status.code == pb.OK, r.status
    return hits


def _drain(stub, topic: str, group: str, expr, want: int) -> float:
    got = 0
    t = time.perf_counter()
    while got < want:
        req = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=32,
                                       message_queue=pb.MessageQueue(
                                           topic=pb.Resource(name=topic), id=-1),
                                       filter_expression=expr)
        req.invisible_duration.FromSeconds(60)
        req.long_polling_timeout.FromSeconds(2)
        msgs = [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=60)
                if r.HasField("message")]
        assert msgs, f"{group}: {got} of {want} then nothing"
        ack = stub.AckMessage(pb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            entries=[pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                        receipt_handle=m.system_properties.receipt_handle)
                     for m in msgs]), metadata=MD, timeout=60)
        assert ack.status.code == pb.OK, ack.status
        got += len(msgs)
    assert got == want, (got, want)
    return time.perf_counter() - t


def _register(stub, group: str, topic: str) -> queue.Queue:
    """Open a Telemetry stream with the group's SQL92 subscription (what a 5.x client does)."""
    commands: queue.Queue = queue.Queue()
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group),
        subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=topic), expression=SQL)]))
    commands.put(pb.TelemetryCommand(settings=settings))
    replies = stub.Telemetry(iter(commands.get, None), metadata=MD, timeout=3600)
    assert next(replies).status.code == pb.OK
    return commands


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--every", type=int, default=10, help="1 in EVERY messages matches")
    a = ap.parse_args()
    n = a.messages
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        tm = TopicConfigManager(os.path.join(store, "config"))
        for t in ("Plain", "Bitmap"):
            tm.create(t, 4)
        conf = os.path.join(tmp, "broker.conf")
        with open(conf, "w") as fh:
            fh.write("enablePropertyFilter=true\nenableConsumeQueueExt=true\n"
                     "enableCalcFilterBitMap=true\n")
        srv = start_server(store, "--grpc-port", "0", "--config", conf)
        streams = []
        try:
            ch = grpc.insecure_channel(srv.grpc)
            stub = services.MessagingServiceStub(ch)
            hits = _send(stub, n, "Plain", a.every)
            streams.append(_register(stub, "G_sql_bitmap", "Bitmap"))
            assert _send(stub, n, "Bitmap", a.every) == hits
            time.sleep(1.0)  # dispatched
            rows = [("tag `hit` (baseline)", _drain(stub, "Plain", "G_tag", TAG, hits)),
                    ("SQL92 `region = 'eu'`, records read", _drain(stub, "Plain", "G_sql", SQL,
                                                                   hits)),
                    ("SQL92 `region = 'eu'`, bitmap prefilter",
                     _drain(stub, "Bitmap", "G_sql_bitmap", SQL, hits))]
            for s in streams:
                s.put(None)
            ch.close()
        finally:
            srv.stop()
    base = rows[0][1]
    print(f"{n} messages, {hits} match, load average {os.getloadavg()[0]:.1f}")
    print("| drain over gRPC | seconds | messages scanned/s | vs tag |")
    print("|---|---|---|---|")
    for name, secs in rows:
        print(f"| {name} | {secs:.2f} | {n / secs:,.0f} | {base / secs:.2f}x |")


if __name__ == "__main__":
    main()
