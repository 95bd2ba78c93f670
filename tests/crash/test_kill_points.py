"""``rocketstore serve`` SIGKILLed at chosen instants, with a real client sending to it.

Random kills rarely land between the two steps of a file roll or a state-file replace; here the
server kills itself exactly there (``store/syncprobe.py``'s crash points, enabled by
``ROCKETSTORE_CRASH_AT=<point>:<n>``): a CommitLog segment / ConsumeQueue file / index file just
created and still empty, the checkpoint's temp file synced but not renamed, a state file moved
to ``.bak`` with its new version not yet in place, expired segments deleted with the
ConsumeQueues and index not yet following. After each kill:

* the server had really died there (SIGKILL), with messages acknowledged before;
* every acknowledged message is in the store at its queue offset, with its body, and by key
  (below the CommitLog's min offset only when cleaning deleted it);
* the state files load (each topic that got a message is known; after a kill inside a state
  file's replace, a restarted ``serve`` takes a message and stops cleanly); ``verify`` then
  finds no error.

``ROCKETSTORE_KILL_POINT_HITS`` (default ``2``) is a comma list of ``n`` values to run per point.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.client import Producer
from rocketstore.store.results import GetStatus
from rocketstore.store.verify import verify_store
from tests.broker.conftest import start_server

pytestmark = pytest.mark.crash

SIZES = dict(mapped_file_size_commitlog=16 * 1024, mapped_file_size_consume_queue=20 * 24,
             max_hash_slot_num=16, max_index_num=60)
OPTS = [a for k, v in SIZES.items() for a in ("-o", f"{k}={v}")]
CLEAN = ["-o", "file_reserved_time=0", "-o", "clean_resource_interval=100",
         "-o", "delete_when=" + ";".join(f"{h:02d}" for h in range(24))]
HITS = [int(n) for n in os.environ.get("ROCKETSTORE_KILL_POINT_HITS", "2").split(",")]
POINTS = ["commitlog-roll", "consumequeue-roll", "index-roll", "checkpoint-write", "state-write",
          "clean-delete"]
SKIP_AT_START = {"checkpoint-write": 4, "state-write": 4}  # passes made while serve starts (recovery, first flush)


def _send_until_killed(srv, limit_s: float = 90.0) -> list[tuple]:
    acked = []
    deadline = time.monotonic() + limit_s
    seq = 0
    try:
        with Producer("KillPG", srv.namesrv, timeout_s=5.0, retries=0) as p:
            while srv.proc.poll() is None and time.monotonic() < deadline:
                # a new topic now and then: topics.json is rewritten while messages flow
                topic = f"KillNew{seq}" if seq % 40 == 39 else f"Kill{seq % 3}"
                qid = seq % 2
                body = b"%d|" % seq + bytes(seq % 300)
                try:
                    r = p.send(topic, body, keys=[f"kk{seq}"], queue_id=qid)
                except Exception:
                    break
                if r.status == "SEND_OK":
                    acked.append((seq, topic, qid, r.queue_offset, body))
                seq += 1
                if seq % 50 == 0:
                    time.sleep(0.05)  # let the flush and clean threads run
    finally:
        try:
            srv.proc.wait(15)
        except Exception:
            srv.proc.kill()
            srv.proc.wait(5)
    return acked


@pytest.mark.timeout(300)
@pytest.mark.parametrize("hit", HITS)
@pytest.mark.parametrize("point", POINTS)
def test_serve_killed_at(tmp_path, monkeypatch, point, hit):
    store = str(tmp_path / "store")
    monkeypatch.setenv("ROCKETSTORE_CRASH_AT", f"{point}:{hit + SKIP_AT_START.get(point, 0)}")
    cleaning = point == "clean-delete"
    srv = start_server(store, *OPTS, *(CLEAN if cleaning else []))
    monkeypatch.delenv("ROCKETSTORE_CRASH_AT")
    acked = _send_until_killed(srv)
    assert srv.proc.returncode == -signal.SIGKILL, (point, srv.proc.returncode, srv.log()[-3000:])
    assert acked or hit == 1, "nothing was acknowledged before the kill"  # (1: the first file)
    assert os.path.exists(os.path.join(store, "abort"))

    with MessageStore(StoreConfig(store_path_root_dir=store, **SIZES,
                                  clean_resource_interval=3_600_000)) as s:
        assert s.wait_dispatched(30), s.dispatch_health()
        min_phy = s.commitlog.min_offset()
        for seq, topic, qid, qoff, body in acked:
            g = s.get_message("g", topic, qid, qoff, 1)
            if cleaning and (g.status is not GetStatus.FOUND or
                             g.messages[0].commitlog_offset < min_phy):
                continue  # deleted by the expiry the test asked for
            assert g.status is GetStatus.FOUND, (point, seq, topic, qid, qoff, g.status,
                                                s.recovery_report.summary())
            m = g.messages[0]
            assert (m.body, m.keys, m.queue_offset) == (body, [f"kk{seq}"], qoff), (point, seq)
            got = s.query_message(topic, f"kk{seq}").messages
            assert [x.queue_offset for x in got] == [qoff], (point, seq)

    if point == "state-write":  # the state files a kill there left: serve loads them
        srv = start_server(store, *OPTS)
        try:
            with Producer("KillPG", srv.namesrv) as p:
                assert p.send("Kill0", b"after", keys=["after"]).status == "SEND_OK"
        finally:
            assert srv.stop() == 0, srv.log()[-3000:]
    topics = {t.topic_name for t in TopicConfigManager(os.path.join(store, "config")).topics()}
    assert {a[1] for a in acked} <= topics, (point, sorted(topics))
    report = verify_store(store, StoreConfig(store_path_root_dir=store, **SIZES))
    assert report.ok, (point, [str(p) for p in report.problems if p.severity == "error"])
