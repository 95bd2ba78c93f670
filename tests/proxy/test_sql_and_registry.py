"""SQL92 filters over gRPC, and gRPC consumers in the broker's consumer registry.

A real ``rocketmq-python-client==5.1.2`` SimpleConsumer with a SQL92 ``FilterExpression``
receives exactly the messages the expression selects (the expected set is computed here, in
Python, from what the producer reports it sent), a bad expression gets the 5.x proxy's code,
and the consumer is listed by GET_CONSUMER_CONNECTION_LIST and ``rocketstore consumers`` while
it runs and no longer once it shut down (NotifyClientTermination). Heartbeats that stop expire a
gRPC consumer after ``channelExpiredTimeout``, as a remoting one.
"""
from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

import grpc
import pytest

from rocketstore.proxy.protocol import pb, services
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import RemotingConnection

from tests import referee

from .conftest import DRIVER, client_python, run_script, start_grpc_server, write_conf

pytestmark = pytest.mark.interop
MQADMIN_HOME = os.environ.get("ROCKETMQ_HOME", "")

N = 48
COLORS = ("red", "green", "blue")
EXPR = "(color IN ('red', 'blue') AND seq BETWEEN 3 AND 27) OR (TAGS = 'Tag1' AND seq >= 36)"


def selected(seq: int, color: str, tag: str) -> bool:
    """EXPR, written out in Python."""
    return (color in ("red", "blue") and 3 <= seq <= 27) or (tag == "Tag1" and seq >= 36)


def remoting_call(addr: str, code: int, fields: dict) -> RemotingCommand:
    conn = RemotingConnection()
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(conn.send(RemotingCommand.request(code, fields)))
        while True:
            cmd = conn.next_command()
            if isinstance(cmd, RemotingCommand):
                return cmd
            data = s.recv(65536)
            assert data, "the broker closed the connection"
            conn.receive_data(data)


def connection_list(addr: str, group: str) -> dict | None:
    r = remoting_call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
    if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
        return None
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return json.loads(r.body)


def wait_for(fn, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def cli_consumers(broker: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "consumers", "--broker", broker,
                        "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return {g["group"]: g for g in json.loads(r.stdout)["groups"]}


def test_sql92_receive_and_the_consumer_registry(tmp_path):
    py = client_python()
    store = str(tmp_path / "store")
    conf = write_conf(tmp_path / "broker.conf", enablePropertyFilter="true",
                      enableCalcFilterBitMap="true", enableConsumeQueueExt="true")
    srv = start_grpc_server(store, {"Colors": 4}, "--config", conf)
    holder = None
    try:
        ep = srv.grpc
        want = sum(selected(i, COLORS[i % 3], f"Tag{i % 2}") for i in range(N))
        holder = subprocess.Popen(
            [py, str(DRIVER), "sql", ep, "Colors", "G_sql", EXPR, str(want), "hold"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "HOME": str(tmp_path)})
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in holder.stdout], daemon=True).start()

        # online as soon as its Telemetry settings arrived, with what it told the server
        conn = wait_for(lambda: connection_list(srv.broker, "G_sql"), 60, "G_sql online")
        [c] = conn["connectionSet"]
        assert c["clientId"] and c["language"] == "PYTHON"
        assert c["version"] == 437  # MQVersion V5_1_2: the client's x-mq-client-version
        host, _, port = c["clientAddr"].rpartition(":")
        assert host == "127.0.0.1" and port.isdigit()
        assert conn["consumeType"] == "CONSUME_ACTIVELY"
        assert conn["messageModel"] == "CLUSTERING"
        sub = conn["subscriptionTable"]["Colors"]
        assert sub["expressionType"] == "SQL92" and sub["subString"] == EXPR

        # sent while it polls: the filter's bitmaps cover these records
        sent, bad = run_script(py, tmp_path, ("colors", ep, "Colors", N),
                               ("sql", ep, "Colors", "G_bad", "seq >>> 3", 0))
        assert len(sent) == N
        expected = {s["body"] for s in sent if selected(s["seq"], s["color"], s["tag"])}
        assert len(expected) == want

        line = lines.get(timeout=90)
        result = json.loads(line)
        assert result["error"] is None
        got = result["got"]
        assert sorted(g["body"] for g in got) == sorted(expected)  # each once, nothing else
        by_body = {s["body"]: s for s in sent}
        for g in got:
            s = by_body[g["body"]]
            assert g["message_id"] == s["message_id"] and g["tag"] == s["tag"]
            assert g["properties"]["color"] == s["color"]

        # a bad expression: the broker cannot parse it, the 5.x proxy answers 50001
        assert bad["got"] == [] and bad["error"] is not None
        assert str(pb.INTERNAL_SERVER_ERROR) in str(bad["error"]["code"]) + bad["error"]["message"]
        assert "parse the consumer's subscription failed" in bad["error"]["message"]
        assert connection_list(srv.broker, "G_bad") is None  # it shut down: gone

        rows = cli_consumers(srv.broker)
        assert rows["G_sql"]["online"] == 1
        assert rows["G_sql"]["totalLag"] == 0  # everything it was sent got consumed or skipped

        holder.stdin.write("bye\n")
        holder.stdin.flush()
        assert holder.wait(60) == 0, holder.stderr.read()[-3000:]
        wait_for(lambda: connection_list(srv.broker, "G_sql") is None, 20, "G_sql offline")
        assert cli_consumers(srv.broker)["G_sql"]["online"] == 0
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait(10)
        assert srv.stop() == 0, srv.log()


