"""One pop state for both doors: a message popped over remoting (POP_MESSAGE, RocketMQ 5's
broker code) is acked over gRPC (AckMessage) and one received over gRPC is acked over remoting
(ACK_MESSAGE); the second ack of each, through the other door, finds nothing in flight."""
from __future__ import annotations

import time

import grpc
import pytest

from rocketstore.format.message import decode_message
from rocketstore.proxy.protocol import pb, services
from rocketstore.remoting.codes import RequestCode, ResponseCode
from tests.broker.admin_wire import call

from .conftest import start_grpc_server

MD = [("x-mq-client-id", "both-doors-test")]


@pytest.fixture
def srv(tmp_path):
    s = start_grpc_server(str(tmp_path / "store"), {"Both": 1})
    yield s
    assert s.stop() == 0, s.log()


def _send(stub, body: bytes, mid: str):
    m = pb.Message(topic=pb.Resource(name="Both"), body=body,
                   system_properties=pb.SystemProperties(message_id=mid))
    r = stub.SendMessage(pb.SendMessageRequest(messages=[m]), metadata=MD, timeout=10)
    assert r.status.code == pb.OK, r


def _grpc_ack(stub, handle: str, mid: str) -> int:
    r = stub.AckMessage(pb.AckMessageRequest(
        group=pb.Resource(name="G_both"), topic=pb.Resource(name="Both"),
        entries=[pb.AckMessageEntry(message_id=mid, receipt_handle=handle)]),
        metadata=MD, timeout=10)
    return r.status.code


def _remoting_pop(addr: str):
    resp = call(addr, RequestCode.POP_MESSAGE, {
        "consumerGroup": "G_both", "topic": "Both", "queueId": -1, "maxMsgNums": 32,
        "invisibleTime": 30_000, "pollTime": 3000, "bornTime": int(time.time() * 1000),
        "initMode": 1, "expType": "TAG", "exp": "*", "order": "false"})
    return resp


def test_pop_over_remoting_ack_over_grpc_and_back(srv):
    channel = grpc.insecure_channel(srv.grpc)
    stub = services.MessagingServiceStub(channel)
    try:
        _send(stub, b"one", "MID-ONE")
        resp = _remoting_pop(srv.broker)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        f = resp.ext_fields
        m = decode_message(resp.body, 0)
        assert m.body == b"one"
        retry, qid, start = f["startOffsetInfo"].split(" ")
        assert (retry, int(qid)) == ("0", m.queue_id)
        assert f["msgOffsetInfo"] == f"0 {m.queue_id} {m.queue_offset}"
        # the handle RocketMQ 5's client builds from the header (ExtraInfoUtil.buildExtraInfo)
        handle = " ".join(map(str, (start, f["popTime"], f["invisibleTime"], f["reviveQid"], 0,
                                    "broker-a", m.queue_id, m.queue_offset)))
        assert _grpc_ack(stub, handle, "MID-ONE") == pb.OK
        assert _grpc_ack(stub, handle, "MID-ONE") == pb.INVALID_RECEIPT_HANDLE  # acked once

        _send(stub, b"two", "MID-TWO")
        req = pb.ReceiveMessageRequest(
            group=pb.Resource(name="G_both"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Both"), id=-1), batch_size=8,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
        req.invisible_duration.FromMilliseconds(30_000)
        req.long_polling_timeout.FromMilliseconds(3000)
        got = [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=10)
               if r.HasField("message")]
        assert [g.body for g in got] == [b"two"]
        rh = got[0].system_properties.receipt_handle
        parts = rh.split(" ")
        ack = call(srv.broker, RequestCode.ACK_MESSAGE, {
            "consumerGroup": "G_both", "topic": "Both", "queueId": int(parts[6]),
            "extraInfo": rh, "offset": int(parts[7])})
        assert ack.code == ResponseCode.SUCCESS, ack.remark
        assert _grpc_ack(stub, rh, "MID-TWO") == pb.INVALID_RECEIPT_HANDLE  # acked over remoting
        # nothing is left in flight and nothing comes back
        again = _remoting_pop(srv.broker)
        assert again.code == ResponseCode.POLLING_TIMEOUT, (again.code, again.body[:100])
    finally:
        channel.close()
