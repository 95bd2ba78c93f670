"""The client transport against a silent peer, and the send path's DLQ rule."""
from __future__ import annotations

import socket
import time

import pytest

from rocketstore.client import Producer, PullConsumer
from rocketstore.client._sync import LoopThread
from rocketstore.client.transport import RemotingClient
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode

from .test_client_broker import raw, wait_max


def test_invoke_times_out_on_a_silent_peer_and_fails_pending_on_close():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        addr = "127.0.0.1:%d" % srv.getsockname()[1]

        async def go():
            c = RemotingClient(addr)
            await c.connect()
            t0 = time.monotonic()
            with pytest.raises(TimeoutError, match="no answer to request 30"):
                await c.invoke(RemotingCommand.request(30, {"topic": "T", "queueId": 0}), 0.3)
            took = time.monotonic() - t0
            c.close()
            with pytest.raises(ConnectionError):
                await c.invoke(RemotingCommand.request(30, {}), 1)
            return took
        took = LoopThread.shared().run(go())
    assert 0.25 <= took < 2


def test_send_to_retry_topic_at_max_reconsume_times_goes_to_dlq(server):
    raw(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%G9"})
    fields = {"producerGroup": "PG", "topic": "%RETRY%G9", "queueId": 0, "sysFlag": 0,
              "bornTimestamp": 1, "flag": 0, "properties": "", "reconsumeTimes": 3,
              "maxReconsumeTimes": 3}
    r = raw(server.broker, RequestCode.SEND_MESSAGE, fields, b"dead")
    assert r.code == ResponseCode.SUCCESS
    r2 = raw(server.broker, RequestCode.SEND_MESSAGE, {**fields, "reconsumeTimes": 2}, b"alive")
    assert r2.code == ResponseCode.SUCCESS
    c = PullConsumer("reader", server.namesrv)
    wait_max(c, "%DLQ%G9", 0, 1)
    wait_max(c, "%RETRY%G9", 0, 1)
    assert [m.body for m in c.pull("%DLQ%G9", 0, 0).messages] == [b"dead"]
    assert [m.body for m in c.pull("%RETRY%G9", 0, 0).messages] == [b"alive"]


def test_oversize_body_is_message_illegal_and_nothing_is_stored(server):
    raw(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicBig"})
    r = raw(server.broker, RequestCode.SEND_MESSAGE,
            {"producerGroup": "PG", "topic": "TopicBig", "queueId": 0, "properties": ""},
            b"x" * (4 * 1024 * 1024 + 1))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "max_message_size" in (r.remark or "")
    c = PullConsumer("reader", server.namesrv)
    assert c.max_offset("TopicBig", 0) == 0


def test_stale_route_is_used_while_no_name_server_answers(server):
    from rocketstore.client import ClientInstance

    with Producer("PG", server.namesrv) as p:  # a lookup alone creates no topic
        p.send("TopicStale", b"x")

    async def go():
        inst = ClientInstance(server.namesrv, route_ttl_s=0.0)
        first = await inst.route("TopicStale")
        inst.namesrv_addrs = ["127.0.0.1:1"]  # the name server is gone
        again = await inst.route("TopicStale")
        fresh = ClientInstance("127.0.0.1:1")
        try:
            await fresh.route("TopicStale")
        except ConnectionError as exc:
            err = str(exc)
        inst.close()
        fresh.close()
        return first, again, err
    first, again, err = LoopThread.shared().run(go())
    assert again is first and first.write_queues
    assert "no name server answered" in err
