"""``rocketstore serve`` with RocketMQ 5's tier keys in broker.conf: the tier is fed while the
broker takes sends, and after the old local CommitLog segments are removed a consumer pulling
from offset 0 gets every message from the tier."""
from __future__ import annotations

import glob
import os
import time

from rocketstore.client import Producer, PullConsumer

from .conftest import start_server
from ..store.tier.tierutil import tier_queue


def test_serve_feeds_the_tier_and_pulls_fall_through(tmp_path):
    tier = tmp_path / "tier"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"""brokerClusterName=ServeTierC
brokerName=serve-tier
messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore
tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment
tieredStoreFilePath={tier}
tieredStoreGroupCommitTimeout=50
tieredStoreCommitLogMaxSize=4096
""")
    store = str(tmp_path / "store")
    args = ("--config", str(conf), "-o", "mapped_file_size_commitlog=8192")
    srv = start_server(store, *args)
    try:
        with Producer("PG", srv.namesrv) as p:
            sent = [p.send("TierServe", b"serve-%04d" % i + b"p" * 200, tags="t", queue_id=0)
                    for i in range(120)]
        assert all(s.status == "SEND_OK" for s in sent)
        deadline = time.monotonic() + 30
        while len(tier_queue(str(tier), "ServeTierC", "serve-tier", "TierServe", 0)[0]) < 120:
            assert time.monotonic() < deadline, "the tier never caught up"
            time.sleep(0.05)
    finally:
        assert srv.stop() == 0, srv.log()
    assert "unknown key" not in srv.log()
    segs = sorted(glob.glob(os.path.join(store, "commitlog", "*")))
    assert len(segs) > 3
    for p in segs[:-1]:
        os.unlink(p)
    for p in glob.glob(os.path.join(store, "index", "*")):  # only the tier's INDEX can answer
        os.unlink(p)
    srv = start_server(store, *args)
    try:
        c = PullConsumer("CG", srv.namesrv)
        got, off = [], 0
        while True:
            r = c.pull("TierServe", 0, off, 32)
            got += r.messages
            if r.status != "FOUND":
                break
            off = r.next_begin_offset
        assert [m.body for m in got] == [b"serve-%04d" % i + b"p" * 200 for i in range(120)]
        assert [m.uniq_key for m in got] == [s.msg_id for s in sent]
        assert [m.queue_offset for m in got] == list(range(120))
        # QUERY_MESSAGE by a message's UNIQ_KEY, as the broker answers it (no client filter)
        from rocketstore.client.admin import AdminClient
        from rocketstore.client.consumer import decode_messages
        from rocketstore.remoting.codes import RequestCode, ResponseCode
        with AdminClient(namesrv=srv.namesrv) as admin:
            for i in (3, 77):
                resp = admin.call(srv.broker, RequestCode.QUERY_MESSAGE,
                                  {"topic": "TierServe", "key": sent[i].msg_id, "maxNum": 32,
                                   "beginTimestamp": 0, "endTimestamp": (1 << 63) - 1})
                assert resp.code == ResponseCode.SUCCESS
                assert [(m.body, m.queue_offset) for m in decode_messages(resp.body)] == \
                    [(b"serve-%04d" % i + b"p" * 200, i)]
    finally:
        assert srv.stop() == 0, srv.log()
