"""Dispatch never dies: a real failure is retried, puts are refused while it lasts, and once the
cause is gone dispatch resumes and consumers see every acknowledged message."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from rocketstore import Message, MessageStore, PutStatus
from rocketstore.broker.admin.views import runtime_info

from ..durability.helpers import small_config


def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def _all_bodies(store, topic, qid=0):
    out, off = [], 0
    while True:
        g = store.get_message("g", topic, qid, off, 32)
        if not g.messages:
            return out
        out += [m.body for m in g.messages]
        off = g.next_begin_offset


def test_a_file_in_the_way_of_a_consume_queue_stalls_then_dispatch_resumes(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as s:
        for i in range(5):
            assert s.put_message(Message("A", b"a%d" % i)).ok
        assert s.wait_dispatched(30) and s.dispatch_health().ok
        os.makedirs(cfg.consume_queue_dir, exist_ok=True)
        blocker = os.path.join(cfg.consume_queue_dir, "B")
        with open(blocker, "w") as fh:  # a file where topic B's directory must go
            fh.write("in the way")
        acked = []
        r = s.put_message(Message("B", b"b0"))
        assert r.ok
        acked.append(b"b0")
        assert _wait(lambda: not s.dispatch_health().ok)
        h = s.dispatch_health()
        assert h.error and h.failures >= 1 and h.failing_since_ms and h.behind_bytes > 0
        assert s.dispatch_error == h.error
        refused = s.put_message(Message("A", b"refused"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "dispatch cannot progress" in refused.error
        info = runtime_info(s, cfg, None, None)
        assert info["dispatchHealthy"] == "false" and info["dispatchError"]
        # inspect (read-only, beside this live store) shows the ConsumeQueue B lacks on disk
        p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "inspect", "--store",
                            str(tmp_path), "--json"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "B/0" in json.loads(p.stdout)["recovery"]["cq_behind"]
        time.sleep(0.5)  # several retries happen, the thread stays alive
        assert s.reput._thread is not None and s.reput._thread.is_alive()
        os.unlink(blocker)  # the condition goes away
        assert _wait(lambda: s.dispatch_health().ok)
        assert s.wait_dispatched(30)
        assert runtime_info(s, cfg, None, None)["dispatchHealthy"] == "true"
        r = s.put_message(Message("B", b"b1"))
        assert r.ok
        acked.append(b"b1")
        assert s.wait_dispatched(30)
        assert _all_bodies(s, "B") == acked
        assert _all_bodies(s, "A") == [b"a%d" % i for i in range(5)]
    with MessageStore(cfg) as s:  # and a clean reopen agrees
        assert _all_bodies(s, "B") == acked


CHILD = r"""
import json, os, resource, sys, time
from rocketstore import Message, MessageStore
from tests.durability.helpers import small_config
root = sys.argv[1]
cfg = small_config(root, flush_interval_consume_queue=600_000,
                   flush_consume_queue_thorough_interval=600_000, message_index_enable=False)
s = MessageStore(cfg)
assert s.put_message(Message("T0", b"x")).ok and s.wait_dispatched(30)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
used = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 2, hard))  # room for two more queues
acked, refused = [], []
for i in range(1, 12):
    r = s.put_message(Message(f"T{i}", b"m%d" % i))
    (acked if r.ok else refused).append((i, r.status.name, r.error))
    time.sleep(0.05)
deadline = time.time() + 30
while s.dispatch_health().ok and time.time() < deadline:
    time.sleep(0.02)
health_low = s.dispatch_health().to_dict()
late = s.put_message(Message("T0", b"late"))
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))  # descriptors are back
ok = s.wait_dispatched(30)
deadline = time.time() + 30
while not s.dispatch_health().ok and time.time() < deadline:
    time.sleep(0.02)
seen = {}
for i, _, _ in acked:
    g = s.get_message("g", f"T{i}", 0, 0, 8)
    seen[i] = [m.body.decode() for m in g.messages]
after = s.put_message(Message("T0", b"after"))
s.shutdown()
print(json.dumps({"acked": acked, "refused": refused, "health_low": health_low,
                  "late": [late.status.name, late.error], "dispatched": ok, "seen": seen,
                  "after": after.status.name}))
"""


def test_out_of_descriptors_stalls_dispatch_then_it_resumes(tmp_path):
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                       text=True, timeout=180, cwd=os.getcwd())
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["health_low"]["ok"] is False and "Too many open files" in out["health_low"]["error"]
    assert out["late"][0] == "SERVICE_NOT_AVAILABLE" and "dispatch" in out["late"][1]
    assert all(status == "SERVICE_NOT_AVAILABLE" for _, status, _ in out["refused"])
    assert len(out["acked"]) >= 2 and out["refused"]  # acked before dispatch hit the limit, then refused
    assert out["dispatched"] and out["after"] == "PUT_OK"
    for i, _, _ in out["acked"]:  # every acked message reached its consumers
        assert out["seen"][str(i)] == [f"m{i}"], out


def test_broker_reports_dispatch_health_and_refuses_sends_until_it_recovers(tmp_path):
    """End to end: a live ``rocketstore serve`` whose dispatch cannot create a ConsumeQueue."""
    from rocketstore.client import Producer, PullConsumer
    from rocketstore.remoting import RequestCode
    from tests.broker.conftest import start_server
    from tests.broker.test_client_broker import raw

    store = tmp_path / "store"
    srv = start_server(str(store))

    def runtime():
        resp = raw(srv.broker, RequestCode.GET_BROKER_RUNTIME_INFO)
        return json.loads(resp.body)["table"]

    try:
        with Producer("PG", srv.namesrv) as p:
            assert p.send("Fine", b"f0", queue_id=0).status == "SEND_OK"
            assert runtime()["dispatchHealthy"] == "true"
            (store / "consumequeue").mkdir(exist_ok=True)
            (store / "consumequeue" / "Blocked").write_text("in the way")
            acked = []
            r = p.send("Blocked", b"b0", queue_id=0)
            assert r.status == "SEND_OK"
            acked.append(b"b0")
            assert _wait(lambda: runtime()["dispatchHealthy"] == "false")
            assert runtime()["dispatchError"]
            refused = None
            try:
                refused = p.send("Fine", b"refused", queue_id=0)
            except Exception as exc:  # noqa: BLE001 - the client raises on an error response
                refused = exc
            assert "dispatch cannot progress" in str(getattr(refused, "remark", refused)), refused
            (store / "consumequeue" / "Blocked").unlink()
            assert _wait(lambda: runtime()["dispatchHealthy"] == "true")
            assert p.send("Blocked", b"b1", queue_id=0).status == "SEND_OK"
            acked.append(b"b1")
        c = PullConsumer("CG", srv.namesrv)
        try:
            assert _wait(lambda: c.max_offset("Blocked", 0) == 2)
            got = c.pull("Blocked", 0, 0, 32)
            assert [m.body for m in got.messages] == acked
        finally:
            c.shutdown()
    finally:
        assert srv.stop() == 0, srv.log()
