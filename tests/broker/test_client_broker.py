"""Our client against our broker (a real ``rocketstore serve`` process)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from rocketstore.broker.state.files import load_json_lenient
from rocketstore.client import Producer, PullConsumer, PushConsumer
from rocketstore.client._sync import LoopThread
from rocketstore.client.transport import RemotingClient
from rocketstore.format.message import decode_message
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode

from .conftest import start_server


def raw(addr: str, code: int, fields: dict | None = None, body: bytes = b"",
        oneway: bool = False, timeout: float = 5.0) -> RemotingCommand | None:
    async def go():
        c = RemotingClient(addr)
        await c.connect()
        try:
            cmd = RemotingCommand.request(code, fields, body, oneway=oneway)
            if oneway:
                c.invoke_oneway(cmd)
                return None
            return await c.invoke(cmd, timeout)
        finally:
            c.close()
    return LoopThread.shared().run(go())


def wait_max(c: PullConsumer, topic: str, queue_id: int, n: int, timeout: float = 10) -> None:
    """Wait until the broker's reput has dispatched ``n`` messages to the queue."""
    deadline = time.monotonic() + timeout
    while c.max_offset(topic, queue_id) < n:
        assert time.monotonic() < deadline, f"{topic}/{queue_id} never reached {n}"
        time.sleep(0.02)


def drain(c: PullConsumer, topic: str, queues=range(4), sub: str = "*") -> dict[int, list]:
    out = {}
    for q in queues:
        msgs, off = [], 0
        while True:
            r = c.pull(topic, q, off, 32, subscription=sub)
            msgs += r.messages
            if r.status == "NO_NEW_MSG" or r.next_begin_offset == off:
                break
            off = r.next_begin_offset
        out[q] = msgs
    return out


def test_send_pull_batch_offsets_and_tags(server):
    with Producer("PG", server.namesrv) as p:
        sent = [p.send("TopicA", f"m{i}".encode(), tags="TagA" if i % 2 else "TagB",
                       keys=[f"k{i}", "common"]) for i in range(20)]
        batch = p.send_batch("TopicA", [b"b0", b"b1", b"b2"], queue_id=2)
    assert all(s.status == "SEND_OK" for s in sent)
    assert len(batch.msg_ids) == 3 and len(batch.offset_msg_id.split(",")) == 3
    c = PullConsumer("CG", server.namesrv)
    for q in range(4):
        wait_max(c, "TopicA", q, sum(1 for s in sent if s.message_queue.queue_id == q)
                 + (3 if q == 2 else 0))
    got = drain(c, "TopicA")
    flat = [m for q in got.values() for m in q]
    assert len(flat) == 23
    by_body = {m.body: m for m in flat}
    for i, s in enumerate(sent):
        m = by_body[f"m{i}".encode()]
        assert m.uniq_key == s.msg_id and m.msg_id == s.offset_msg_id
        assert m.queue_id == s.message_queue.queue_id and m.queue_offset == s.queue_offset
        assert m.keys == [f"k{i}", "common"] and m.tags == ("TagA" if i % 2 else "TagB")
    assert [m.body for m in got[2][-3:]] == [b"b0", b"b1", b"b2"]
    assert [m.uniq_key for m in got[2][-3:]] == batch.msg_ids
    for q, msgs in got.items():  # queue offsets are dense from 0
        assert [m.queue_offset for m in msgs] == list(range(len(msgs)))
        assert c.max_offset("TopicA", q) == len(msgs) and c.min_offset("TopicA", q) == 0
    only_a = drain(c, "TopicA", sub="TagA")
    assert sorted(m.body for q in only_a.values() for m in q) == \
        sorted(f"m{i}".encode() for i in range(20) if i % 2)
    # committed offsets: a fresh group on a queue starting at 0 gets 0 (Java's rule)
    assert c.committed_offset("TopicA", 1) == 0
    c.commit_offset("TopicA", 1, 3)
    assert c.committed_offset("TopicA", 1) == 3
    r = c.pull("TopicA", 0, 0, 1, commit_offset=1)
    assert c.committed_offset("TopicA", 0) == 1 and len(r.messages) == 1
    t_mid = got[0][-1].store_timestamp
    assert c.search_offset("TopicA", 0, t_mid) <= len(got[0]) - 1
    assert c.search_offset("TopicA", 0, t_mid + 10_000) == len(got[0])
    resp = raw(server.broker, RequestCode.GET_EARLIEST_MSG_STORETIME,
               {"topic": "TopicA", "queueId": 0})
    assert resp.code == 0 and int(resp.ext_fields["timestamp"]) == got[0][0].store_timestamp
    c.shutdown()


