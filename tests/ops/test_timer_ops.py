"""Timer metrics (RocketMQ 5's ``TimerMetrics`` and timer gauges) in ``/metrics``, the console and
``rocketstore status``, after real timer sends; the expected numbers come from the deliver times
the test chose."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from rocketstore.client import Producer  # noqa: E402

from ..broker.conftest import free_port, start_server  # noqa: E402
from .test_metrics import scrape_until, value  # noqa: E402


def test_timer_numbers_in_metrics_console_and_status(tmp_path):
    mport, cport = free_port(), free_port()
    srv = start_server(str(tmp_path / "store"), "--metrics-port", str(mport), "--console",
                       str(cport), "-o", "timer_precision_ms=100",
                       "-o", "mapped_file_size_timer_log=52000")
    url = f"http://127.0.0.1:{mport}/metrics"
    try:
        now = int(time.time() * 1000)
        plan = {"Soon": [now + 8000] * 2, "Half": [now + 30_000] * 3, "Later": [now + 9_000_000] * 2}
        with Producer("PG_timer_ops", srv.namesrv) as p:
            for topic, times in plan.items():
                for at in times:
                    assert p.send(topic, b"x", properties={"TIMER_DELIVER_MS": str(at)}).status == "SEND_OK"
        s = scrape_until(url, lambda s: s.get(("rocketmq_timing_messages", (("topic", "Later"),))) == 2)
        for topic, times in plan.items():
            assert value(s, "rocketmq_timing_messages", topic=topic) == len(times)
        assert value(s, "rocketmq_timer_enqueue_total") == 7
        # due within each bound (s) from now, and per hour ahead
        expect = {5: 0, 60: 5, 300: 5, 900: 5, 3600: 5, 14400: 7, 28800: 7, 86400: 7}
        for bound, n in expect.items():
            assert value(s, "rocketmq_timer_message_snapshot", timer_bound_s=str(bound)) == n
        assert value(s, "rocketstore_timer_due_per_hour", hour="0") == 5
        assert value(s, "rocketstore_timer_due_per_hour", hour="2") == 2  # 2.5 h ahead

        html = urllib.request.urlopen(f"http://127.0.0.1:{cport}/", timeout=10).read().decode()
        assert 'id="card-timer"' in html and ">7<" in html.replace(" ", "")

        out = subprocess.run([sys.executable, "-m", "rocketstore.cli", "status", "--namesrv",
                              srv.namesrv, "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rt = json.loads(out.stdout)["brokers"][0]["runtime"]
        assert rt["timerCongestNum"] == "7" and rt["timerOffsetBehind"] == "0"

        # the two "Soon" ones come due and leave the wheel
        s = scrape_until(url, lambda s: s.get(("rocketmq_timing_messages", (("topic", "Soon"),))) == 0)
        assert value(s, "rocketmq_timing_messages", topic="Soon") == 0
        assert value(s, "rocketmq_timer_dequeue_total") == 2
    finally:
        assert srv.stop() == 0, srv.log()[-3000:]
