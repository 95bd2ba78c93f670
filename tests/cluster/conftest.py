"""Clusters for the tests: a ``rocketstore namesrv`` and ``rocketstore serve`` brokers
registered at it, all real processes on 127.0.0.1."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest

from tests.broker.conftest import free_port, start_server


@dataclass
class NameServer:
    proc: subprocess.Popen
    addr: str

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_namesrv(port: int | None = None, *extra: str) -> NameServer:
    port = port or free_port()
    if "--kv-config-path" not in extra:  # never the user's ~/namesrv/kvConfig.json
        extra = (*extra, "--kv-config-path",
                 os.path.join(tempfile.mkdtemp(prefix="namesrv-"), "kvConfig.json"))
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "namesrv", "--host",
                             "127.0.0.1", "--port", str(port), "--json", *extra],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise RuntimeError("namesrv did not start")
    ready = json.loads(line)
    assert ready["event"] == "ready"
    return NameServer(proc, ready["namesrv"])


def start_cluster_broker(root: str, namesrv: str, name: str, *extra: str):
    os.makedirs(root, exist_ok=True)
    return start_server(os.path.join(root, name), "--namesrv", namesrv, "--broker-name", name,
                        *extra)


def wait_for(fn, timeout: float = 30.0, interval: float = 0.2):
    """Poll ``fn`` until it returns a truthy value (generous deadline for a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


@pytest.fixture
def two_brokers(tmp_path):
    """A name server and two ``serve`` brokers (broker-a, broker-b) registered at it."""
    ns = start_namesrv()
    started = []
    try:
        for name in ("broker-a", "broker-b"):
            started.append(start_cluster_broker(str(tmp_path), ns.addr, name))
        yield ns, started
    finally:
        for b in started:
            b.stop()
        ns.stop()
