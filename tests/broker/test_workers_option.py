"""``serve --workers N`` / broker.conf ``serverWorkerProcesses`` (CONTRACT §8): this build serves
from one process, so 1 starts the broker as before and anything else is refused with one clear
line naming where the value came from — before any file is created."""
from __future__ import annotations

import os
import subprocess
import sys

from rocketstore.client import Producer

from .conftest import start_server


def _serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                           str(tmp_path / "store"), "--host", "127.0.0.1", "--port", "0", *args],
                          capture_output=True, text=True, timeout=60)


def test_more_than_one_worker_is_refused_clearly(tmp_path):
    r = _serve(tmp_path, "--workers", "2")
    assert r.returncode == 2
    assert "--workers: 2 worker processes asked for: this build serves from one process" in r.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text("serverWorkerProcesses=4\n")
    r = _serve(tmp_path, "--config", str(conf))
    assert r.returncode == 2 and "--config: 4 worker processes" in r.stderr
    conf.write_text("serverWorkerProcesses=many\n")
    r = _serve(tmp_path, "--config", str(conf))
    assert r.returncode == 2 and "'many' is not a number" in r.stderr
    assert not os.path.exists(tmp_path / "store" / "commitlog")


def test_one_worker_serves(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--workers", "1")
    try:
        with Producer("PG", srv.namesrv) as p:
            assert p.send("WorkersTopic", b"one").status == "SEND_OK"
    finally:
        assert srv.stop() == 0, srv.log()
