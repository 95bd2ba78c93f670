"""Byte-level checks of a master/slave pair, written from RocketMQ's file layouts (not from
rocketstore's decoders): where a CommitLog's records end, and ConsumeQueue units."""
from __future__ import annotations

import os
import socket
import struct
import threading
import time

BLANK_MAGIC = 0xCBD43194 - (1 << 32)  # RocketMQ's BLANK_MAGIC_CODE as a signed int
MESSAGE_MAGICS = {0xDAA320A7 - (1 << 32), 0xDAA320A8 - (1 << 32)}


def segment_names(commitlog_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(commitlog_dir) if len(n) == 20 and n.isdigit())


def written_range(commitlog_dir: str) -> tuple[int, int]:
    """[first offset, end of the last record) of a CommitLog, walking 4-byte sizes and magics;
    a BLANK record jumps to the next segment."""
    names = segment_names(commitlog_dir)
    if not names:
        return 0, 0
    start = int(names[0])
    end = start
    for name in names:
        base = int(name)
        if base != end and end != start:
            break
        data = open(os.path.join(commitlog_dir, name), "rb").read()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC:
                pos = len(data)
                break
            if magic not in MESSAGE_MAGICS or size <= 0 or pos + size > len(data):
                return start, base + pos
            pos += size
        end = base + pos
        if pos < len(data):
            return start, end
    return start, end


def read_range(commitlog_dir: str, file_size: int, start: int, end: int) -> bytes:
    out = bytearray()
    off = start
    while off < end:
        base = off - off % file_size
        with open(os.path.join(commitlog_dir, f"{base:020d}"), "rb") as fh:
            fh.seek(off - base)
            n = min(end, base + file_size) - off
            out += fh.read(n)
        off += n
    return bytes(out)


def cq_units(store_dir: str) -> dict[tuple[str, int], bytes]:
    """Every ConsumeQueue's 20-byte units, its files concatenated up to the first zero unit."""
    root = os.path.join(store_dir, "consumequeue")
    out = {}
    if not os.path.isdir(root):
        return out
    for topic in sorted(os.listdir(root)):
        for qid in sorted(os.listdir(os.path.join(root, topic))):
            d = os.path.join(root, topic, qid)
            buf = bytearray()
            for name in sorted(os.listdir(d)):
                data = open(os.path.join(d, name), "rb").read()
                for p in range(0, len(data) - 19, 20):
                    unit = data[p:p + 20]
                    if unit == bytes(20):
                        break
                    buf += unit
                else:
                    continue
                break
            out[(topic, int(qid))] = bytes(buf)
    return out


def wait_for(pred, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class TcpProxy:
    """A TCP forwarder the test controls: ``cut()`` drops every connection and refuses new
    ones until ``restore()``; ``pause()`` stops forwarding (connections stay open)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.open = True
        self.paused = threading.Event()
        self.conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            if not self.open:
                a.close()
                continue
            try:
                b = socket.create_connection(self.target, timeout=5)
            except OSError:
                a.close()
                continue
            # the timeout is for connecting only: a quiet connection (oneway heartbeats get no
            # answer) must stay open, not be closed by a recv timing out after 5 s
            b.settimeout(None)
            self.conns += [a, b]
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()
            threading.Thread(target=self._pipe, args=(b, a), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.paused.is_set():
                    time.sleep(0.01)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self.open = False
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.conns = []

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self._stop = True
        self.cut()
        self.sock.close()


def pull_every(namesrv: str, topic: str, queues: int, group: str = "ctl-reader"):
    """(queue id, message) for every message the topic's master serves now, queue by queue
    (plain pulls from offset 0)."""
    from rocketstore.client.consumer import PullConsumer
    with PullConsumer(group, namesrv) as c:
        for q in range(queues):
            off = 0
            while True:
                r = c.pull(topic, q, off, 32)
                if r.status != "FOUND":
                    break
                for m in r.messages:
                    yield q, m
                off = r.next_begin_offset
