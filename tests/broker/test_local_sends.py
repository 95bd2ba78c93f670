"""The plain sends' fast path on a one-process broker (``serve --workers 1``,
``broker/workers/local.py``) and through worker processes (``--workers 2``): frames written back
to back on one raw socket — plain sends, batch sends (which take the send processor) and a
oneway send — come back answered by opaque, stored in the order they were written, and counted
in ``rocketstore_fast_sends_total``; with ``serverFastSends=false`` every send takes the
processor and the counter is absent."""
from __future__ import annotations

import socket
import time

from rocketstore.client import Producer, PullConsumer
from rocketstore.format.message import properties_to_string
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import NEED_DATA, RemotingConnection
from rocketstore.remoting.header import SEND_V1_TO_V2
from rocketstore.remoting.message_batch import BatchEntry, encode_batch

from .conftest import free_port, metric, start_server, wait_max_offset

TOPIC = "LocalOrder"


def _send_cmd(i: int, batch: bool, oneway: bool = False) -> RemotingCommand:
    body = f"m{i:04d}".encode()
    props = {"UNIQ_KEY": f"U{i:04d}", "WAIT": "true"}
    header = {"producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
              "bornTimestamp": int(time.time() * 1000), "flag": 0,
              "properties": properties_to_string(props), "reconsumeTimes": 0,
              "unitMode": False, "batch": batch}
    fields = {SEND_V1_TO_V2[k]: v for k, v in header.items()}
    if batch:
        return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, fields,
                                       encode_batch([BatchEntry(body, {"UNIQ_KEY": f"U{i:04d}"}, 0)]))
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body, oneway=oneway)


def _pipeline(addr: str, first: int, n: int, batches: bool
              ) -> tuple[dict[int, RemotingCommand], list[bytes]]:
    """Write sends ``first`` .. ``first + n - 1`` in one go (with ``batches`` every 7th a batch;
    the 10th oneway); the answers by opaque and the bodies in the order written."""
    host, port = addr.rsplit(":", 1)
    codec = RemotingConnection()
    out, order, expect = [], [], set()
    for i in range(first, first + n):
        cmd = _send_cmd(i, batch=batches and i % 7 == 3, oneway=i == 10)
        cmd.opaque = 1000 + i
        if not cmd.is_oneway:
            expect.add(cmd.opaque)
        out.extend(codec.send_parts(cmd))
        order.append(f"m{i:04d}".encode())
    answers: dict[int, RemotingCommand] = {}
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"".join(bytes(p) for p in out))
        deadline = time.monotonic() + 20
        while set(answers) != expect and time.monotonic() < deadline:
            codec.receive_data(s.recv(65536))
            while True:
                cmd = codec.next_command()
                if cmd is NEED_DATA:
                    break
                answers[cmd.opaque] = cmd
    assert set(answers) == expect, f"{len(expect - set(answers))} sends unanswered"
    return answers, order


def _run(tmp_path, name: str, *extra: str, workers: int = 1) -> dict:
    mport = free_port()
    srv = start_server(str(tmp_path / name), "--workers", str(workers), "--metrics-port",
                       str(mport), *extra)
    try:
        with Producer("PG", srv.namesrv) as p:  # the topic and its route exist
            assert p.send(TOPIC, b"first", queue_id=0).status == "SEND_OK"
        fast0 = metric(mport, "rocketstore_fast_sends_total")
        plain, plain_order = _pipeline(srv.broker, 0, 30, batches=False)
        fast1 = metric(mport, "rocketstore_fast_sends_total")
        mixed, mixed_order = _pipeline(srv.broker, 30, 60, batches=True)
        with PullConsumer("CG", srv.namesrv) as c:
            assert wait_max_offset(c, TOPIC, 0, 91) == 91
            stored: list[bytes] = []
            while len(stored) < 90:
                got = c.pull(TOPIC, 0, 1 + len(stored), 32).messages
                assert got, "a pull below the max offset found nothing"
                stored += [m.body for m in got]
        return {"answers": {**plain, **mixed}, "order": plain_order + mixed_order,
                "stored": stored, "fast": (fast0, fast1)}
    finally:
        assert srv.stop() == 0, srv.log()


def test_pipelined_sends_are_answered_and_stored_in_the_order_written(tmp_path):
    r = _run(tmp_path, "fast")
    assert r["stored"] == r["order"]  # batches (the send processor) hold later sends behind them
    for op, a in r["answers"].items():
        assert a.code == 0, (op, a.remark)
        # each answer names its own queue offset (the first send took offset 0)
        assert r["stored"][int(a.ext_fields["queueOffset"]) - 1] == f"m{op - 1000:04d}".encode()
    assert r["fast"] == (1, 31)  # the first send, then every one of the 30 plain ones (oneway too)


def test_worker_processes_keep_a_connections_order_too(tmp_path):
    """The same pipelines through two worker processes: a batch goes to the writer whole, and
    the plain sends behind it wait for it (the worker holds the batch until the connection's
    PUTs in flight are answered; the writer answers later PUTs FALLBACK while the batch is with
    the send processor, and the worker sends those again whole, in order)."""
    r = _run(tmp_path, "workers", workers=2)
    assert r["stored"] == r["order"]
    for op, a in r["answers"].items():
        assert a.code == 0, (op, a.remark)
        assert r["stored"][int(a.ext_fields["queueOffset"]) - 1] == f"m{op - 1000:04d}".encode()
    assert r["fast"] == (1, 31)  # no batch in the first pipeline: all 30 took the fast path


def test_server_fast_sends_false_takes_the_send_processor(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("serverFastSends=false\n")
    r = _run(tmp_path, "slow", "--config", str(conf))
    assert r["stored"] == r["order"]
    assert all(a.code == 0 for a in r["answers"].values())
    assert r["fast"] == (None, None)
