"""Fixtures: a real ``rocketstore serve`` subprocess on 127.0.0.1 with free ports."""
from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest

SMALL_STORE = ["-o", "mapped_file_size_commitlog=1048576",
               "-o", "mapped_file_size_consume_queue=20000",
               "-o", "max_hash_slot_num=1000", "-o", "max_index_num=4000"]


def metric(port: int, name: str) -> float | None:
    """The value of the unlabelled sample ``name`` on ``/metrics`` at ``port``; None when absent."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


# Ports handed to servers started later (Java brokers, name servers, `serve` processes) come from
# below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by default): a port the
# kernel gave out for "any free port" may be taken by an outbound connection before the server
# binds it ("Address already in use" under load). Within that range they are handed out in turn
# from one counter shared by every test process of the machine (a file under flock): the three
# slots of `make test` and their xdist workers run at once, and independent random picks collided
# (one slot's name server took the port another slot had just been given).
_FIXED_PORTS = (15000, 32000)
_PORT_COUNTER = os.path.join(tempfile.gettempdir(), f"rocketstore-test-ports-{os.getuid()}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(n: int) -> int:
    """The first of ``n`` consecutive free ports no other test process of this machine is given
    (until the counter wraps after some 17,000 ports)."""
    lo, hi = _FIXED_PORTS
    fd = os.open(_PORT_COUNTER, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 32, 0).strip()
        nxt = int(raw) if raw.isdigit() else random.randrange(lo, hi)
        for _ in range(200):
            if nxt + n > hi:
                nxt = lo
            start, nxt = nxt, nxt + n
            if all(_bindable(q) for q in range(start, start + n)):
                break
        else:
            raise RuntimeError(f"no {n} free consecutive ports in {lo}-{hi}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(nxt).encode(), 0)
        return start
    finally:
        os.close(fd)


def free_port() -> int:
    """A port p with p-2 .. p+1 free and given to no other test: any port may become a broker's
    (``serve`` and RocketMQ's broker listen on port-2, the VIP channel, and port+1, HA, too)."""
    return free_port_block(4) + 2


@dataclass
class Server:
    proc: subprocess.Popen
    store: str
    broker: str
    namesrv: str
    log_path: str
    grpc: str | None = None  # host:port of the gRPC endpoint when started with --grpc-port

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def wait_max_offset(consumer, topic: str, queue_id: int, at_least: int,
                    timeout_s: float = 30.0) -> int:
    """Wait until the broker has dispatched ``at_least`` messages of a queue (a send returns
    before the reput thread writes the ConsumeQueue, as in RocketMQ)."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = consumer.max_offset(topic, queue_id)
        if n >= at_least or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def start_server(store: str, *extra: str, log_path: str | None = None,
                 namesrv_port: int | None = None) -> Server:
    port, ns_port = free_port(), namesrv_port or free_port()
    log_path = log_path or os.path.join(os.path.dirname(store), f"serve-{port}.log")
    err = open(log_path, "w")
    # a broker joining outside name servers starts none of its own unless a test asks
    ns_opt = [] if "--namesrv" in extra and namesrv_port is None else ["--namesrv-port", str(ns_port)]
    cmd = [sys.executable, "-m", "rocketstore.cli", "serve", "--store", store, "--host",
           "127.0.0.1", "--port", str(port), *ns_opt, "--json",
           "--log-level", "INFO", *SMALL_STORE, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    if not line:
        proc.kill()
        raise RuntimeError(f"serve did not start: {open(log_path).read()}")
    ready = json.loads(line)
    assert ready["event"] == "ready", line
    return Server(proc, store, ready["broker"], ready["namesrv"], log_path, ready.get("grpc"))


@pytest.fixture
def server(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--message-delay-level", "1s 2s 3s 4s 5s")
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.log()
