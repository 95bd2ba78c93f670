"""An idle HTTP/2 connection to the gRPC port is closed after serverChannelMaxIdleTimeSeconds,
as a remoting channel is (raw socket: the client preface, then nothing)."""
from __future__ import annotations

import socket
import time

from .conftest import start_grpc_server, write_conf

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def test_idle_grpc_connection_is_closed(tmp_path):
    conf = write_conf(tmp_path / "broker.conf", serverChannelMaxIdleTimeSeconds=2)
    srv = start_grpc_server(str(tmp_path / "store"), {"T": 1}, "--config", conf)
    try:
        host, port = srv.grpc.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.sendall(PREFACE)
        s.settimeout(0.2)
        t0 = time.monotonic()
        closed = None
        while time.monotonic() - t0 < 10:
            try:
                if s.recv(65536) == b"":
                    closed = time.monotonic() - t0
                    break
            except socket.timeout:
                pass
            except OSError:
                closed = time.monotonic() - t0
                break
        s.close()
        assert closed is not None and 1.5 <= closed <= 6, closed
    finally:
        assert srv.stop() == 0, srv.log()
