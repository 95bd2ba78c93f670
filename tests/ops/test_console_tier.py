"""The console's tier page and ``/api/tier`` over HTTP from a real ``rocketstore serve`` with a
posix tier: per queue the local and the tier's offsets, the upload lag, errors. Expected values
come from what the test sent (counts per queue) and from the tier's files read with os only."""
from __future__ import annotations

import json
import time
import urllib.request

from rocketstore.client import Producer

from ..broker.conftest import free_port, start_server
from ..store.tier.tierutil import tier_queue


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_console_shows_the_tier(tmp_path):
    tier = tmp_path / "tier"
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join([
        "brokerClusterName=ConC", "brokerName=con-b",
        "messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore",
        "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment",
        f"tieredStoreFilePath={tier}", "tieredStoreGroupCommitTimeout=100",
        "tieredStoreGroupCommitCount=10", ""]))
    port = free_port()
    srv = start_server(str(tmp_path / "store"), "--config", str(conf), "--console", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        doc = json.loads(get(base + "/api/tier"))
        assert doc["available"] and doc["backend"] == "posix" and doc["where"] == str(tier)
        with Producer("con-pg", srv.namesrv) as p:
            for i in range(30):
                assert p.send("ConT", b"c-%03d" % i, queue_id=i % 2).status == "SEND_OK"
        sent = {0: 15, 1: 15}
        deadline = time.monotonic() + 30
        while True:
            doc = json.loads(get(base + "/api/tier"))
            queues = {q["queue_id"]: q for q in doc["queues"] if q["topic"] == "ConT"}
            if (len(queues) == 2 and all(q["tier_max"] == sent[i] for i, q in queues.items())) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for qid, n in sent.items():
            rows, _, cl_len = tier_queue(str(tier), "ConC", "con-b", "ConT", qid)
            assert len(rows) == n
            q = queues[qid]
            assert (q["local_min"], q["local_max"], q["tier_min"], q["tier_max"]) == (0, n, 0, n)
            assert (q["tier_bytes"], q["pending"]) == (cl_len, 0)
        assert doc["lag_messages"] == 0 and doc["lag_bytes"] == 0
        assert doc["upload_errors"] == 0 and doc["read_errors"] == 0 and doc["damaged"] == []
        page = get(base + "/tier")
        assert 'id="tier-queues"' in page and "ConT" in page and f"0 – {sent[0]}" in page
        assert 'id="tier-lag-messages">0<' in page
        assert 'href="/tier"' in get(base + "/")
    finally:
        assert srv.stop() == 0, srv.log()
