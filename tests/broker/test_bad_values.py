"""Values RocketMQ's Java code would never produce, sent raw over a real socket with our client:
an ``UPDATE_BROKER_CONFIG`` out of range, and group names outside RocketMQ's topic/group rule
(``../x``, a NUL, a newline, 300 characters) through every door that reaches a state file.
Each is refused with a message that says why, and nothing of it reaches the broker's files."""
from __future__ import annotations

import json
import os

import pytest

from rocketstore.client import AdminClient
from rocketstore.errors import BrokerError
from rocketstore.remoting.codes import RequestCode

from .conftest import start_server

BAD_GROUPS = ["../x", "a\x00b", "g\nINJECTED line", "g" * 300, "grp/../../etc"]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start_server(str(tmp_path_factory.mktemp("values") / "store"))
    yield s
    assert s.stop() == 0, s.log()


def _update_config(a: AdminClient, addr: str, text: str) -> None:
    a.call(addr, RequestCode.UPDATE_BROKER_CONFIG, {}, text.encode())


@pytest.mark.parametrize("key,value,want", [
    ("maxMessageSize", "1099511627776", "maxMessageSize=1099511627776 is out of range"),
    ("maxMessageSize", "0", "out of range"),
    ("flushConsumerOffsetInterval", "0", "out of range: want 100..3600000"),
    ("diskMaxUsedSpaceRatio", "250", "out of range: want 10..95"),
    ("defaultTopicQueueNums", "100000", "out of range: want 1..1024"),
])
def test_update_broker_config_out_of_range_is_refused(srv, key, value, want):
    with AdminClient(broker=srv.broker) as a:
        before = a.broker_config(srv.broker)
        with pytest.raises(BrokerError) as e:  # fileReservedTime is fine, the other is not:
            _update_config(a, srv.broker, f"fileReservedTime=49\n{key}={value}\n")  # neither
        assert e.value.code == 1 and want in e.value.remark, e.value.remark
        after = a.broker_config(srv.broker)
    assert after[key] == before[key] and after["fileReservedTime"] == before["fileReservedTime"]


def test_update_broker_config_in_range_applies(srv):
    with AdminClient(broker=srv.broker) as a:
        _update_config(a, srv.broker, "maxMessageSize=1048576\n")  # the test store's file size
        assert a.broker_config(srv.broker)["maxMessageSize"] == "1048576"
        with pytest.raises(BrokerError) as e:  # over one CommitLog file (1 MiB here)
            _update_config(a, srv.broker, "maxMessageSize=1048577\n")
        assert "want 1..1048576" in e.value.remark


def _heartbeat(consumer_group: str | None = None, producer_group: str | None = None) -> bytes:
    return json.dumps({
        "clientID": "127.0.0.1@attacker",
        "producerDataSet": [{"groupName": producer_group}] if producer_group else [],
        "consumerDataSet": [{
            "groupName": consumer_group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False, "subscriptionDataSet": [
                {"topic": "ValuesTopic", "subString": "*", "tagsSet": [], "codeSet": [],
                 "subVersion": 1, "expressionType": "TAG"}]}] if consumer_group else []}
    ).encode()


@pytest.mark.parametrize("group", BAD_GROUPS)
def test_bad_group_names_are_refused_everywhere(srv, group):
    with AdminClient(broker=srv.broker) as a:
        a.create_topic("ValuesTopic", 1, 1)
        attempts = [
            lambda: a.call(srv.broker, RequestCode.HEART_BEAT, {}, _heartbeat(group)),
            lambda: a.call(srv.broker, RequestCode.HEART_BEAT, {}, _heartbeat(None, group)),
            lambda: a.call(srv.broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                           json.dumps({"groupName": group, "consumeEnable": True}).encode()),
            lambda: a.call(srv.broker, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": "ValuesTopic", "queueId": "0",
                "commitOffset": "0"}),
        ]
        for attempt in attempts:
            with pytest.raises(BrokerError) as e:
                attempt()
            assert "illegal group name" in e.value.remark or "blank" in e.value.remark, \
                e.value.remark
        assert group not in a.group_names(srv.broker)
        # a legal name through the same doors still works
        a.call(srv.broker, RequestCode.HEART_BEAT, {}, _heartbeat("Legal_group-1", "PG-legal"))
        a.call(srv.broker, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "Legal_group-1", "topic": "ValuesTopic", "queueId": "0",
            "commitOffset": "0"})


def test_state_files_hold_no_bad_name(tmp_path):
    """After the attacks and a clean stop (every state file written), no bad name is on disk."""
    s = start_server(str(tmp_path / "store"))
    try:
        with AdminClient(broker=s.broker) as a:
            a.create_topic("ValuesTopic", 1, 1)
            for group in BAD_GROUPS:
                for code, fields, body in (
                        (RequestCode.HEART_BEAT, {}, _heartbeat(group, group)),
                        (RequestCode.UPDATE_CONSUMER_OFFSET, {
                            "consumerGroup": group, "topic": "ValuesTopic", "queueId": "0",
                            "commitOffset": "7"}, b"")):
                    with pytest.raises(BrokerError):
                        a.call(s.broker, code, fields, body)
            a.call(s.broker, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": "GoodGroup", "topic": "ValuesTopic", "queueId": "0",
                "commitOffset": "7"})
    finally:
        assert s.stop() == 0, s.log()
    config = os.path.join(s.store, "config")
    text = "".join(open(os.path.join(config, n), encoding="utf-8", errors="replace").read()
                   for n in sorted(os.listdir(config)) if n.endswith(".json"))
    assert "GoodGroup" in text
    for bad in ("../x", "INJECTED", "g" * 300, "etc", "\\u0000"):
        assert bad not in text
