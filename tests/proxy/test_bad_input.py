"""Bad input over gRPC gets the status codes RocketMQ 5's proxy returns, and stores nothing.

Requests are built with rocketstore's own compiled messages (``rocketstore.proxy.protocol``)
and sent over a real gRPC channel to a ``rocketstore serve`` subprocess.
"""
from __future__ import annotations

import grpc
import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.proxy.protocol import pb, services

from .conftest import make_groups, start_grpc_server

MD = [("x-mq-client-id", "bad-input-test")]
MAX_SIZE = 4096


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("grpc-bad") / "store")
    make_groups(store, G_disabled={"consume_enable": False})
    srv = start_grpc_server(store, {"Good": 2}, "-o", f"max_message_size={MAX_SIZE}")
    channel = grpc.insecure_channel(srv.grpc)
    try:
        yield services.MessagingServiceStub(channel), srv
    finally:
        channel.close()
        assert srv.stop() == 0, srv.log()
    with MessageStore(StoreConfig(store_path_root_dir=store, mapped_file_size_commitlog=1 << 20,
                                  mapped_file_size_consume_queue=20000, max_hash_slot_num=1000,
                                  max_index_num=4000)) as s:
        stored = [m for q in (0, 1) for m in s.get_message("check", "Good", q, 0, 32).messages]
    # nothing refused was stored (only test_a_good_send_still_works's message may be there)
    assert {m.uniq_key for m in stored} <= {"GOOD-ID-1"}


def _msg(topic: str = "Good", body: bytes = b"x", **sp) -> object:
    sp.setdefault("message_id", "0102030405060708")
    return pb.Message(topic=pb.Resource(name=topic), body=body,
                      system_properties=pb.SystemProperties(**sp))


def _send(stub, *msgs, metadata=MD):
    return stub.SendMessage(pb.SendMessageRequest(messages=list(msgs)), metadata=metadata,
                            timeout=10)


def _receive(stub, group="G_bad", topic="Good", invisible_ms=30_000, **kw):
    req = pb.ReceiveMessageRequest(group=pb.Resource(name=group),
                                   message_queue=pb.MessageQueue(topic=pb.Resource(name=topic),
                                                                 id=-1),
                                   batch_size=kw.get("batch", 8),
                                   filter_expression=kw.get("filter") or pb.FilterExpression(
                                       type=pb.TAG, expression="*"))
    req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(500)
    return list(stub.ReceiveMessage(req, metadata=MD, timeout=10))


@pytest.mark.parametrize("topic, code", [("NoSuchTopic", pb.TOPIC_NOT_FOUND),
                                         ("bad topic!", pb.ILLEGAL_TOPIC),
                                         ("", pb.ILLEGAL_TOPIC),
                                         ("x" * 128, pb.ILLEGAL_TOPIC),
                                         ("%RETRY%G", pb.ILLEGAL_TOPIC)])
def test_route_and_send_to_a_bad_topic(stub, topic, code):
    s, _ = stub
    r = s.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD, timeout=10)
    assert r.status.code == code and not r.message_queues
    assert _send(s, _msg(topic)).status.code == code
    got = _receive(s, topic=topic)
    assert [x.status.code for x in got] == [code]


def test_known_topic_routes_every_queue(stub):
    s, _ = stub
    r = s.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="Good")), metadata=MD,
                     timeout=10)
    assert r.status.code == pb.OK
    assert sorted(q.id for q in r.message_queues) == [0, 1]
    assert all(q.permission == pb.READ_WRITE and q.broker.name == "broker-a"
               for q in r.message_queues)


@pytest.mark.parametrize("group", ["", "bad group", "g" * 256, "CID_RMQ_SYS_REVIVE_GROUP"])
def test_wrong_consumer_group(stub, group):
    s, _ = stub
    got = _receive(s, group=group)
    assert [x.status.code for x in got] == [pb.ILLEGAL_CONSUMER_GROUP]
    a = s.QueryAssignment(pb.QueryAssignmentRequest(topic=pb.Resource(name="Good"),
                                                    group=pb.Resource(name=group)),
                          metadata=MD, timeout=10)
    assert a.status.code == pb.ILLEGAL_CONSUMER_GROUP


def test_a_group_that_may_not_consume(stub):
    s, _ = stub
    assert [x.status.code for x in _receive(s, group="G_disabled")] == [pb.FORBIDDEN]


def test_oversized_and_empty_bodies(stub):
    s, _ = stub
    assert _send(s, _msg(body=b"y" * (MAX_SIZE + 1))).status.code == pb.MESSAGE_BODY_TOO_LARGE
    assert _send(s, _msg(body=b"")).status.code == pb.MESSAGE_BODY_EMPTY


def test_bad_message_fields(stub):
    s, _ = stub
    assert _send(s, _msg(message_id="")).status.code == pb.ILLEGAL_MESSAGE_ID
    assert _send(s, _msg(tag="a|b")).status.code == pb.ILLEGAL_MESSAGE_TAG
    m = _msg()
    m.user_properties["UNIQ_KEY"] = "mine"
    assert _send(s, m).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert _send(s, _msg(message_group="g\x01")).status.code == pb.ILLEGAL_MESSAGE_GROUP
    assert _send(s, metadata=MD).status.code == pb.BAD_REQUEST  # no message at all


def test_client_id_is_required(stub):
    s, _ = stub
    assert _send(s, _msg(), metadata=[]).status.code == pb.CLIENT_ID_REQUIRED


