"""POP over remoting, request by request, against ``rocketstore serve``: the header layout a
RocketMQ 5 client decodes, POLLING_INFO counting a held pop, and bad input (RocketMQ's codes,
nothing acked, the broker stays up)."""
from __future__ import annotations

import base64
import json
import threading
import time

import pytest

from rocketstore.format.message import decode_message
from rocketstore.remoting.codes import RequestCode, ResponseCode

from .admin_wire import call, wait_dispatched
from .conftest import start_server


@pytest.fixture
def srv(tmp_path):
    s = start_server(str(tmp_path / "store"))
    r = call(s.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
             {"topic": "PopR", "defaultTopic": "TBW102", "readQueueNums": 2, "writeQueueNums": 2,
              "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == 0, r.remark
    yield s
    assert s.stop() == 0, s.log()


def _send(addr: str, body: bytes, queue_id: int) -> None:
    r = call(addr, RequestCode.SEND_MESSAGE,
             {"producerGroup": "PG", "topic": "PopR", "defaultTopic": "TBW102",
              "defaultTopicQueueNums": 2, "queueId": queue_id, "sysFlag": 0,
              "bornTimestamp": int(time.time() * 1000), "flag": 0,
              "properties": "TAGS\x01X\x02", "reconsumeTimes": 0}, body)
    assert r.code == 0, r.remark


def _pop(addr: str, group: str = "G_r", max_nums: int = 32, poll_ms: int = 2000, **kw):
    fields = {"consumerGroup": group, "topic": "PopR", "queueId": -1, "maxMsgNums": max_nums,
              "invisibleTime": 20_000, "pollTime": poll_ms, "bornTime": int(time.time() * 1000),
              "initMode": 1, "expType": "TAG", "exp": "*", "order": "false"}
    fields.update(kw)
    return call(addr, RequestCode.POP_MESSAGE, fields)


def _records(body: bytes) -> list:
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        out.append(m)
        pos += m.store_size
    return out


def test_pop_answer_headers_and_batch_ack(srv):
    for i in range(3):
        _send(srv.broker, b"q0-%d" % i, 0)
    _send(srv.broker, b"q1-0", 1)
    wait_dispatched(srv.broker, "PopR", {0: 3, 1: 1})
    r = _pop(srv.broker)
    assert r.code == ResponseCode.SUCCESS and r.remark == "FOUND"
    f = r.ext_fields
    msgs = _records(r.body)
    assert sorted(m.body for m in msgs) == [b"q0-0", b"q0-1", b"q0-2", b"q1-0"]
    assert f["reviveQid"] == "0" and f["invisibleTime"] == "20000" and f["restNum"] == "0"
    assert "orderCountInfo" not in f
    starts = dict((tuple(e.split(" ")[:2]), int(e.split(" ")[2]))
                  for e in f["startOffsetInfo"].split(";"))
    assert starts == {("0", "0"): 0, ("0", "1"): 0}
    offs = {tuple(e.split(" ")[:2]): e.split(" ")[2] for e in f["msgOffsetInfo"].split(";")}
    assert offs == {("0", "0"): "0,1,2", ("0", "1"): "0"}
    # RocketMQ 5's client: BatchAck per (retry, queue, start offset, pop time), a BitSet of
    # offset - start offset, fastjson's base64 for the byte[]
    acks = [{"c": "G_r", "t": "PopR", "r": "0", "so": 0, "q": 0, "rq": 0, "pt": int(f["popTime"]),
             "it": 20000, "b": base64.b64encode(bytes([0b101])).decode()},   # offsets 0 and 2
            {"c": "G_r", "t": "PopR", "r": "0", "so": 0, "q": 1, "rq": 0, "pt": int(f["popTime"]),
             "it": 20000, "b": base64.b64encode(bytes([0b1])).decode()}]
    body = json.dumps({"brokerName": "broker-a", "acks": acks}).encode()
    assert call(srv.broker, RequestCode.BATCH_ACK_MESSAGE, {}, body).code == ResponseCode.SUCCESS
    # q0-1 is still in flight: its ack goes through once, a second one changes nothing
    handle = " ".join(map(str, (0, f["popTime"], 20000, 0, 0, "broker-a", 0, 1)))
    ack = {"consumerGroup": "G_r", "topic": "PopR", "queueId": 0, "extraInfo": handle,
           "offset": 1}
    assert call(srv.broker, RequestCode.ACK_MESSAGE, ack).code == ResponseCode.SUCCESS
    assert call(srv.broker, RequestCode.ACK_MESSAGE, ack).code == ResponseCode.SUCCESS
    again = _pop(srv.broker, poll_ms=500)
    assert again.code == ResponseCode.POLLING_TIMEOUT and again.remark == "NO_MESSAGE_IN_QUEUE"


def test_polling_info_counts_a_held_pop_and_notification_wakes(srv):
    info = {"consumerGroup": "G_poll", "topic": "PopR", "queueId": -1}
    got = {}

    def held():
        got["pop"] = _pop(srv.broker, group="G_poll", poll_ms=8000)
    assert call(srv.broker, RequestCode.POLLING_INFO, info).ext_fields["pollingNum"] == "0"
    t = threading.Thread(target=held)
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        n = call(srv.broker, RequestCode.POLLING_INFO, info).ext_fields["pollingNum"]
        if n == "1":
            break
        time.sleep(0.1)
    assert n == "1"
    _send(srv.broker, b"wake", 1)  # the held pop answers with it
    t.join(10)
    assert got["pop"].code == ResponseCode.SUCCESS
    assert [m.body for m in _records(got["pop"].body)] == [b"wake"]
    assert call(srv.broker, RequestCode.POLLING_INFO, info).ext_fields["pollingNum"] == "0"
    note = call(srv.broker, RequestCode.NOTIFICATION,
                {"consumerGroup": "G_other", "topic": "PopR", "queueId": -1, "pollTime": 500,
                 "bornTime": int(time.time() * 1000)})
    assert note.code == 0 and note.ext_fields["hasMsg"] == "true"  # another group: unread
    # G_poll read everything: its NOTIFICATION is held until a message arrives, then answers
    got.clear()

    def noted():
        got["note"] = call(srv.broker, RequestCode.NOTIFICATION,
                           {"consumerGroup": "G_poll", "topic": "PopR", "queueId": -1,
                            "pollTime": 20_000, "bornTime": int(time.time() * 1000)})
    t = threading.Thread(target=noted)
    t0 = time.monotonic()
    t.start()
    while call(srv.broker, RequestCode.POLLING_INFO, info).ext_fields["pollingNum"] != "1":
        assert time.monotonic() - t0 < 5 and t.is_alive(), got
        time.sleep(0.1)
    _send(srv.broker, b"wake-note", 0)
    t.join(15)
    assert got["note"].code == 0 and got["note"].ext_fields["hasMsg"] == "true"
    assert time.monotonic() - t0 < 15  # woken by the arrival, not by the 20 s poll time


def test_bad_pop_input_gets_rocketmqs_codes_and_acks_nothing(srv):
    _send(srv.broker, b"keep", 0)
    wait_dispatched(srv.broker, "PopR", {0: 1})
    assert _pop(srv.broker, max_nums=33).code == ResponseCode.INVALID_PARAMETER
    assert _pop(srv.broker, topic="NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST
    assert _pop(srv.broker, queueId=9).code == ResponseCode.INVALID_PARAMETER
    assert _pop(srv.broker, bornTime=int(time.time() * 1000) - 60_000).code == \
        ResponseCode.POLLING_TIMEOUT  # "timeout too much"
    r = _pop(srv.broker)
    assert r.code == ResponseCode.SUCCESS
    f = r.ext_fields
    good = " ".join(map(str, (0, f["popTime"], 20000, 0, 0, "broker-a", 0, 0)))
    base = {"consumerGroup": "G_r", "topic": "PopR", "queueId": 0, "offset": 0}
    for extra in ("garbage", "1 2 3", "x y z w v u t s"):
        assert call(srv.broker, RequestCode.ACK_MESSAGE, {**base, "extraInfo": extra}).code == \
            ResponseCode.SYSTEM_ERROR
    assert call(srv.broker, RequestCode.ACK_MESSAGE,
                {**base, "extraInfo": good, "queueId": 5}).code == ResponseCode.MESSAGE_ILLEGAL
    assert call(srv.broker, RequestCode.ACK_MESSAGE,
                {**base, "extraInfo": good, "offset": 99}).code == ResponseCode.NO_MESSAGE
    assert call(srv.broker, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
                {**base, "extraInfo": good, "offset": 1, "invisibleTime": 5000}).code == \
        ResponseCode.NO_MESSAGE
    for body in (b"", b"{not json", json.dumps({"acks": []}).encode()):
        code = call(srv.broker, RequestCode.BATCH_ACK_MESSAGE, {}, body).code
        assert code in (ResponseCode.NO_MESSAGE, ResponseCode.SYSTEM_ERROR), code
    # another group's ack with the real handle acks nothing: the message is still in flight
    assert call(srv.broker, RequestCode.ACK_MESSAGE,
                {**base, "consumerGroup": "G_thief", "extraInfo": good}).code == 0
    chg = call(srv.broker, RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
               {**base, "extraInfo": good, "invisibleTime": 1000})
    assert chg.code == 0 and chg.ext_fields["invisibleTime"] == "1000"
    back = _pop(srv.broker, poll_ms=8000)  # revived after the new, shorter invisible time
    assert back.code == ResponseCode.SUCCESS, back.remark
    msgs = _records(back.body)
    assert [m.body for m in msgs] == [b"keep"] and msgs[0].reconsume_times == 1
    assert msgs[0].properties["POP_CK"].split(" ")[4] == "1"  # from the retry queue
    assert msgs[0].topic == "PopR"  # re-encoded with the topic asked for


def _pipelined(addr: str, reqs: list[tuple[int, dict]]) -> list:
    """Send every request on one connection before reading any answer (as RocketMQ's proxy
    sends a received batch's acks); the answers in request order."""
    import socket

    from rocketstore.remoting.command import RemotingCommand
    from rocketstore.remoting.connection import NEED_DATA, RemotingConnection

    host, port = addr.rsplit(":", 1)
    codec, cmds = RemotingConnection(), [RemotingCommand.request(c, f, b"", language="JAVA")
                                         for c, f in reqs]
    by_opaque = {}
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(b"".join(codec.send(c) for c in cmds))
        while len(by_opaque) < len(cmds):
            r = codec.next_command()
            if r is NEED_DATA:
                data = s.recv(1 << 20)
                assert data, "the broker closed the connection"
                codec.receive_data(data)
            else:
                by_opaque[r.opaque] = r
    return [by_opaque[c.opaque] for c in cmds]


def test_acks_arriving_together_share_ack_records_and_survive_a_restart(tmp_path):
    """32 ACK_MESSAGEs sent at once (one of them out of range) are settled together: each gets
    its own answer, the revive log gets a few ack records rather than one per message, and a
    restart replays them all (nothing comes back once the invisible time is over)."""
    store = str(tmp_path / "store")
    s = start_server(store)
    try:
        r = call(s.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                 {"topic": "PopR", "defaultTopic": "TBW102", "readQueueNums": 2,
                  "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": 0, "order": "false"})
        assert r.code == 0, r.remark
        for i in range(31):
            _send(s.broker, b"m-%d" % i, 0)
        wait_dispatched(s.broker, "PopR", {0: 31})
        r = _pop(s.broker, group="G_many", invisibleTime=3000)
        assert r.code == ResponseCode.SUCCESS and len(_records(r.body)) == 31
        f = r.ext_fields
        handle = f"0 {f['popTime']} 3000 0 0 broker-a 0"
        acks = [(RequestCode.ACK_MESSAGE, {"consumerGroup": "G_many", "topic": "PopR",
                                           "queueId": 0, "offset": o,
                                           "extraInfo": f"{handle} {o}"}) for o in range(31)]
        acks.insert(7, (RequestCode.ACK_MESSAGE, {"consumerGroup": "G_many", "topic": "PopR",
                                                  "queueId": 0, "offset": 99,
                                                  "extraInfo": f"{handle} 99"}))
        answers = _pipelined(s.broker, acks)
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 7 + [
            ResponseCode.NO_MESSAGE] + [ResponseCode.SUCCESS] * 24
    finally:
        assert s.stop() == 0, s.log()
    s = start_server(store)  # replays the revive log before it answers
    try:
        revive = call(s.broker, 30, {"topic": "rmq_sys_REVIVE_LOG_DefaultCluster", "queueId": 0})
        records = int(revive.ext_fields["offset"])  # one ck record, then the ack records
        assert 2 <= records <= 9, records  # one per ACK_MESSAGE would be 32
        time.sleep(max(int(f["popTime"]) + 3000 - time.time() * 1000, 0) / 1000 + 0.5)
        again = _pop(s.broker, group="G_many", poll_ms=1500)
        assert again.code == ResponseCode.POLLING_TIMEOUT, _records(again.body)
    finally:
        assert s.stop() == 0, s.log()
