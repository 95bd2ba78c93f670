"""Master/slave replication, byte-compatible with RocketMQ 4.9's HA (``store/ha``).

Theory of operation. ``HAService`` lives with the store (the process that owns the CommitLog)
and talks to the rest only through a small face:

* the put path: ``wake()`` after an append (so transfers start at once) and, on a SYNC_MASTER,
  ``slave_ok(end)`` + ``submit_wait(end, callback)`` / ``wait(end)`` (``group.GroupTransfer``);
* the broker: ``set_master_address`` (a slave learns it from the name server) and ``status()``
  (what operators see: each slave's acknowledged offset, lag in bytes and seconds, stalled);
* the CommitLog's public face: ``max_offset``/``min_offset``/``get_data`` on a master,
  ``append_data`` on a slave.

Every role listens on ``ha_listen_port`` (RocketMQ's brokers do; a slave can be chained);
a SLAVE also runs the ``HAClient``. The wire format is in ``protocol``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..commitlog import CommitLog
from ..results import PutStatus
from .group import GroupTransfer
from .master import AcceptService, HAConnection
from .protocol import HAProtocolError, encode_header, encode_report
from .slave import HAClient

__all__ = ["HAService", "HAProtocolError", "encode_header", "encode_report"]
log = logging.getLogger(__name__)


class HAService:
    def __init__(self, cfg, commitlog: CommitLog, on_appended: Callable[[], None]) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self._on_appended = on_appended
        self.group = GroupTransfer(cfg.slave_timeout)
        self.connections: list[HAConnection] = []
        self._lock = threading.Lock()
        self.accept: AcceptService | None = None
        self.client: HAClient | None = HAClient(self) if cfg.is_slave else None
        self.port: int | None = None
        self.started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        if self.cfg.ha_listen_port is not None:
            try:
                self.accept = AcceptService(self, self.cfg.ha_bind_host, self.cfg.ha_listen_port)
            except OSError as exc:
                if self.cfg.broker_role != "ASYNC_MASTER":
                    raise
                # an ASYNC_MASTER nobody replicates from still serves its clients
                log.warning("HA port %s not available (no slave can connect): %s",
                            self.cfg.ha_listen_port, exc)
            else:
                self.port = self.accept.port
                self.accept.start()
        self.group.start()
        if self.client is not None:
            self.client.start()

    def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
        if self.accept is not None:
            self.accept.stop()
        for conn in list(self.connections):
            conn.close("shutdown")
            conn.join()
        self.group.stop()

    # -- master ---------------------------------------------------------------------------------
    def _accepted(self, conn: HAConnection) -> None:
        with self._lock:
            self.connections.append(conn)
        conn.start()

    def _connection_closed(self, conn: HAConnection) -> None:
        with self._lock:
            if conn in self.connections:
                self.connections.remove(conn)

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def on_ack(self, offset: int) -> None:
        self.group.ack(offset)

    def wake(self) -> None:
        for conn in self.connections:
            conn.wake()

    def before_write(self) -> PutStatus | None:
        """No check before the append in 4.9 HA (SLAVE_NOT_AVAILABLE comes after it, as in
        RocketMQ 4.9)."""
        return None

    def slave_ok(self, end_offset: int) -> bool:
        """RocketMQ's ``isSlaveOK``: a slave is connected and not too far behind."""
        return (self.connection_count > 0
                and end_offset - self.group.acked < self.cfg.ha_slave_fallbehind_max)

    def replica_status(self, end_offset: int) -> PutStatus:
        """Block until a slave holds ``end_offset``: PUT_OK, FLUSH_SLAVE_TIMEOUT or
        SLAVE_NOT_AVAILABLE (the store API's SYNC_MASTER step)."""
        if not self.slave_ok(end_offset):
            return PutStatus.SLAVE_NOT_AVAILABLE
        self.wake()
        return PutStatus.PUT_OK if self.group.wait(end_offset) else PutStatus.FLUSH_SLAVE_TIMEOUT

    def submit_wait(self, end_offset: int, callback: Callable[[PutStatus], None]) -> None:
        """``replica_status`` without blocking: ``callback`` gets the status (possibly at once,
        else from the group-transfer thread)."""
        if not self.slave_ok(end_offset):
            callback(PutStatus.SLAVE_NOT_AVAILABLE)
            return
        self.wake()
        self.group.submit(end_offset, lambda ok: callback(
            PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT))

    # -- slave ----------------------------------------------------------------------------------
    def on_appended(self) -> None:
        self._on_appended()

    def set_master_address(self, addr: str | None) -> None:
        if self.client is not None and not self.cfg.ha_master_address:
            self.client.set_master_address(addr)

    # -- operators ------------------------------------------------------------------------------
    def status(self) -> dict:
        """Replication as operators see it (``rocketstore status``, console, ``/metrics``)."""
        cl = self.commitlog
        top = cl.max_offset()
        now = time.time()
        stall_s = max(3 * self.cfg.ha_send_heartbeat_interval / 1000.0, 10.0)
        slaves = []
        for conn in list(self.connections):
            acked = max(conn.ack_offset, 0)
            lag = max(0, top - acked) if conn.ack_offset >= 0 else top
            lag_s = 0.0
            if lag:
                ts = _timestamp_at(cl, acked)
                lag_s = max(0.0, now - ts / 1000.0) if ts > 0 else now - conn.ack_moved_at
            behind_oldest = 0 <= conn.ack_offset < cl.min_offset()
            stalled = bool(lag) and (now - conn.ack_moved_at > stall_s or behind_oldest)
            slaves.append({"address": conn.peer, "requested_offset": conn.request_offset,
                           "acked_offset": conn.ack_offset, "sent_offset": conn.next_transfer,
                           "lag_bytes": lag, "lag_seconds": round(lag_s, 3),
                           "stalled": stalled, "behind_oldest_file": behind_oldest,
                           "connected_seconds": round(now - conn.connected_at, 1),
                           "last_report_seconds_ago": round(now - conn.ack_at, 1) if conn.ack_at else None})
        out = {"role": self.cfg.broker_role, "ha_port": self.port, "max_offset": top,
               "min_offset": cl.min_offset(), "slave_acked_offset": self.group.acked,
               "waiting_puts": self.group.waiting, "slaves": slaves}
        if self.client is not None:
            c = self.client
            out["master"] = {"address": c.master_address, "connected": c.connected,
                             "received_bytes": c.received_bytes,
                             "master_offset_seen": c.master_offset_seen,
                             "last_frame_seconds_ago": round(now - c.last_frame_at, 1) if c.last_frame_at else None,
                             "last_error": c.last_error or None}
        return out


def _timestamp_at(cl: CommitLog, offset: int) -> int:
    rec = cl.read_record(offset)
    return cl.store_timestamp_at(offset, len(rec)) if rec is not None else -1