def producer_list(addr: str, group: str) -> dict | None:
    r = remoting_call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group})
    return json.loads(r.body) if r.code == ResponseCode.SUCCESS else None


def test_a_grpc_producer_is_listed_until_it_terminates(tmp_path):
    srv = start_grpc_server(str(tmp_path / "store"), {"Pub": 2})
    channel = grpc.insecure_channel(srv.grpc)
    commands: queue.Queue = queue.Queue()
    try:
        stub = services.MessagingServiceStub(channel)
        md = [("x-mq-client-id", "pub-client@1"), ("x-mq-language", "GOLANG"),
              ("x-mq-client-version", "5.1.0")]
        settings = pb.Settings(client_type=pb.PRODUCER,
                               publishing=pb.Publishing(topics=[pb.Resource(name="Pub")]))
        commands.put(pb.TelemetryCommand(settings=settings))
        replies = stub.Telemetry(iter(commands.get, None), metadata=md, timeout=30)
        assert next(replies).status.code == pb.OK
        conn = producer_list(srv.broker, "Pub")  # the 5.x proxy's producer group: the topic
        assert conn is not None
        [c] = conn["connectionSet"]
        # RocketMQ's LanguageCode names Go "GO"; 433 is MQVersion V5_1_0
        assert (c["clientId"], c["language"], c["version"]) == ("pub-client@1", "GO", 433)
        assert c["clientAddr"].startswith("127.0.0.1:")
        r = stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(), metadata=md,
                                         timeout=10)
        assert r.status.code == pb.OK
        assert producer_list(srv.broker, "Pub") is None
    finally:
        commands.put(None)
        channel.close()
        assert srv.stop() == 0, srv.log()


def test_a_consumer_whose_heartbeats_stop_expires(tmp_path):
    conf = write_conf(tmp_path / "broker.conf", channelExpiredTimeout=3000,
                      flushConsumerOffsetInterval=300)
    srv = start_grpc_server(str(tmp_path / "store"), {"Beat": 2}, "--config", conf)
    channel = grpc.insecure_channel(srv.grpc)
    try:
        stub = services.MessagingServiceStub(channel)
        md = [("x-mq-client-id", "beat-client@1"), ("x-mq-language", "JAVA"),
              ("x-mq-client-version", "5.0.7")]
        req = pb.HeartbeatRequest(group=pb.Resource(name="G_beat"),
                                  client_type=pb.PUSH_CONSUMER)
        assert stub.Heartbeat(req, metadata=md, timeout=10).status.code == pb.OK
        conn = connection_list(srv.broker, "G_beat")
        assert conn is not None and conn["consumeType"] == "CONSUME_PASSIVELY"
        assert [(c["clientId"], c["language"], c["version"]) for c in conn["connectionSet"]] == \
            [("beat-client@1", "JAVA", 413 + 2 * 7)]  # V5_0_7
        # heartbeats keep it: past the expiry time it is still there
        t_end = time.monotonic() + 4.0
        while time.monotonic() < t_end:
            assert stub.Heartbeat(req, metadata=md, timeout=10).status.code == pb.OK
            time.sleep(0.3)
        assert connection_list(srv.broker, "G_beat") is not None
        stopped = time.monotonic()
        wait_for(lambda: connection_list(srv.broker, "G_beat") is None, 30, "expiry")
        assert time.monotonic() - stopped >= 2.0  # not before channelExpiredTimeout (3 s)
    finally:
        channel.close()
        assert srv.stop() == 0, srv.log()


