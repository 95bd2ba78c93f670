"""The slave side of HA: one connection to the master's HA socket (RocketMQ's ``HAClient``).

Theory of operation. While a master address is known, connect (5 s timeout), report the own
CommitLog max offset, then read frames: each must start exactly where the own CommitLog ends
(an empty slave takes the first frame's offset), its bytes are appended as they are
(``CommitLog.append_data``) and the new max offset is reported at once — that report is the
acknowledgement a SYNC_MASTER waits for. Every ``haSendHeartbeatInterval`` the offset is
reported again. A frame at another offset, bytes that are not frames, EOF or an error close
the connection; the next one reports the own max again, so the master resends from there. The
own reput builds ConsumeQueue and index from the appended bytes, as on any store.

RocketMQ's slave sends its first report only a heartbeat interval after connecting; this one
sends it at once (a master reads reports whenever they come), which starts replication ~5 s
sooner and changes nothing on the wire.
"""
from __future__ import annotations

import logging
import select
import socket
import threading
import time
from typing import Any

from .protocol import FrameReader, HAProtocolError, encode_report

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0
RETRY_S = 5.0


class HAClient:
    def __init__(self, service: Any) -> None:
        self.service = service
        self.master_address: str | None = service.cfg.ha_master_address or None
        self.connected = False
        self.connected_at = 0.0
        self.last_frame_at = 0.0
        self.received_bytes = 0
        self.master_offset_seen = 0  # end of the last frame from the master
        self.last_error = ""
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._address_known = threading.Event()  # wakes a client waiting for an address
        self._thread = threading.Thread(target=self._run, name="HAClient", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._address_known.set()
        self._close("stopped")
        self._thread.join(timeout=5)

    def set_master_address(self, addr: str | None) -> None:
        """Used for the next connection (an open one is kept, as RocketMQ's)."""
        if addr and addr != self.master_address:
            log.info("HA master address: %s", addr)
            self.master_address = addr
            self._address_known.set()

    def _close(self, why: str) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            if self.connected:
                log.warning("HA connection to master %s closed: %s", self.master_address, why)
            self.last_error = why
            try:
                sock.close()
            except OSError:
                pass
        self.connected = False

    def _connect(self) -> bool:
        addr = self.master_address
        if not addr:
            return False
        host, _, port = addr.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            self.last_error = f"connect to {addr}: {exc}"
            return False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self._sock = sock
        self.connected = True
        self.connected_at = time.time()
        log.info("HA connected to master %s", addr)
        return True

    def _run(self) -> None:
        cfg = self.service.cfg
        cl = self.service.commitlog
        heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        while not self._stop.is_set():
            if self._sock is None and not self._connect():
                if self.master_address is None:  # connect as soon as the address is known
                    self._address_known.wait(min(RETRY_S, heartbeat_s))
                    self._address_known.clear()
                else:
                    self._stop.wait(min(RETRY_S, heartbeat_s))
                continue
            sock = self._sock
            assert sock is not None
            frames = FrameReader(cl.file_size)
            reported = cl.max_offset()
            try:
                sock.sendall(encode_report(reported))
                last_report = time.monotonic()
                while not self._stop.is_set() and self._sock is sock:
                    ready, _, _ = select.select([sock], [], [], min(1.0, heartbeat_s))
                    if ready:
                        data = sock.recv(1 << 20)
                        if not data:
                            raise ConnectionError("master closed the connection")
                        frames.feed(data)
                        while True:
                            frame = frames.next_frame()
                            if frame is None:
                                break
                            self._append(*frame)
                    own = cl.max_offset()
                    if own > reported or time.monotonic() - last_report > heartbeat_s:
                        sock.sendall(encode_report(own))
                        reported = own
                        last_report = time.monotonic()
            except (OSError, ConnectionError, HAProtocolError, _Mismatch) as exc:
                self._close(str(exc) or type(exc).__name__)
                if not self._stop.is_set():
                    self._stop.wait(0.2 if isinstance(exc, _Mismatch) else min(RETRY_S, heartbeat_s))

    def _append(self, offset: int, body: bytes) -> None:
        cl = self.service.commitlog
        own = cl.max_offset()
        if own != 0 and own != offset:
            raise _Mismatch(f"master pushed offset {offset}, the slave's CommitLog ends at {own}")
        if not cl.append_data(offset, body):
            raise _Mismatch(f"cannot append {len(body)} bytes at {offset} (CommitLog ends at "
                            f"{cl.max_offset()})")
        self.last_frame_at = time.time()
        self.master_offset_seen = offset + len(body)
        if body:
            self.received_bytes += len(body)
            self.service.on_appended()


class _Mismatch(Exception):
    pass
