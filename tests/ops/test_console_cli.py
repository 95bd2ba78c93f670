"""``rocketstore console --store DIR``: the console over a store directory, beside a live broker.

It must see what the broker writes (it re-reads the store), answer searches, and write nothing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("starlette")
from rocketstore.client import Producer, PullConsumer  # noqa: E402

from ..broker.conftest import free_port, start_server  # noqa: E402


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def until(fn, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.3)


def snapshot(root: str) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(d, f))
            out[os.path.relpath(os.path.join(d, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


def start_console(store: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "console", "--store", store,
                             "--port", str(port), "--refresh", "0.5", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    ready = json.loads(line)
    assert ready["event"] == "ready" and ready["console"] == f"http://127.0.0.1:{port}/"
    return proc


def test_console_follows_a_live_store_and_writes_nothing(tmp_path):
    store = str(tmp_path / "store")
    srv = start_server(store)
    console = None
    try:
        with Producer("p", srv.namesrv) as p, PullConsumer("readers", srv.namesrv) as c:
            sent = [p.send("Live", f"live message {i}".encode(), keys=[f"k{i}"], queue_id=0)
                    for i in range(5)]
            until(lambda: c.max_offset("Live", 0) >= 5)
            port = free_port()
            console = start_console(store, port)
            base = f"http://127.0.0.1:{port}"
            topics = {t["topic"]: t for t in get_json(base + "/api/topics")}
            assert topics["Live"]["messages"] == 5
            # what the broker writes next shows up after the next re-read
            sent += [p.send("Live", f"live message {i}".encode(), keys=[f"k{i}"], queue_id=0)
                     for i in range(5, 8)]
            assert until(lambda: {t["topic"]: t["messages"] for t in
                                  get_json(base + "/api/topics")}.get("Live") == 8)
            page = get_text(base + "/messages?mode=key&topic=Live&key=k6")
            assert "live message 6" in page and sent[6].offset_msg_id in page
            found = get_json(base + f"/api/messages?mode=id&msg_id={sent[2].offset_msg_id}")
            assert [m["body_preview"] for m in found] == ["live message 2"]
            c.commit_offset("Live", 0, 3)
    finally:
        assert srv.stop() == 0, srv.log()  # persists the committed offset
    try:
        groups = until(lambda: {g["group"]: g for g in get_json(base + "/api/groups")}
                       .get("readers"))
        assert groups["lag"] == 5 and not groups["online"]
        overview = get_text(base + "/")
        assert "store directory, read-only" in overview
        before = snapshot(store)
        time.sleep(1.2)  # at least two re-reads
        assert get_json(base + "/api/overview")["read_only"] is True
        assert snapshot(store) == before
        assert not os.path.exists(os.path.join(store, "abort"))
    finally:
        console.send_signal(signal.SIGTERM)
        out, err = console.communicate(timeout=30)
    assert console.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"event": "stopped"}


def test_console_refuses_a_directory_that_is_not_a_store(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "console", "--store", str(empty),
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not a store" in r.stderr and "Traceback" not in r.stderr
    assert os.listdir(empty) == []


def test_console_of_a_running_cluster_through_admin_requests(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    console = None
    try:
        with Producer("p", srv.namesrv) as p, PullConsumer("remote-readers", srv.namesrv) as c:
            t0 = int(time.time() * 1000)
            sent = [p.send("Remote", f"remote {i}".encode(), keys=[f"r{i}"], queue_id=i % 2)
                    for i in range(6)]
            t1 = int(time.time() * 1000)
            until(lambda: c.max_offset("Remote", 1) >= 3)
            c.commit_offset("Remote", 0, 1)
        port = free_port()
        console = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "console",
                                    "--namesrv", srv.namesrv, "--port", str(port), "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = json.loads(console.stdout.readline() or "{}")
        assert ready.get("cluster") == srv.namesrv, console.stderr.read()
        base = f"http://127.0.0.1:{port}"
        o = get_json(base + "/api/overview")
        assert [(b["name"], b["addr"], b["put_total"]) for b in o["brokers"]] == \
            [("broker-a", srv.broker, 6)]
        topics = {t["topic"]: t for t in get_json(base + "/api/topics")}
        assert topics["Remote"]["messages"] == 6
        assert {q["queue_id"]: q["max_offset"] for q in topics["Remote"]["queues"]} == \
            {0: 3, 1: 3, 2: 0, 3: 0}
        groups = {g["group"]: g for g in get_json(base + "/api/groups")}
        assert groups["remote-readers"]["lag"] == 5  # committed 1 of 3 on queue 0, none on 1
        by_key = get_json(base + "/api/messages?mode=key&topic=Remote&key=r4")
        assert [m["body_preview"] for m in by_key] == ["remote 4"]
        by_id = get_json(base + f"/api/messages?mode=id&msg_id={sent[3].offset_msg_id}")
        assert [m["msg_id"] for m in by_id] == [sent[3].offset_msg_id]
        by_uniq = get_json(base + f"/api/messages?mode=id&msg_id={sent[2].msg_id}&topic=Remote")
        assert [m["msg_id"] for m in by_uniq] == [sent[2].offset_msg_id]
        window = get_json(base + f"/api/messages?mode=time&topic=Remote&begin={t0}&end={t1}")
        assert sorted(m["body_preview"] for m in window) == [f"remote {i}" for i in range(6)]
        assert "remote 1" in get_text(base + f"/message/{sent[1].offset_msg_id}")
        assert until(lambda: get_json(base + "/api/tps")["t"], 15)  # the chart's samples
        # pulls for the search committed nothing: the group still lags the same
        assert {g["group"]: g["lag"] for g in get_json(base + "/api/groups")}["remote-readers"] == 5
    finally:
        if console is not None:
            console.send_signal(signal.SIGTERM)
            console.communicate(timeout=30)
        assert srv.stop() == 0, srv.log()
    assert console.returncode == 0