@referee.skip_unless(referee.V4)
def test_mqadmin_sees_a_grpc_consumer(tmp_path):
    """RocketMQ 4.9.7's own mqadmin reads the registry entry of a gRPC consumer that received
    (through a SQL92 filter) and acked."""
    from ..broker.test_mqadmin import mqadmin

    conf = write_conf(tmp_path / "broker.conf", enablePropertyFilter="true")
    srv = start_grpc_server(str(tmp_path / "store"), {"Mq": 2}, "--config", conf)
    channel = grpc.insecure_channel(srv.grpc)
    commands: queue.Queue = queue.Queue()
    try:
        stub = services.MessagingServiceStub(channel)
        md = [("x-mq-client-id", "go-client@7"), ("x-mq-language", "GOLANG"),
              ("x-mq-client-version", "5.1.1")]
        sql = pb.FilterExpression(type=pb.SQL, expression="a > 2")
        for i in range(6):
            m = pb.Message(topic=pb.Resource(name="Mq"), body=f"m{i}".encode(),
                           user_properties={"a": str(i)},
                           system_properties=pb.SystemProperties(message_id=f"MQ-ID-{i}"))
            r = stub.SendMessage(pb.SendMessageRequest(messages=[m]), metadata=md, timeout=10)
            assert r.status.code == pb.OK
        settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
            group=pb.Resource(name="G_go"),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="Mq"), expression=sql)]))
        commands.put(pb.TelemetryCommand(settings=settings))
        replies = stub.Telemetry(iter(commands.get, None), metadata=md, timeout=120)
        assert next(replies).status.code == pb.OK
        got = []
        for _ in range(10):
            if len(got) >= 3:
                break
            req = pb.ReceiveMessageRequest(
                group=pb.Resource(name="G_go"), batch_size=32, filter_expression=sql,
                message_queue=pb.MessageQueue(topic=pb.Resource(name="Mq"), id=-1))
            req.invisible_duration.FromMilliseconds(30_000)
            req.long_polling_timeout.FromMilliseconds(1000)
            for resp in stub.ReceiveMessage(req, metadata=md, timeout=10):
                if resp.HasField("message"):
                    got.append(resp.message)
        assert sorted(m.body for m in got) == [b"m3", b"m4", b"m5"]
        for m in got:
            ack = stub.AckMessage(pb.AckMessageRequest(
                group=pb.Resource(name="G_go"), topic=pb.Resource(name="Mq"),
                entries=[pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                            receipt_handle=m.system_properties.receipt_handle)]),
                metadata=md, timeout=10)
            assert ack.status.code == pb.OK

        conn = mqadmin("consumerConnection", "-n", srv.namesrv, "-g", "G_go")
        row = next(ln.split() for ln in conn.splitlines() if ln.startswith("go-client@7"))
        assert row[2:] == ["GO", "V5_1_1"] and row[1].startswith("127.0.0.1:"), conn
        assert "a > 2" in conn and "CONSUME_ACTIVELY" in conn, conn
        progress = mqadmin("consumerProgress", "-n", srv.namesrv, "-g", "G_go")
        assert "Diff Total: 0" in progress and "Mq" in progress, progress
    finally:
        commands.put(None)
        channel.close()
        assert srv.stop() == 0, srv.log()
