"""``rocketstore serve --metrics-port``: scrape a real broker over HTTP after real sends and pulls.

Every expected value comes from what the test sent and read back (message counts, body sizes,
store sizes of the pulled records, file sizes on disk), never from the broker's own numbers.
"""
from __future__ import annotations

import os
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from rocketstore.client import Producer, PullConsumer  # noqa: E402

from ..broker.conftest import free_port, start_server  # noqa: E402


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} missing; have " \
        f"{sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def scrape_until(url: str, ok, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if ok(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


@pytest.fixture
def metrics_server(tmp_path):
    port = free_port()
    srv = start_server(str(tmp_path / "store"), "--metrics-port", str(port),
                       "-o", "flush_commitlog_thorough_interval=500")  # flush lag drains soon
    yield srv, f"http://127.0.0.1:{port}/metrics"
    assert srv.stop() == 0, srv.log()


def test_metrics_after_sends_and_pulls(metrics_server, tmp_path):
    srv, url = metrics_server
    bodies = [b"x" * (10 + i) for i in range(7)]
    batch = [f"batch-{i}".encode() for i in range(5)]
    with Producer("MP", srv.namesrv) as p, PullConsumer("mgroup", srv.namesrv) as c:
        for b in bodies:
            assert p.send("MetricsA", b, queue_id=0).status == "SEND_OK"
        assert p.send_batch("MetricsB", batch, queue_id=1).status == "SEND_OK"
        deadline = time.monotonic() + 10  # dispatched (so that one pull finds all seven)
        while c.max_offset("MetricsA", 0) < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        got_a = c.pull("MetricsA", 0, 0, 32)
        got_b = c.pull("MetricsB", 1, 0, 32)
        assert [m.body for m in got_a.messages] == bodies
        assert [m.body for m in got_b.messages] == batch
        c.commit_offset("MetricsA", 0, 3)
        t_before = time.time()
        s = scrape_until(url, lambda s: s.get(("rocketmq_storage_flush_behind_bytes", ())) == 0
                         and s.get(("rocketmq_storage_dispatch_behind_bytes", ())) == 0)
        t_after = time.time()
        assert value(s, "rocketstore_connections", server="broker") >= 1

    # puts: counts, bytes, latency observations (one per request)
    assert value(s, "rocketmq_messages_in_total", topic="MetricsA") == 7
    assert value(s, "rocketmq_messages_in_total", topic="MetricsB") == 5
    assert value(s, "rocketmq_throughput_in_total") == sum(map(len, bodies + batch))
    assert value(s, "rocketstore_put_failed_total") == 0
    assert value(s, "rocketstore_put_latency_seconds_count") == 8
    assert value(s, "rocketstore_put_latency_seconds_bucket", le="+Inf") == 8
    # pulls
    assert value(s, "rocketmq_messages_out_total", topic="MetricsA", consumer_group="mgroup") == 7
    assert value(s, "rocketmq_messages_out_total", topic="MetricsB", consumer_group="mgroup") == 5
    all_msgs = got_a.messages + got_b.messages
    assert value(s, "rocketmq_throughput_out_total") == sum(m.store_size for m in all_msgs)
    assert value(s, "rocketstore_pull_latency_seconds_count", long_polling="false") == 2
    # the store: every byte is a record we pulled, dispatched and flushed
    assert value(s, "rocketstore_commitlog_max_offset") == sum(m.store_size for m in all_msgs)
    assert value(s, "rocketstore_commitlog_flushed_offset") == sum(m.store_size for m in all_msgs)
    assert value(s, "rocketstore_storage_dispatch_behind_seconds") == 0
    assert value(s, "rocketstore_storage_flush_behind_seconds") == 0
    # queues
    assert value(s, "rocketstore_queue_max_offset", topic="MetricsA", queue_id="0") == 7
    assert value(s, "rocketstore_queue_max_offset", topic="MetricsB", queue_id="1") == 5
    assert value(s, "rocketstore_queue_min_offset", topic="MetricsA", queue_id="0") == 0
    # consumer lag: committed 3 of 7 on MetricsA/0
    assert value(s, "rocketstore_consumer_offset", consumer_group="mgroup", topic="MetricsA",
                 queue_id="0") == 3
    assert value(s, "rocketstore_consumer_queue_lag_messages", consumer_group="mgroup",
                 topic="MetricsA", queue_id="0") == 4
    assert value(s, "rocketmq_consumer_lag_messages", consumer_group="mgroup",
                 topic="MetricsA") == 4
    oldest = got_a.messages[3].store_timestamp / 1000.0
    lag_s = value(s, "rocketmq_consumer_lag_latency_seconds", consumer_group="mgroup")
    assert t_before - oldest - 0.01 <= lag_s <= t_after - oldest + 0.01
    # disk use per store path, against the files the test finds on disk
    store = srv.store
    for kind in ("commitlog", "consumequeue", "index"):
        path = os.path.join(store, kind)
        on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
                      for f in fs)
        assert on_disk > 0
        assert value(s, "rocketstore_storage_path_bytes", path_type=kind, path=path) == on_disk
        st = os.statvfs(path)
        assert value(s, "rocketstore_disk_total_bytes", path_type=kind,
                     path=path) == st.f_blocks * st.f_frsize
        used = (st.f_blocks - st.f_bfree) * st.f_frsize  # RocketMQ: used / (used + usable)
        ratio = used / (used + st.f_bavail * st.f_frsize)
        got = value(s, "rocketstore_disk_used_ratio", path_type=kind, path=path)
        assert ratio - 0.02 <= got <= ratio + 0.02
    assert value(s, "process_resident_memory_bytes") > 0


@pytest.mark.parametrize("option", ["--metrics-port", "--console"])
def test_a_busy_ops_port_is_a_clear_error(tmp_path, option):
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                            str(tmp_path / "s"), "--port", "0", "--namesrv-port", "0",
                            option, str(port)],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "metrics/console" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "s" / "abort")  # the store was closed cleanly
