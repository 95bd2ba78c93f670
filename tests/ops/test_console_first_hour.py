"""The console as plain HTTP clients meet it: ``/metrics`` on the console port answers with the
metrics (no redirect that ``curl`` would not follow), and a search that stops at its limit says
so instead of calling the first page "found"."""
from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys

from rocketstore.client import Producer

from tests.broker.conftest import SMALL_STORE, free_port


def test_metrics_and_a_limited_search_on_the_console_port(tmp_path):
    port, ns, console = free_port(), free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                             str(tmp_path / "s"), "--port", str(port), "--namesrv-port", str(ns),
                             "--console", str(console), "--json", *SMALL_STORE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["console"] == f"http://127.0.0.1:{console}/"
        with Producer("PG", f"127.0.0.1:{ns}") as p:
            for i in range(70):
                p.send("Search", b"m%d" % i, keys=["same"])
        conn = http.client.HTTPConnection("127.0.0.1", console, timeout=30)
        for path in ("/metrics", "/metrics/"):
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read().decode()
            assert r.status == 200, (path, r.status, r.getheaders())
            assert "rocketmq_messages_in_total" in body, (path, body[:300])
        conn.request("GET", "/messages?mode=key&topic=Search&key=same&max=64")
        r = conn.getresponse()
        page = r.read().decode()
        assert r.status == 200
        assert "the first 64 messages shown: the search stops at 64 (more may match" in page, \
            page[page.find("result-count") - 20:][:300]
        conn.request("GET", "/messages?mode=key&topic=Search&key=same&max=200")
        page = conn.getresponse().read().decode()  # a key query's own cap is 64
        assert "the first 64 messages shown" in page and "messages found" not in page
        conn.request("GET", "/messages?mode=key&topic=Search&key=m1&max=64")
        page = conn.getresponse().read().decode()
        assert "0 messages found" in page
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read()