def test_bad_receipt_handles_and_invisible_times(stub):
    s, _ = stub
    for handle in ("garbage", "1 2 3", "0 1 30000 0 0 broker-a 0 0 0"):
        r = s.AckMessage(pb.AckMessageRequest(
            group=pb.Resource(name="G_bad"), topic=pb.Resource(name="Good"),
            entries=[pb.AckMessageEntry(message_id="m", receipt_handle=handle)]),
            metadata=MD, timeout=10)
        assert r.status.code == pb.INVALID_RECEIPT_HANDLE
        assert [e.status.code for e in r.entries] == [pb.INVALID_RECEIPT_HANDLE]
    got = _receive(s, invisible_ms=10)
    assert [x.status.code for x in got] == [pb.ILLEGAL_INVISIBLE_TIME]
    # SQL92 while enablePropertyFilter is off (the default): the broker's refusal, which the
    # 5.x proxy answers as INTERNAL_SERVER_ERROR; an empty expression is the proxy's own check
    got = _receive(s, filter=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert [x.status.code for x in got] == [pb.INTERNAL_SERVER_ERROR]
    assert "does not support consumer to filter message by SQL92" in got[0].status.message
    got = _receive(s, filter=pb.FilterExpression(type=pb.SQL, expression="  "))
    assert [x.status.code for x in got] == [pb.ILLEGAL_FILTER_EXPRESSION]


def test_a_good_send_still_works(stub):
    s, _ = stub
    r = _send(s, _msg(message_id="GOOD-ID-1", tag="T"))
    assert r.status.code == pb.OK and [e.message_id for e in r.entries] == ["GOOD-ID-1"]
    got = _receive(s, group="G_good")
    assert got[0].status.code == pb.OK
    msgs = [x.message for x in got if x.HasField("message")]
    assert [m.system_properties.message_id for m in msgs] == ["GOOD-ID-1"]
    handle = msgs[0].system_properties.receipt_handle
    ack = s.AckMessage(pb.AckMessageRequest(
        group=pb.Resource(name="G_good"), topic=pb.Resource(name="Good"),
        entries=[pb.AckMessageEntry(message_id="GOOD-ID-1", receipt_handle=handle)]),
        metadata=MD, timeout=10)
    assert ack.status.code == pb.OK
    again = s.AckMessage(pb.AckMessageRequest(  # a second ack of the same handle
        group=pb.Resource(name="G_good"), topic=pb.Resource(name="Good"),
        entries=[pb.AckMessageEntry(message_id="GOOD-ID-1", receipt_handle=handle)]),
        metadata=MD, timeout=10)
    assert again.status.code == pb.INVALID_RECEIPT_HANDLE


def test_updatetopic_makes_a_topic_grpc_clients_can_use(stub):
    import json
    import subprocess
    import sys

    s, srv = stub
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "updatetopic", "--namesrv",
                        srv.namesrv, "--topic", "MadeLater", "-w", "3", "-r", "3", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["brokers"] == [srv.broker]
    route = s.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="MadeLater")),
                         metadata=MD, timeout=10)
    assert route.status.code == pb.OK and sorted(q.id for q in route.message_queues) == [0, 1, 2]
    bad = subprocess.run([sys.executable, "-m", "rocketstore.cli", "updatetopic", "--namesrv",
                          srv.namesrv, "--topic", "bad topic"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "illegal topic name" in bad.stderr


def _route(s, topic):
    r = s.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=MD, timeout=10)
    assert r.status.code == pb.OK, r.status
    return sorted((q.id, q.permission) for q in r.message_queues)


def _assignment(s, topic, group="G_bad"):
    return s.QueryAssignment(pb.QueryAssignmentRequest(topic=pb.Resource(name=topic),
                                                       group=pb.Resource(name=group)),
                             metadata=MD, timeout=10)


def test_topic_perms_reach_5x_routes_sends_and_receives(stub):
    """A read-only or write-only topic (updateTopic's perm) routes, assigns, takes sends and
    gives receives as RocketMQ 5's proxy over its broker does; wipeWritePerm at the name server
    beside the broker turns the routes read-only, addWritePerm brings writes back."""
    from rocketstore.remoting import RequestCode, ResponseCode

    from ..broker.test_client_broker import raw

    s, srv = stub
    for topic, perm in (("ReadOnly", 4), ("WriteOnly", 2)):
        r = raw(srv.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": topic, "readQueueNums": 2, "writeQueueNums": 3, "perm": perm})
        assert r.code == ResponseCode.SUCCESS
    assert _route(s, "ReadOnly") == [(0, pb.READ), (1, pb.READ)]
    assert _route(s, "WriteOnly") == [(0, pb.WRITE), (1, pb.WRITE), (2, pb.WRITE)]
    sent = _send(s, _msg("ReadOnly", message_id="RO-1"))
    assert sent.status.code == pb.FORBIDDEN and "sending message is forbidden" in sent.status.message
    assert _send(s, _msg("WriteOnly", message_id="WO-1")).status.code == pb.OK
    got = _receive(s, topic="WriteOnly")
    assert got[0].status.code == pb.FORBIDDEN and "pulling message is forbidden" in got[0].status.message
    assert _assignment(s, "WriteOnly").status.code == pb.FORBIDDEN
    ro = _assignment(s, "ReadOnly")
    assert ro.status.code == pb.OK and ro.assignments[0].message_queue.permission == pb.READ

    before = _route(s, "Good")
    assert before == [(0, pb.READ_WRITE), (1, pb.READ_WRITE)]
    wiped = raw(srv.namesrv, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert wiped.code == ResponseCode.SUCCESS
    try:
        assert _route(s, "Good") == [(0, pb.READ), (1, pb.READ)]
        assert _assignment(s, "Good").assignments[0].message_queue.permission == pb.READ
    finally:
        added = raw(srv.namesrv, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        assert added.code == ResponseCode.SUCCESS
    assert _route(s, "Good") == before
