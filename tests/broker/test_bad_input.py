"""Hostile and broken clients: each bad connection is closed, everyone else is served, and
nothing reaches the store."""
from __future__ import annotations

import json
import os
import random
import socket
import struct
import time

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.remoting import RemotingCommand, RemotingConnection, RequestCode

from .conftest import start_server


def _addr(s: str) -> tuple[str, int]:
    host, port = s.rsplit(":", 1)
    return host, int(port)


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _send_frame() -> bytes:
    fields = {"a": "PG", "b": "BadTopic", "c": "TBW102", "d": 4, "e": 0, "f": 0,
              "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0, "k": False, "m": False}
    return RemotingConnection().send(
        RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, b"should never be stored"))


def _closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the server closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


class GoodClient:
    """A well-behaved client on its own long-lived connection."""

    def __init__(self, addr: str) -> None:
        self.sock = socket.create_connection(_addr(addr), timeout=5)
        self.codec = RemotingConnection()

    def ask(self, topic: str = "BadTopic") -> RemotingCommand:
        req = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": 0})
        self.sock.sendall(self.codec.send(req))
        while True:
            cmd = self.codec.next_command()
            if isinstance(cmd, RemotingCommand):
                assert cmd.opaque == req.opaque
                return cmd
            data = self.sock.recv(65536)
            assert data, "server closed a good connection"
            self.codec.receive_data(data)


@pytest.mark.parametrize("payload", [
    pytest.param(bytes(random.Random(7).getrandbits(8) for _ in range(4096)), id="garbage"),
    pytest.param(b"\x80\x00\x00\x00" + b"\x00" * 64, id="length-2^31"),
    pytest.param(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 64, id="length-2^31-1"),
    pytest.param(_frame(b"this is not json", b"body"), id="header-not-json"),
    pytest.param(_frame(b'{"code":"ten","opaque":1}'), id="header-bad-code"),
    pytest.param(struct.pack(">ii", 100, 0x7F000010) + b"{}" * 48, id="bad-serialize-type"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
    pytest.param(_frame(b'{"code":10,"extFields":{"a":' + b"[" * 100_000 + b"]" * 100_000
                        + b'}}'), id="header-nested-100k-deep"),
    pytest.param(_frame(b'{"code":1e400,"opaque":1}'), id="header-code-infinite"),
])
def test_bad_frames_close_only_that_connection(tmp_path, payload):
    srv = start_server(str(tmp_path / "store"))
    try:
        good = GoodClient(srv.broker)
        assert good.ask().code == 0
        for addr in (srv.broker, srv.namesrv):
            bad = socket.create_connection(_addr(addr), timeout=5)
            bad.sendall(payload)
            assert _closed_by_server(bad), f"{addr} kept a bad connection open"
            bad.close()
        assert good.ask().code == 0
        assert srv.proc.poll() is None
    finally:
        assert srv.stop() == 0, srv.log()
    assert "closing" in srv.log()
    _assert_nothing_written(tmp_path / "store")


def test_truncated_frame_then_close_writes_nothing(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    try:
        good = GoodClient(srv.broker)
        whole = _send_frame()
        bad = socket.create_connection(_addr(srv.broker), timeout=5)
        bad.sendall(whole[:-5])
        bad.shutdown(socket.SHUT_WR)  # the peer ends the stream inside a frame
        assert _closed_by_server(bad)
        bad.close()
        assert good.ask().code == 0
    finally:
        assert srv.stop() == 0, srv.log()
    assert "inside a frame" in srv.log()
    _assert_nothing_written(tmp_path / "store")


def test_thousand_connections_opened_and_dropped(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    try:
        good = GoodClient(srv.broker)
        rnd = random.Random(1)
        whole = _send_frame()
        for round_ in range(4):
            socks = []
            for i in range(250):
                s = socket.create_connection(_addr(srv.broker), timeout=10)
                kind = (round_ * 250 + i) % 4
                if kind == 1:
                    s.sendall(whole[:rnd.randrange(1, len(whole) - 1)])  # a partial request
                elif kind == 2:
                    s.sendall(bytes(rnd.getrandbits(8) for _ in range(32)))
                socks.append(s)
            for s in socks:
                if rnd.random() < 0.5:  # half reset (RST), half close (FIN)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            assert good.ask().code == 0
        assert srv.proc.poll() is None
        # and a new client still gets routes
        ns = GoodClient(srv.namesrv)
        req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        ns.sock.sendall(ns.codec.send(req))
        time.sleep(0.2)
        ns.codec.receive_data(ns.sock.recv(65536))
        resp = ns.codec.next_command()
        assert resp.code == 0 and json.loads(resp.body)["queueDatas"]
    finally:
        assert srv.stop() == 0, srv.log()
    _assert_nothing_written(tmp_path / "store")


def _assert_nothing_written(root) -> None:
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                      max_index_num=4000)
    with MessageStore(cfg) as store:
        assert store.get_max_phy_offset() == 0
        assert store.get_max_offset_in_queue("BadTopic", 0) == 0
    assert not os.path.exists(os.path.join(root, "consumequeue", "BadTopic"))