def test_query_message_and_view_by_id_return_stored_bytes(server):
    with Producer("PG", server.namesrv) as p:
        s = p.send("TopicQ", b"findme", keys=["order-42"], queue_id=1)
        p.send("TopicQ", b"other", keys=["order-43"], queue_id=1)
    c = PullConsumer("CG", server.namesrv)
    wait_max(c, "TopicQ", 1, 2)
    r = c.pull("TopicQ", 1, 0)
    stored = r.messages[0]
    time.sleep(0.3)  # the index is built by the reput thread
    q = raw(server.broker, RequestCode.QUERY_MESSAGE, {"topic": "TopicQ", "key": "order-42",
                                                      "maxNum": 32, "beginTimestamp": 0,
                                                      "endTimestamp": 2**62})
    assert q.code == ResponseCode.SUCCESS
    m = decode_message(q.body, 0)
    assert m.body == b"findme" and m.store_size == len(q.body)
    assert int(q.ext_fields["indexLastUpdatePhyoffset"]) >= 0
    v = raw(server.broker, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": stored.commitlog_offset})
    assert v.code == ResponseCode.SUCCESS and v.body == q.body
    m2 = decode_message(v.body, 0)
    assert m2.msg_id == s.offset_msg_id and m2.uniq_key == s.msg_id
    none = raw(server.broker, RequestCode.QUERY_MESSAGE, {"topic": "TopicQ", "key": "nope",
                                                         "maxNum": 32, "beginTimestamp": 0,
                                                         "endTimestamp": 2**62})
    assert none.code == ResponseCode.QUERY_NOT_FOUND


def test_ordered_messages_by_key_stay_in_order(server):
    keys = ["order-a", "order-b", "order-c", "order-d", "order-e"]
    with Producer("PG", server.namesrv) as p:
        placed = {}
        for seq in range(30):
            for k in keys:
                r = p.send("TopicOrder", f"{k}:{seq}".encode(), sharding_key=k, keys=[k])
                placed.setdefault(k, set()).add(r.message_queue.queue_id)
    assert all(len(qs) == 1 for qs in placed.values())  # one key, one queue
    seen: dict[str, list[int]] = {}
    lock, done = threading.Lock(), threading.Event()

    def listener(m):
        k, seq = m.body.decode().split(":")
        with lock:
            seen.setdefault(k, []).append(int(seq))
            if sum(map(len, seen.values())) == 150:
                done.set()
        return True

    pc = PushConsumer("CG_order", server.namesrv, {"TopicOrder": "*"}, listener,
                      consume_from="first")
    pc.start()
    try:
        assert done.wait(30), seen
    finally:
        pc.shutdown()
    assert {k: v for k, v in seen.items()} == {k: list(range(30)) for k in keys}


def test_retry_topic_then_dead_letter_queue(server):
    with Producer("PG", server.namesrv) as p:
        sent = p.send("TopicRetry", b"poison", tags="T", keys=["pk"])
    deliveries, lock = [], threading.Lock()

    def listener(m):
        with lock:
            deliveries.append((time.monotonic(), m.topic, m.reconsume_times,
                               m.properties.get("RECONSUME_TIME"), m.uniq_key))
        return False  # always fail

    pc = PushConsumer("CG_retry", server.namesrv, {"TopicRetry": "*"}, listener,
                      consume_from="first", max_reconsume_times=2, retry_delay_level=1,
                      long_poll_ms=2000, rebalance_interval_s=1.0)
    pc.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(deliveries) < 3:
            time.sleep(0.2)
        time.sleep(1.5)
    finally:
        pc.shutdown()
    assert len(deliveries) == 3, deliveries
    assert [d[2] for d in deliveries] == [0, 1, 2]
    assert deliveries[1][3] == "1" and deliveries[2][3] == "2"
    assert all(d[1] == "TopicRetry" and d[4] == sent.msg_id for d in deliveries)
    assert deliveries[1][0] - deliveries[0][0] >= 0.9  # delay level 1 = 1 s
    c = PullConsumer("CG_dlq_reader", server.namesrv)
    wait_max(c, "%DLQ%CG_retry", 0, 1)
    dlq = c.pull("%DLQ%CG_retry", 0, 0)
    assert dlq.status == "FOUND" and len(dlq.messages) == 1
    d = dlq.messages[0]
    assert d.body == b"poison" and d.reconsume_times == 3 and d.uniq_key == sent.msg_id
    assert d.properties["RETRY_TOPIC"] == "TopicRetry" and d.properties["ORIGIN_MESSAGE_ID"]


def test_delay_level_arrives_no_earlier_than_its_delay(server):
    c = PullConsumer("CG_delay", server.namesrv)
    with Producer("PG", server.namesrv) as p:
        p.send("TopicDelay", b"warmup", queue_id=0)
        t0 = time.time()
        s = p.send("TopicDelay", b"later", queue_id=0, delay_level=2)  # 2 s
    wait_max(c, "TopicDelay", 0, 1)
    first = c.pull("TopicDelay", 0, 0)
    assert [m.body for m in first.messages] == [b"warmup"]
    r = c.pull("TopicDelay", 0, first.next_begin_offset, suspend_ms=10_000)
    arrived = time.time()
    assert r.status == "FOUND" and [m.body for m in r.messages] == [b"later"]
    m = r.messages[0]
    assert arrived - t0 >= 2.0 - 0.05
    assert m.store_timestamp - m.born_timestamp >= 2000
    assert arrived - t0 < 6.0  # long polling woke us soon after delivery
    assert "DELAY" not in m.properties and m.uniq_key == s.msg_id


def test_long_poll_is_woken_by_arrival(server):
    c = PullConsumer("CG_lp", server.namesrv)
    with Producer("PG", server.namesrv) as p:
        p.send("TopicLP", b"first", queue_id=3)
        wait_max(c, "TopicLP", 3, 1)
        threading.Timer(0.7, lambda: p.send("TopicLP", b"second", queue_id=3)).start()
        t0 = time.monotonic()
        r = c.pull("TopicLP", 3, 1, suspend_ms=15_000)
        waited = time.monotonic() - t0
    assert r.status == "FOUND" and r.messages[0].body == b"second"
    assert 0.5 <= waited < 3.0
    t0 = time.monotonic()
    r = c.pull("TopicLP", 3, 2, suspend_ms=1500)
    assert r.status == "NO_NEW_MSG" and 1.4 <= time.monotonic() - t0 < 4


def test_unsupported_codes_heartbeat_consumer_list_and_unregister(server):
    r = raw(server.broker, 9999, {"x": 1})
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and r.is_response
    assert "9999" in r.remark
    assert raw(server.broker, 9999, oneway=True) is None
    body = json.dumps({"clientID": "10.0.0.1@123", "producerDataSet": [{"groupName": "PG"}],
                       "consumerDataSet": [{"groupName": "CG_hb", "consumeType": 1,
                                            "messageModel": 1, "consumeFromWhere": 0,
                                            "subscriptionDataSet": [{"topic": "TopicHB",
                                                                     "subString": "*"}],
                                            "unitMode": False}]}).encode()

    async def scenario():
        from rocketstore.client.transport import RemotingClient
        c = RemotingClient(server.broker)
        await c.connect()
        hb = await c.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, None, body))
        lst = await c.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                     {"consumerGroup": "CG_hb"}))
        un = await c.invoke(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT,
                                                    {"clientID": "10.0.0.1@123",
                                                     "consumerGroup": "CG_hb"}))
        lst2 = await c.invoke(RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                      {"consumerGroup": "CG_hb"}))
        c.close()
        return hb, lst, un, lst2
    hb, lst, un, lst2 = LoopThread.shared().run(scenario())
    assert hb.code == 0 and un.code == 0
    assert json.loads(lst.body) == {"consumerIdList": ["10.0.0.1@123"]}
    assert lst2.code == ResponseCode.SYSTEM_ERROR and "no consumer" in lst2.remark
    route = raw(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%CG_hb"})
    assert route.code == 0  # the heartbeat created the group's retry topic
    assert json.loads(route.body)["queueDatas"][0]["readQueueNums"] == 1


def test_create_topic_state_files_and_restart(tmp_path):
    store = str(tmp_path / "store")
    srv = start_server(store, "--no-auto-create-topic")
    try:
        nope = raw(srv.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Missing"})
        assert nope.code == ResponseCode.TOPIC_NOT_EXIST
        r = raw(srv.broker, RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": "Made", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6})
        assert r.code == 0
        route = json.loads(raw(srv.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               {"topic": "Made"}).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 2
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": srv.broker}
        with Producer("PG", srv.namesrv) as p:
            for i in range(5):
                p.send("Made", b"x%d" % i, queue_id=i % 2)
        c = PullConsumer("CG_state", srv.namesrv)
        wait_max(c, "Made", 0, 3)
        c.commit_offset("Made", 0, 2)
        c.commit_offset("Made", 1, 1)
    finally:
        assert srv.stop() == 0, srv.log()
    topics = load_json_lenient(f"{store}/config/topics.json")
    made = topics["topicConfigTable"]["Made"]
    assert made["readQueueNums"] == 2 and made["perm"] == 6 and made["topicName"] == "Made"
    offsets = load_json_lenient(f"{store}/config/consumerOffset.json")
    assert offsets["offsetTable"]["Made@CG_state"] == {"0": 2, "1": 1}
    srv = start_server(store, "--no-auto-create-topic")
    try:
        c = PullConsumer("CG_state", srv.namesrv)
        assert c.committed_offset("Made", 0) == 2
        assert [m.body for m in drain(c, "Made", range(2))[0]] == [b"x0", b"x2", b"x4"]
    finally:
        assert srv.stop() == 0, srv.log()


def test_requests_on_one_connection_run_concurrently_and_answer_by_opaque(server):
    with Producer("PG", server.namesrv) as p:
        p.send("TopicConc", b"x", queue_id=0)
    wait_max(PullConsumer("CG_conc", server.namesrv), "TopicConc", 0, 1)

    async def scenario():
        import asyncio
        c = RemotingClient(server.broker)
        await c.connect()
        hold = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "G", "topic": "TopicConc", "queueId": 0, "queueOffset": 1,
            "maxMsgNums": 32, "sysFlag": 2 | 4, "commitOffset": 0,
            "suspendTimeoutMillis": 3000, "subscription": "*", "subVersion": 0})
        quick = RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                        {"topic": "TopicConc", "queueId": 0})
        order = []

        async def run(cmd, name):
            r = await c.invoke(cmd, 10)
            order.append(name)
            return r
        held, fast = await asyncio.gather(run(hold, "held"), run(quick, "quick"))
        c.close()
        return order, held, fast
    order, held, fast = LoopThread.shared().run(scenario())
    assert order == ["quick", "held"]  # the answer to the later request overtook the held one
    assert fast.ext_fields["offset"] == "1" and held.code == ResponseCode.PULL_NOT_FOUND
    assert held.ext_fields["nextBeginOffset"] == "1" and held.ext_fields["maxOffset"] == "1"


def test_v1_send_without_uniq_key_gets_the_brokers_and_oneway_offset_update(server):
    raw(server.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicV1"})  # create
    r = raw(server.broker, RequestCode.SEND_MESSAGE,
            {"producerGroup": "PG", "topic": "TopicV1", "defaultTopic": "TBW102",
             "defaultTopicQueueNums": 4, "queueId": 2, "sysFlag": 0, "bornTimestamp": 1,
             "flag": 0, "properties": "TAGS\x01X\x02", "reconsumeTimes": 0,
             "unitMode": "false"}, b"v1 body")
    assert r.code == 0 and set(r.ext_fields) >= {"msgId", "queueId", "queueOffset"}
    assert all(isinstance(v, str) for v in r.ext_fields.values())
    assert r.ext_fields["queueId"] == "2" and r.ext_fields["queueOffset"] == "0"
    c = PullConsumer("CG_v1", server.namesrv)
    wait_max(c, "TopicV1", 2, 1)
    m = c.pull("TopicV1", 2, 0).messages[0]
    assert m.body == b"v1 body" and m.tags == "X" and m.msg_id == r.ext_fields["msgId"]
    assert m.uniq_key and len(m.uniq_key) == 32  # the broker made one
    assert raw(server.broker, RequestCode.UPDATE_CONSUMER_OFFSET,
               {"consumerGroup": "CG_v1", "topic": "TopicV1", "queueId": 2, "commitOffset": 1},
               oneway=True) is None
    deadline = time.monotonic() + 5
    while c.committed_offset("TopicV1", 2) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.committed_offset("TopicV1", 2) == 1
    bad = raw(server.broker, RequestCode.SEND_MESSAGE, {"topic": "TopicV1", "queueId": 9},
              b"x")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "queueId" in bad.remark


def test_two_push_consumers_of_a_group_split_the_queues(server):
    with Producer("PG", server.namesrv) as p:
        for i in range(40):
            p.send("TopicSplit", b"%d" % i, queue_id=i % 4)
    seen: dict[str, list] = {"a": [], "b": []}
    lock = threading.Lock()

    def listener(name):
        def fn(m):
            with lock:
                seen[name].append((m.queue_id, int(m.body)))
            return True
        return fn
    a = PushConsumer("CG_split", server.namesrv, {"TopicSplit": "*"}, listener("a"),
                     consume_from="first", rebalance_interval_s=1.0)
    b = PushConsumer("CG_split", server.namesrv, {"TopicSplit": "*"}, listener("b"),
                     consume_from="first", rebalance_interval_s=1.0)
    a.start()
    b.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if len(set(seen["a"]) | set(seen["b"])) == 40:
                    break
            time.sleep(0.1)
        time.sleep(1.0)
        qa = {q.queue_id for q in a.offsets if q.topic == "TopicSplit"}
        qb = {q.queue_id for q in b.offsets if q.topic == "TopicSplit"}
    finally:
        a.shutdown()
        b.shutdown()
    assert {x[1] for x in seen["a"] + seen["b"]} == set(range(40))
    assert qa and qb and not (qa & qb) and qa | qb == {0, 1, 2, 3}  # disjoint halves


def test_orderly_push_consumer_retries_in_place_and_locks_its_queues(server):
    keys = ["ka", "kb"]
    with Producer("PG", server.namesrv) as p:
        for seq in range(20):
            for k in keys:
                p.send("TopicOrderly", f"{k}:{seq}".encode(), sharding_key=k)
    attempts: dict[str, list[tuple[int, bool]]] = {}
    failed_once: set[str] = set()
    lock = threading.Lock()

    def listener(m):
        k, seq = m.body.decode().split(":")
        ok = True
        with lock:
            if (k, seq) in (("ka", "5"), ("kb", "12")) and k not in failed_once:
                failed_once.add(k)
                ok = False
            attempts.setdefault(k, []).append((int(seq), ok))
        return ok

    pc = PushConsumer("CG_orderly", server.namesrv, {"TopicOrderly": "*"}, listener,
                      consume_from="first", orderly=True, orderly_retry_s=0.2)
    pc.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if all(sum(ok for _, ok in attempts.get(k, [])) == 20 for k in keys):
                    break
            time.sleep(0.1)
        # a second orderly client takes over only queues the first released (committed first)
        other = []
        pc2 = PushConsumer("CG_orderly", server.namesrv, {"TopicOrderly": "*"},
                           lambda m: other.append(m) or True, consume_from="first",
                           orderly=True)
        pc2.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            held1 = {q.queue_id for q in pc.offsets if q.topic == "TopicOrderly"}
            held2 = {q.queue_id for q in pc2.offsets if q.topic == "TopicOrderly"}
            if held2 and len(held1) == 2:
                break
            time.sleep(0.1)
        pc2.shutdown()
    finally:
        pc.shutdown()
    assert [s for s, ok in attempts["ka"]] == list(range(6)) + list(range(5, 20))
    assert [s for s, ok in attempts["kb"]] == list(range(13)) + list(range(12, 20))
    assert [ok for s, ok in attempts["ka"]].count(False) == 1
    assert held1 and held2 and not (held1 & held2)  # never one queue in two clients
    assert other == []  # the hand-over re-delivered nothing
    c = PullConsumer("reader", server.namesrv)
    assert c.max_offset("%RETRY%CG_orderly", 0) == 0  # nothing went through the retry topic
