"""QUERY_CONSUMER_OFFSET for a group that never committed (RocketMQ 4.9.7
``ConsumerManageProcessor.queryConsumerOffset``): offset 0 only when the queue still starts at
0 *and* its first message is still in memory (``checkInDiskByConsumeOffset``: within
``accessMessageInMemoryMaxRatio`` % of RAM from the CommitLog's end); otherwise QUERY_NOT_FOUND,
so a new group on a big queue starts from the end instead of replaying all history."""
from __future__ import annotations

from rocketstore.client import Producer

from . import admin_wire as w
from .conftest import start_server


def test_new_group_offset_follows_in_memory_rule(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    try:
        w.call(srv.broker, 17, {"topic": "BigQ", "readQueueNums": 1, "writeQueueNums": 1})
        with Producer("PG", srv.namesrv) as p:
            for i in range(3):
                p.send("BigQ", b"x" * 100, queue_id=0)
        w.wait_dispatched(srv.broker, "BigQ", {0: 3})  # the reput put them in the ConsumeQueue
        ask = {"consumerGroup": "NewG", "topic": "BigQ", "queueId": 0}
        r = w.call(srv.broker, 14, ask)
        assert (r.code, r.ext_fields.get("offset")) == (0, "0")  # 300 bytes behind: in memory
        # with no page-cache share at all, every message counts as "in disk"
        assert w.call(srv.broker, 25, {}, b"accessMessageInMemoryMaxRatio=0\n").code == 0
        r = w.call(srv.broker, 14, ask)
        assert r.code == 22, (r.code, r.ext_fields)
        assert r.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        # a committed offset always wins
        w.call(srv.broker, 15, {**ask, "commitOffset": 2})
        r = w.call(srv.broker, 14, ask)
        assert (r.code, r.ext_fields.get("offset")) == (0, "2")
        # an empty queue has no first message, so it is not "in disk": offset 0
        w.call(srv.broker, 17, {"topic": "EmptyQ", "readQueueNums": 1, "writeQueueNums": 1})
        r = w.call(srv.broker, 14, {"consumerGroup": "NewG", "topic": "EmptyQ", "queueId": 0})
        assert (r.code, r.ext_fields.get("offset")) == (0, "0")
    finally:
        assert srv.stop() == 0, srv.log()
