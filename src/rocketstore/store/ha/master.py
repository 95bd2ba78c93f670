"""The master side of HA: the accept socket and one connection per slave (RocketMQ's
``AcceptSocketService`` and ``HAConnection``).

Theory of operation. Every accepted socket gets a reader and a writer thread. The reader takes
the slave's 8-byte reports: the first is where the stream starts, every one (the first too) is
an acknowledgement handed to the service (``on_ack``, which wakes the SYNC_MASTER waits). A
report past the master's CommitLog end closes the connection, as does silence longer than
``haHousekeepingInterval``, EOF or bytes that are not reports. The writer waits for the first
report, starts at it — or, for a report of 0, at the start of the master's last CommitLog file
(RocketMQ's rule; ``ha_full_catch_up`` starts at the oldest file instead) — and then sends
frames of at most ``haTransferBatchSize`` bytes, each a slice of one segment, and an empty frame
when nothing was sent for ``haSendHeartbeatInterval``. With nothing to send it waits up to
100 ms or until the put path says new bytes are there (``wake``).

The socket stays blocking for sends (a stopped slave blocks the writer, not the master); the
reader polls with ``select`` so housekeeping runs, and closing the socket from the reader
unblocks a writer stuck in ``sendall``.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time
from typing import Any

from .protocol import HAProtocolError, ReportReader, encode_header

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.1


class HAConnection:
    def __init__(self, service: Any, sock: socket.socket, peer: str) -> None:
        self.service = service
        self.sock = sock
        self.peer = peer
        self.connected_at = time.time()
        self.request_offset: int | None = None  # the first report
        self.ack_offset = -1
        self.ack_at = 0.0  # time.time() of the last report
        self.ack_moved_at = time.time()  # when the acknowledged offset last grew
        self.next_transfer = -1
        self.sent_bytes = 0
        self.closed = False
        self.close_reason = ""
        self._wake = threading.Event()
        self._first = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._read_loop, name=f"HAConnection-read-{peer}",
                                          daemon=True),
                         threading.Thread(target=self._write_loop, name=f"HAConnection-write-{peer}",
                                          daemon=True)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self, reason: str) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.close_reason = reason
        log.warning("HA connection from slave %s closed: %s", self.peer, reason)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self._wake.set()
        self._first.set()
        self.service._connection_closed(self)

    def join(self, timeout: float = 2.0) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    # -- reader -----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        reader = ReportReader()
        cfg = self.service.cfg
        last_read = time.monotonic()
        try:
            while not self.closed:
                ready, _, _ = select.select([self.sock], [], [], 1.0)
                now = time.monotonic()
                if not ready:
                    if now - last_read > cfg.ha_housekeeping_interval / 1000.0:
                        self.close(f"no report for {cfg.ha_housekeeping_interval} ms")
                        return
                    continue
                data = self.sock.recv(65536)
                if not data:
                    self.close("slave closed the connection")
                    return
                last_read = now
                value = reader.feed(data)
                if value is None:
                    continue
                if self.request_offset is None:
                    self.request_offset = value
                    log.info("slave %s requests CommitLog offset %d", self.peer, value)
                    self._first.set()
                elif value > self.service.commitlog.max_offset():
                    self.close(f"slave reported offset {value} past the master's end "
                               f"{self.service.commitlog.max_offset()}")
                    return
                self.ack_at = time.time()
                if value > self.ack_offset:
                    self.ack_offset = value
                    self.ack_moved_at = self.ack_at
                self.service.on_ack(value)
        except HAProtocolError as exc:
            self.close(str(exc))
        except (OSError, ValueError) as exc:
            self.close(f"read failed: {exc}")

    # -- writer -----------------------------------------------------------------------------
    def _start_offset(self, requested: int) -> int:
        cl = self.service.commitlog
        if requested != 0:
            return requested
        if self.service.cfg.ha_full_catch_up:
            return cl.min_offset()
        top = cl.max_offset()
        return top - top % cl.file_size

    def _write_loop(self) -> None:
        cfg = self.service.cfg
        cl = self.service.commitlog
        heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        batch = cfg.ha_transfer_batch_size
        try:
            while self.request_offset is None and not self.closed:
                self._first.wait(1.0)
            if self.closed:
                return
            nxt = self._start_offset(self.request_offset)  # type: ignore[arg-type]
            self.next_transfer = nxt
            last_write = time.monotonic()
            while not self.closed:
                self._wake.clear()
                data = cl.get_data(nxt, batch)
                if data:
                    self.sock.sendall(encode_header(nxt, len(data)) + data)
                    nxt += len(data)
                    self.next_transfer = nxt
                    self.sent_bytes += len(data)
                    last_write = time.monotonic()
                    continue
                if time.monotonic() - last_write > heartbeat_s:
                    self.sock.sendall(encode_header(nxt, 0))
                    last_write = time.monotonic()
                self._wake.wait(IDLE_WAIT_S)
        except OSError as exc:
            self.close(f"send failed: {exc}")


class AcceptService:
    """Listens on ``haListenPort`` and hands each slave to a new ``HAConnection``."""

    def __init__(self, service: Any, host: str, port: int) -> None:
        self.service = service
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.sock.settimeout(1.0)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="HAAcceptSocketService", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        try:
            self.sock.close()
        except OSError:
            pass
        self._thread.join(timeout=3)

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stop:
                    return
                time.sleep(0.1)
                continue
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}"
            log.info("HA connection from %s", peer)
            self.service._accepted(HAConnection(self.service, conn, peer))
