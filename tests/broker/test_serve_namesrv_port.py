"""``serve --namesrv-port N`` with a broker.conf that names ``namesrvAddr`` (as every RocketMQ
broker.conf does): the embedded name server must listen on N and route clients to the broker —
checked with RocketMQ's own Java client, Apache's C++ client and ours — and the start-up banner
lists only ports that really listen.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore.client import Producer, PullConsumer

from .conftest import SMALL_STORE, free_port, start_server


def _listens(addr: str) -> bool:
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _conf(tmp_path: Path, namesrv_addr: str) -> str:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
                    f"namesrvAddr={namesrv_addr}\ndeleteWhen=04\nfileReservedTime=48\n"
                    "brokerRole=ASYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n")
    return str(conf)


def _our_round_trip(namesrv: str, topic: str, n: int = 5) -> set[bytes]:
    with Producer("PG_ns_port", namesrv) as p:
        for i in range(n):
            p.send(topic, b"ours-%d" % i)
    got: set[bytes] = set()
    with PullConsumer("CG_ns_port", namesrv) as c:
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            for q in range(4):
                got.update(m.body for m in c.pull(topic, q, 0, 32).messages)
    return got


def test_explicit_namesrv_port_starts_the_name_server_despite_namesrvaddr(tmp_path):
    ns_port = free_port()
    conf = _conf(tmp_path, f"127.0.0.1:{ns_port}")
    srv = start_server(str(tmp_path / "store"), "--config", conf, namesrv_port=ns_port)
    try:
        assert srv.namesrv == f"127.0.0.1:{ns_port}"
        assert _listens(srv.namesrv), "the name server the banner names does not listen"
        assert _our_round_trip(srv.namesrv, "NsPortTopic") == {b"ours-%d" % i for i in range(5)}
    finally:
        assert srv.stop() == 0, srv.log()


def test_namesrv_port_plus_outside_name_server_registers_with_both(tmp_path):
    from tests.cluster.conftest import start_namesrv, wait_for

    outside = start_namesrv()
    ns_port = free_port()
    conf = _conf(tmp_path, f"{outside.addr};127.0.0.1:{ns_port}")
    srv = start_server(str(tmp_path / "store"), "--config", conf, namesrv_port=ns_port)
    try:
        assert _listens(f"127.0.0.1:{ns_port}")
        # the outside name server learns the broker through REGISTER_BROKER
        with Producer("PG_both", outside.addr) as p:
            assert wait_for(lambda: _try_send(p, "BothTopic"), timeout=40)
        assert _our_round_trip(f"127.0.0.1:{ns_port}", "BothTopic", 3) >= {b"ours-0"}
    finally:
        assert srv.stop() == 0, srv.log()
        outside.stop()


def _try_send(p: Producer, topic: str) -> bool:
    try:
        p.send(topic, b"via-outside")
        return True
    except Exception:  # no route yet: the broker registers within a second
        return False


def test_banner_lists_only_ports_that_listen(tmp_path):
    """namesrvAddr naming a name server that is down, no --namesrv-port: no name server of ours
    starts, and the human banner must not claim one."""
    dead = free_port()
    conf = _conf(tmp_path, f"127.0.0.1:{dead}")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                             str(tmp_path / "store"), "--config", conf, "--port", str(port),
                             *SMALL_STORE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        banner = proc.stdout.readline()
        assert banner.startswith("rocketstore broker on"), proc.stderr.read()
        claimed = re.findall(r"(\w[\w ]*?) on (127\.0\.0\.1:\d+)", banner)
        assert claimed, banner
        for what, addr in claimed:
            assert _listens(addr), f"banner says {what} on {addr}, nothing listens: {banner}"
        assert "name server on" not in banner
        assert f"127.0.0.1:{dead}" in banner  # said as where it registers, not as a listener
    finally:
        proc.terminate()
        proc.wait(30)


# -- RocketMQ's Java client -------------------------------------------------------------------
def _java_home() -> str:
    from tests import referee
    return referee.home(referee.V4)


def test_java_client_through_namesrv_port_with_namesrvaddr_in_conf(tmp_path):
    home = _java_home()
    classes = tmp_path / "classes"
    src = Path(__file__).with_name("java") / "RouteClient.java"
    subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes),
                    str(src)], check=True, capture_output=True)
    ns_port = free_port()
    conf = _conf(tmp_path, f"127.0.0.1:{ns_port}")
    srv = start_server(str(tmp_path / "store"), "--config", conf, namesrv_port=ns_port)
    try:
        env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="256m", HOME=str(tmp_path))
        r = subprocess.run(["timeout", "240", os.path.join(home, "java-run"), "RouteClient",
                            f"127.0.0.1:{ns_port}", "JavaNsPort", "8"],
                           capture_output=True, text=True, env=env)
    finally:
        assert srv.stop() == 0, srv.log()
    out = r.stdout.splitlines()
    assert r.returncode == 0 and "DONE" in out, r.stdout[-3000:] + r.stderr[-3000:]
    assert [ln for ln in out if ln.startswith("SEND")] == ["SEND SEND_OK"] * 8
    assert sorted(ln for ln in out if ln.startswith("PULL")) == sorted(
        f"PULL route-{i}" for i in range(8))


# -- Apache's C++ client (PyPI rocketmq) --------------------------------------------------------
@pytest.mark.interop
def test_cpp_client_through_namesrv_port_with_namesrvaddr_in_conf(tmp_path):
    from .test_interop_cpp_client import _interop_python, _run

    py = _interop_python()
    ns_port = free_port()
    conf = _conf(tmp_path, f"127.0.0.1:{ns_port}")
    srv = start_server(str(tmp_path / "store"), "--config", conf, namesrv_port=ns_port)
    try:
        sent = _run(py, tmp_path, "produce", f"127.0.0.1:{ns_port}", "CppNsPort", "10")
        assert [s["status"] for s in sent] == [0] * 10
        with PullConsumer("CG_cpp_check", srv.namesrv) as c:
            deadline = time.monotonic() + 10
            while sum(c.max_offset("CppNsPort", q) for q in range(4)) < 10:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        pulled = _run(py, tmp_path, "pull", f"127.0.0.1:{ns_port}", "CppNsPort", "CG_cpp")
    finally:
        assert srv.stop() == 0, srv.log()
    assert sorted(m["body"] for m in pulled) == sorted(f"body-{i}" for i in range(10))
