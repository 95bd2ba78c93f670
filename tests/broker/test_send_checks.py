"""What a send may not do: reach a system topic, or make one frame into a flood of records."""
from __future__ import annotations

import os

import pytest

from rocketstore.broker.state.topic_validator import NOT_ALLOWED_SEND_TOPICS
from rocketstore.client import Producer, PullConsumer
from rocketstore.errors import BrokerError
from rocketstore.format.message import Message
from rocketstore.remoting import RequestCode, ResponseCode

from .conftest import start_server, wait_max_offset
from .test_client_broker import raw

LIMIT = 65536  # maxMessageSize of the test broker


@pytest.fixture
def small_server(tmp_path):
    srv = start_server(str(tmp_path / "store"), "-o", f"max_message_size={LIMIT}")
    yield srv
    assert srv.stop() == 0, srv.log()


def _send(addr: str, topic: str, body: bytes = b"x", properties: str = ""):
    return raw(addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0, "bornTimestamp": 1, "flag": 0,
        "properties": properties, "reconsumeTimes": 0}, body)


def test_sends_to_system_topics_are_refused(small_server):
    assert NOT_ALLOWED_SEND_TOPICS >= {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                                       "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                                       "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"}
    for topic in sorted(NOT_ALLOWED_SEND_TOPICS):
        resp = _send(small_server.broker, topic, properties="REAL_TOPIC\x01Victim\x02")
        assert resp.code == ResponseCode.NO_PERMISSION, (topic, resp)
        assert resp.remark == f"Sending message to topic[{topic}] is forbidden."
    with Producer("PG", small_server.namesrv) as p:
        with pytest.raises(BrokerError) as e:
            p.send("SCHEDULE_TOPIC_XXXX", b"sneak", queue_id=0)
        assert e.value.code == ResponseCode.NO_PERMISSION
        p.send("Victim", b"marker", queue_id=0)  # an ordinary topic is fine
    c = PullConsumer("CG", small_server.namesrv)
    try:
        for q in range(4):
            try:
                assert c.max_offset("SCHEDULE_TOPIC_XXXX", q) == 0
            except BrokerError as exc:  # no route: never created (a lookup creates none)
                assert exc.code == ResponseCode.TOPIC_NOT_EXIST, exc
                assert not os.path.exists(os.path.join(small_server.store, "consumequeue",
                                                       "SCHEDULE_TOPIC_XXXX"))
        assert wait_max_offset(c, "Victim", 0, 1) == 1
        r = c.pull("Victim", 0, 0)
        assert [m.body for m in r.messages] == [b"marker"]
    finally:
        c.shutdown()


def test_batch_capped_at_max_message_size_as_a_whole(small_server):
    with Producer("PG", small_server.namesrv) as p:
        # 3000 ten-byte bodies: 30 KB of bodies, but well over 64 KiB on the wire
        with pytest.raises(BrokerError) as e:
            p.send_batch("BatchT", [f"b{i:09d}".encode() for i in range(3000)], queue_id=0)
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert "message body size exceeded" in (e.value.remark or "")
        ok = p.send_batch("BatchT", [f"b{i:09d}".encode() for i in range(100)], queue_id=0)
        assert len(ok.msg_ids) == 100
        with pytest.raises(BrokerError) as e:  # per-message rules still hold inside a batch
            p.send_batch("BatchT", [Message(topic="BatchT", body=b"t",
                                            properties={"TRAN_MSG": "true"})], queue_id=0)
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(BrokerError) as e:
            p.send_batch("%RETRY%G", [b"r"], queue_id=0)
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
    c = PullConsumer("CG", small_server.namesrv)
    try:
        assert wait_max_offset(c, "BatchT", 0, 100) == 100
        n = 0
        while True:
            r = c.pull("BatchT", 0, n)
            if not r.messages:
                break
            n += len(r.messages)
        assert n == 100 == c.max_offset("BatchT", 0)
    finally:
        c.shutdown()


def test_batch_messages_are_the_base_with_each_entrys_body_properties_and_flag():
    """``send.batch_messages`` builds each entry of a plain batch as
    ``dataclasses.replace(base, body=, properties=, flag=)`` would: every other field — all of
    ``Message``'s, set to values that differ from their defaults — is the base's."""
    import dataclasses

    from rocketstore.broker.processors.send import batch_messages
    values = {"topic": "T", "body": b"base", "tags": "TagA", "keys": "k1 k2",
              "properties": {"b": "1"}, "queue_id": 3, "flag": 9, "sys_flag": 0x10,
              "born_timestamp": 1234, "born_host": "10.0.0.1:5", "store_host": "10.0.0.2:6",
              "reconsume_times": 2, "prepared_transaction_offset": 77}
    assert set(values) == {f.name for f in dataclasses.fields(Message)}  # a new field: add it
    base = Message(**values)
    parts = [(b"one", {"x": "1"}, 0), (b"two", {}, -5)]
    want = [dataclasses.replace(base, body=b, properties=p, flag=f) for b, p, f in parts]
    assert batch_messages(base, parts) == want
