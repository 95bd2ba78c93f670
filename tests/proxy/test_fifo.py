"""FIFO consumption over gRPC: a group with ``consumeMessageOrderly`` gets a queue's messages in
order, one batch in flight at a time; an expired batch comes back (attempt + 1) before anything
after it; past the group's attempts it is dead-lettered and the queue moves on."""
from __future__ import annotations

import time

import grpc
import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.proxy.protocol import pb, services

from .conftest import make_groups, start_grpc_server, write_conf

MD = [("x-mq-client-id", "fifo-test")]


def _receive(stub, group, batch, invisible_ms=3000, poll_ms=300):
    req = pb.ReceiveMessageRequest(group=pb.Resource(name=group),
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name="Seq"),
                                                                 id=-1),
                                   batch_size=batch,
                                   filter_expression=pb.FilterExpression(type=pb.TAG,
                                                                         expression="*"))
    req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(poll_ms)
    out = [r.message for r in stub.ReceiveMessage(req, metadata=MD, timeout=10)
           if r.HasField("message")]
    return [(m.body.decode(), m.system_properties.delivery_attempt,
             m.system_properties.receipt_handle) for m in out]


def _ack(stub, group, handles):
    r = stub.AckMessage(pb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name="Seq"),
        entries=[pb.AckMessageEntry(message_id="m", receipt_handle=h) for h in handles]),
        metadata=MD, timeout=10)
    assert r.status.code == pb.OK, r


def _wait_for(stub, group, batch, deadline_s=15.0, invisible_ms=3000):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = _receive(stub, group, batch, invisible_ms)
        if got:
            return got
    return []


def test_fifo_group_gets_one_batch_at_a_time_in_order(tmp_path):
    store = str(tmp_path / "store")
    conf = write_conf(tmp_path / "broker.conf", minInvisibleTimeMillsForRecv=1000)
    make_groups(store, G_seq={"consume_message_orderly": True, "retry_max_times": 1})
    srv = start_grpc_server(store, {"Seq": 1}, "--config", conf)
    channel = grpc.insecure_channel(srv.grpc)
    try:
        s = services.MessagingServiceStub(channel)
        for i in range(6):
            m = pb.Message(topic=pb.Resource(name="Seq"), body=f"m{i}".encode(),
                           system_properties=pb.SystemProperties(message_id=f"ID{i}",
                                                                 message_group="g1"))
            assert s.SendMessage(pb.SendMessageRequest(messages=[m]), metadata=MD,
                                 timeout=10).status.code == pb.OK
        first = _wait_for(s, "G_seq", 2)
        assert [(b, a) for b, a, _ in first] == [("m0", 1), ("m1", 1)]
        assert _receive(s, "G_seq", 2) == []  # the queue is locked while m0, m1 are in flight
        _ack(s, "G_seq", [first[0][2]])  # m0 done, m1 left to expire
        again = _wait_for(s, "G_seq", 2)  # m1 again, before anything after it
        assert [(b, a) for b, a, _ in again] == [("m1", 2)]
        _ack(s, "G_seq", [h for _, _, h in again])
        nxt = _wait_for(s, "G_seq", 2, invisible_ms=1000)
        assert [(b, a) for b, a, _ in nxt] == [("m2", 1), ("m3", 1)]
        # never acked: attempt 2 comes back, then (retryMaxTimes 1) the batch is dead-lettered
        assert [(b, a) for b, a, _ in _wait_for(s, "G_seq", 2, invisible_ms=1000)] == \
            [("m2", 2), ("m3", 2)]
        last = _wait_for(s, "G_seq", 2)
        assert [(b, a) for b, a, _ in last] == [("m4", 1), ("m5", 1)]
        _ack(s, "G_seq", [h for _, _, h in last])
        assert _receive(s, "G_seq", 2) == []
        # the group's settings tell the client it is a FIFO group
        settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
            group=pb.Resource(name="G_seq")))
        reply = next(s.Telemetry(iter([pb.TelemetryCommand(settings=settings)]), metadata=MD,
                                 timeout=10))
        assert reply.settings.subscription.fifo and reply.settings.backoff_policy.max_attempts == 2
    finally:
        channel.close()
        assert srv.stop() == 0, srv.log()
    with MessageStore(StoreConfig(store_path_root_dir=store, mapped_file_size_commitlog=1 << 20,
                                  mapped_file_size_consume_queue=20000, max_hash_slot_num=1000,
                                  max_index_num=4000)) as st:
        dlq = st.get_message("check", "%DLQ%G_seq", 0, 0, 32).messages
    assert [m.body for m in dlq] == [b"m2", b"m3"]
