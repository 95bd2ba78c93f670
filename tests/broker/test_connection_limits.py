"""Connection limits on every port of ``rocketstore serve`` (remoting broker and name server,
console, metrics), as an attacker on this machine would test them with raw sockets: idle
connections, slowloris frames and requests, more connections than a client address or a port
may hold. Before these limits none of them was ever closed; each test measures how soon the
server closes them now, with short limits set in ``broker.conf``. Also the Host allow-list of
the HTTP ports (a DNS-rebinding page sends its own name as ``Host``)."""
from __future__ import annotations

import socket
import struct
import time
import urllib.request

import pytest

from rocketstore.client import Producer

from .conftest import free_port, start_server

IDLE_S, FRAME_S, PER_PORT, PER_CLIENT = 4, 2, 40, 8


def _limited_server(tmp_path_factory, idle_s: int):
    base = tmp_path_factory.mktemp("limits")
    conf = base / "broker.conf"
    conf.write_text(f"serverChannelMaxIdleTimeSeconds={idle_s}\n"
                    f"serverFrameReadTimeoutSeconds={FRAME_S}\n"
                    f"serverMaxConnections={PER_PORT}\n"
                    f"serverMaxConnectionsPerClient={PER_CLIENT}\n"
                    "httpAllowedHosts=console.example\n")
    cport, mport = free_port(), free_port()
    s = start_server(str(base / "store"), "--config", str(conf), "--console", str(cport),
                     "--metrics-port", str(mport))
    s.console = f"127.0.0.1:{cport}"
    s.metrics = f"127.0.0.1:{mport}"
    return s


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = _limited_server(tmp_path_factory, IDLE_S)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """The same caps, but connections held for the cap checks must not turn idle under a
    loaded machine's slower steps (the idle sweep would free slots mid-check)."""
    s = _limited_server(tmp_path_factory, 120)
    yield s
    assert s.stop() == 0, s.log()


def _connect(addr: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.socket()
    s.bind((source, 0))
    s.connect((host, int(port)))
    return s


def _closed_after(s: socket.socket, limit_s: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closed ``s`` (None: still open after ``limit_s``). With
    ``trickle``, one byte of it is sent every 0.3 s meanwhile (a slowloris)."""
    t0 = time.monotonic()
    s.settimeout(min(0.3, limit_s))
    i = 0
    while time.monotonic() - t0 < limit_s:
        try:
            if s.recv(1) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            pass
        except OSError:  # reset
            return time.monotonic() - t0
        if i < len(trickle):
            try:
                s.send(trickle[i:i + 1])
            except OSError:
                return time.monotonic() - t0
            i += 1
    return None


def _half_frame() -> bytes:
    header = b'{"code":105,"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":' \
             b'"JSON","version":401,"extFields":{"topic":"T"}}'
    return struct.pack(">ii", 4 + len(header) + 100, len(header)) + header  # 100 bytes short


@pytest.mark.parametrize("port", ["broker", "namesrv"])
def test_remoting_idle_and_stalled_connections_are_closed(srv, port):
    addr = getattr(srv, port)
    idle = _connect(addr)
    stalled = _connect(addr)
    stalled.sendall(_half_frame()[:20])
    slow = _connect(addr)  # a byte every 0.3 s: never idle, but its frame never completes
    try:
        t_slow = _closed_after(slow, 8, trickle=_half_frame()[20:])
        t_idle = _closed_after(idle, 8)
        t_stalled = _closed_after(stalled, 8)
    finally:
        for s in (idle, stalled, slow):
            s.close()
    assert t_slow is not None and t_slow < FRAME_S + 1.5, t_slow
    assert t_stalled is not None  # closed by the frame timeout, before the idle one
    assert t_idle is not None and IDLE_S - 1.5 <= t_idle + t_slow <= IDLE_S + 2, (t_idle, t_slow)


def test_a_working_client_is_not_idle(srv):
    """Requests and answers are activity: a producer sending every 0.5 s for longer than the
    idle limit keeps its connection."""
    with Producer("PGLimits", srv.namesrv) as p:
        t0 = time.monotonic()
        while time.monotonic() - t0 < IDLE_S + 1:
            assert p.send("LimitsTopic", b"x").status == "SEND_OK"
            time.sleep(0.5)


@pytest.mark.parametrize("port", ["broker", "console", "metrics"])
def test_connection_caps_per_client_and_per_port(capped, port):
    addr = getattr(capped, port)
    held = [_connect(addr) for _ in range(PER_CLIENT)]
    try:
        time.sleep(0.2)
        extra = _connect(addr)  # the 9th from 127.0.0.1: closed at once (through a worker
        t = _closed_after(extra, 3)  # process and the writer's table: allow a loaded machine)
        extra.close()
        assert t is not None, "a connection over the per-client cap stayed open"
        for s in held:  # the first eight were kept
            assert _closed_after(s, 0.05) is None
        other = _connect(addr, "127.0.0.2")  # another address is still admitted
        assert _closed_after(other, 0.1) is None
        other.close()
        time.sleep(0.5)  # its close reaches the table (a close is seen after the accepts below
        # otherwise: through a worker process the two events may cross)
        # fill the port from other addresses up to its cap, then one more is refused
        more = [_connect(addr, f"127.0.0.{3 + i // PER_CLIENT}")
                for i in range(PER_PORT - PER_CLIENT)]
        held += more
        time.sleep(0.3)
        over = _connect(addr, "127.0.0.200")
        assert _closed_after(over, 3) is not None, "a connection over the port's cap stayed open"
        over.close()
    finally:
        for s in held:
            s.close()
    time.sleep(1.0)  # the closes reach the table (through a worker process on the broker port)
    late = _connect(addr)  # once they are gone, connections are admitted again
    assert _closed_after(late, 0.3) is None
    late.close()


@pytest.mark.parametrize("port", ["console", "metrics"])
def test_http_slowloris_is_closed_and_others_are_served(srv, port):
    addr = getattr(srv, port)
    lorises = [_connect(addr, f"127.0.1.{i}") for i in range(1, 6)]
    for s in lorises:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never end
    t0 = time.monotonic()
    path = "/" if port == "console" else "/metrics"
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
        assert r.status == 200
    served_in = time.monotonic() - t0
    times = [_closed_after(s, 6, trickle=b"X-a: b\r\n") for s in lorises]
    for s in lorises:
        s.close()
    assert served_in < 2.0, served_in
    assert all(t is not None and t < FRAME_S + 2 for t in times), times


def _get(addr: str, path: str, host: str) -> tuple[int, bytes]:
    s = _connect(addr)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        s.settimeout(10)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("port,path", [("console", "/api/topics"), ("metrics", "/metrics")])
def test_host_header_allow_list(srv, port, path):
    addr = getattr(srv, port)
    p = addr.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{p}", f"localhost:{p}", "console.example", f"CONSOLE.example:{p}"):
        status, _ = _get(addr, path, host)
        assert status == 200, host
    for host in ("attacker.example", f"attacker.example:{p}", "127.0.0.1.attacker.example",
                 "", "[::2]"):
        status, body = _get(addr, path, host)
        assert status == 400 and b"httpAllowedHosts" in body, (host, status, body)


def test_defaults():
    from rocketstore.broker.config import BrokerConfig
    from rocketstore.netlimits import Limits

    assert Limits.from_config(BrokerConfig()) == Limits(4096, 1024, 120.0, 30.0)
