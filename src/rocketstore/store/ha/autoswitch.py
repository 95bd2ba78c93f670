"""Controller-mode replication, byte-compatible with RocketMQ 5's auto-switch HA
(``store/ha/autoswitch``: ``AutoSwitchHAService``, ``AutoSwitchHAConnection``,
``AutoSwitchHAClient``), beside the 4.9 HA of this package and with the same face to the store
and the broker (``start``/``stop``, ``wake``, ``submit_wait``/``replica_status``, ``status``).

The wire (all big-endian; ``state``: 1 HANDSHAKE, 2 TRANSFER — RocketMQ's HAConnectionState):

* slave -> master, handshake (16 bytes): ``int state=1, short syncFromLastFile,
  short asyncLearner, long brokerId`` (the slave's controller-given id);
* slave -> master, report (12 bytes): ``int state=2, long maxOffset`` — the first one says
  where the transfer starts (0: the master's oldest file, or its last with syncFromLastFile),
  every one acknowledges;
* master -> slave, handshake (20 bytes + body): ``int state=1, int bodySize, long maxOffset,
  int lastEpoch``, then bodySize / 12 epoch entries ``int epoch, long startOffset``;
* master -> slave, transfer (36 bytes + body): ``int state=2, int bodySize, long offset,
  int epoch, long epochStartOffset, long confirmOffset``, then the CommitLog bytes (size 0:
  a heartbeat). One frame never spans two epochs.

The slave compares the master's epoch entries with its own (``epoch.consistent_point``): the
bytes past the consistent point were written by a master the group has since replaced. RocketMQ
truncates them away; here ``on_truncate(point)`` hands the cut to the broker, which stops the
store, sets the tail aside in ``<store>/quarantine/`` (``store.quarantine``, readable with
``rocketstore salvage``) and reopens — nothing is destroyed.

The master keeps each slave's last caught-up time (its report reached the master's end, or
nothing was left to send): ``maybe_shrink`` drops members silent or behind longer than
``haMaxTimeSlaveNotCatchup``, and a slave that reaches the confirm offset within the current
epoch is proposed for the SyncStateSet (``on_expand``). The confirm offset is the lowest offset
every SyncStateSet member holds; with ``allAckInSyncStateSet`` a SYNC put waits for it, else for
``inSyncReplicas`` replicas (itself included). Fewer than ``minInSyncReplicas`` members:
IN_SYNC_REPLICAS_NOT_ENOUGH, answered before the append (``before_write``) as RocketMQ 5's
CommitLog does: a refused put writes nothing.
"""
from __future__ import annotations

import logging
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..results import PutStatus
from .epoch import EpochCache, EpochEntry, consistent_point
from .group import GroupTransfer
from .protocol import HAProtocolError

log = logging.getLogger(__name__)

HANDSHAKE, TRANSFER = 1, 2
SLAVE_HANDSHAKE = struct.Struct(">ihhq")  # 16
SLAVE_REPORT = struct.Struct(">iq")  # 12
MASTER_HANDSHAKE = struct.Struct(">iiqi")  # 20
MASTER_TRANSFER = struct.Struct(">iiqiqq")  # 36
ENTRY = struct.Struct(">iq")  # 12
MAX_ENTRIES = 1000  # RocketMQ's handshake buffer holds 1000 entries
CONNECT_TIMEOUT_S = 5.0


@dataclass
class AutoSwitchSettings:
    """What controller mode tells the store's HA (``broker.replicas`` fills it)."""
    epoch_path: str
    broker_id: int  # the controller-given id of this replica
    is_master: bool
    master_epoch: int = 0  # a master appends (master_epoch, max offset) at start
    sync_state_set: set[int] = field(default_factory=set)
    master_ha_address: str | None = None  # a slave's master
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    sync_from_last_file: bool = False
    async_learner: bool = False
    ha_max_time_slave_not_catchup: int = 15_000  # ms
    on_truncate: Callable[[int], None] | None = None  # a slave must cut its CommitLog here
    on_expand: Callable[[set[int]], None] | None = None  # propose a larger SyncStateSet
    on_slave_lost: Callable[[], None] | None = None  # a slave's connection closed: check now


class AutoSwitchHAService:
    def __init__(self, cfg: Any, commitlog: Any, on_appended: Callable[[], None],
                 settings: AutoSwitchSettings) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self.settings = settings
        self._on_appended = on_appended
        self.epochs = EpochCache(settings.epoch_path)
        self.group = GroupTransfer(cfg.slave_timeout)
        self.connections: list[_MasterConnection] = []
        self._lock = threading.Lock()
        self._confirm_lock = threading.Lock()
        self.sync_state_set: set[int] = set(settings.sync_state_set) | (
            {settings.broker_id} if settings.is_master else set())
        self.caught_up: dict[int, float] = {}  # slave id -> time.time() it was last caught up
        self.confirm_offset = commitlog.max_offset() if settings.is_master else 0
        self._expanding: set[int] = set()
        self.client: _SlaveClient | None = None if settings.is_master else _SlaveClient(self)
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def _open_epoch(self) -> None:
        s = self.settings
        top = self.commitlog.max_offset()
        # entries past what the CommitLog holds were cut (recovery, or ``change_to_master``:
        # RocketMQ's truncateInvalidMsg + truncateSuffixByOffset); the new epoch starts here
        self.epochs.truncate_suffix_by_offset(top + 1)
        if self.epochs.last_epoch() >= s.master_epoch:
            self.epochs.truncate_suffix_by_epoch(s.master_epoch)
        if not self.epochs.append(s.master_epoch, top):
            log.warning("epoch %d at %d not appended (last entry %s)", s.master_epoch, top,
                        self.epochs.last())
        log.warning("master of epoch %d from CommitLog offset %d", s.master_epoch, top)

    def start(self) -> None:
        s = self.settings
        if s.is_master:
            self._open_epoch()
        port = self.cfg.ha_listen_port
        if port is not None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.cfg.ha_bind_host, port))
            sock.listen(16)
            sock.settimeout(0.5)
            self._sock = sock
            self.port = sock.getsockname()[1]
            self._accept_thread = threading.Thread(target=self._accept_loop,
                                                   name="AutoSwitchHAAccept", daemon=True)
            self._accept_thread.start()
        self.group.start()
        if self.client is not None:
            self.client.start()

    def stop_client(self) -> None:
        """A slave about to be promoted: the HA client stops (its thread joined), so nothing
        is appended to the CommitLog from the old master any more."""
        client, self.client = self.client, None
        if client is not None:
            client.stop()

    def change_to_master(self, master_epoch: int, sync_state_set: set[int]) -> None:
        """In place, after ``stop_client`` and the tail cut (RocketMQ's ``changeToMaster``):
        the new epoch opens at the CommitLog's end, which is also the confirm offset; the
        accept loop serves slaves from now on."""
        s = self.settings
        s.is_master, s.master_epoch, s.master_ha_address = True, master_epoch, None
        s.sync_state_set = set(sync_state_set)
        self._open_epoch()
        self.caught_up.clear()
        self._expanding.clear()
        self.sync_state_set = set(sync_state_set) | {s.broker_id}
        self.confirm_offset = self.commitlog.max_offset()
        self._recompute()

    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.stop()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        if self._accept_thread is not None:
            self._accept_thread.join(3)
        for conn in list(self.connections):
            conn.close("shutdown")
        self.group.stop()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                s, addr = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self.settings.is_master:
                s.close()  # a slave serves no chained slave in controller mode
                continue
            conn = _MasterConnection(self, s, f"{addr[0]}:{addr[1]}")
            with self._lock:
                self.connections.append(conn)
            conn.start()

    def _closed(self, conn: "_MasterConnection") -> None:
        with self._lock:
            if conn in self.connections:
                self.connections.remove(conn)
        self._recompute()
        cb = self.settings.on_slave_lost
        if cb is not None and not self._stop.is_set() and conn.slave_id in self.sync_state_set:
            cb()  # as RocketMQ's removeConnection: the SyncStateSet shrinks at once

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    # -- the put path's face --------------------------------------------------------------------
    def wake(self) -> None:
        """After each append. A master recomputes its confirm offset here, as RocketMQ 5's
        master computes it whenever the reput asks: a put nobody waits on (``WAIT`` "false",
        the timer's re-puts, a master alone in its SyncStateSet) is served at once, not at the
        next waiting put."""
        for c in list(self.connections):
            c.wake()
        if self.settings.is_master:
            self._recompute()

    def _acks(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for c in list(self.connections):
            if c.slave_id >= 0:
                out[c.slave_id] = max(out.get(c.slave_id, -1), c.ack_offset)
        return out

    def _recompute(self) -> int:
        """The confirm offset (lowest offset every SyncStateSet member holds) and the offset
        a SYNC put waits for, handed to the group transfer."""
        top = self.commitlog.max_offset()
        acks = self._acks()
        me = self.settings.broker_id
        members = [top if m == me else acks.get(m, 0) for m in self.sync_state_set] or [top]
        confirm = min(members)
        with self._confirm_lock:  # threads race here (puts, HA reads): never move it back
            moved = confirm > self.confirm_offset
            if moved or not self.settings.is_master:
                self.confirm_offset = confirm
        if moved:
            self._on_appended()  # dispatch may go on: consumers are served up to here
        if self.settings.all_ack_in_sync_state_set:
            self.group.ack(confirm)
        else:
            need = max(1, self.settings.in_sync_replicas) - 1
            ranked = sorted(acks.values(), reverse=True)
            self.group.ack(top if need == 0 else (ranked[need - 1] if len(ranked) >= need else 0))
        return confirm

    def slave_ok(self, end_offset: int) -> bool:
        return len(self.sync_state_set) >= self.settings.min_in_sync_replicas

    def before_write(self) -> PutStatus | None:
        """RocketMQ 5's CommitLog check before it appends a SYNC put in controller mode: fewer
        SyncStateSet members than ``minInSyncReplicas`` refuses the put, nothing written.
        (RocketMQ also counts a set still being proposed to the controller; only the set in
        force counts here, so a put let through is not refused after its append for that.)"""
        if self.settings.is_master and not self.slave_ok(0):
            return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    def replica_status(self, end_offset: int) -> PutStatus:
        ev = threading.Event()
        box = [PutStatus.FLUSH_SLAVE_TIMEOUT]

        def done(st: PutStatus) -> None:
            box[0] = st
            ev.set()
        self.submit_wait(end_offset, done)
        ev.wait(self.cfg.slave_timeout / 1000.0 + 2.0)
        return box[0]

    def submit_wait(self, end_offset: int, callback: Callable[[PutStatus], None]) -> None:
        if not self.slave_ok(end_offset):
            callback(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
            return
        self.wake()
        self._recompute()
        self.group.submit(end_offset, lambda ok: callback(
            PutStatus.PUT_OK if ok else PutStatus.FLUSH_SLAVE_TIMEOUT))

    # -- the SyncStateSet -----------------------------------------------------------------------
    def set_sync_state_set(self, members: set[int]) -> None:
        self.sync_state_set = set(members) | {self.settings.broker_id}
        self._expanding -= self.sync_state_set
        self._recompute()

    def _slave_report(self, conn: "_MasterConnection", offset: int) -> None:
        now = time.time()
        if offset >= self.commitlog.max_offset() or offset >= conn.sent_to_at_last_transfer:
            self.caught_up[conn.slave_id] = now
        self._recompute()
        sid = conn.slave_id
        if sid < 0 or conn.async_learner or sid in self.sync_state_set or sid in self._expanding:
            return
        last = self.epochs.last()
        if offset >= self.confirm_offset and (last is None or offset >= last.start_offset):
            self._expanding.add(sid)
            cb = self.settings.on_expand
            if cb is not None:
                cb(self.sync_state_set | {sid})

    def expand_failed(self, sid: int) -> None:
        self._expanding.discard(sid)

    def maybe_shrink(self) -> set[int]:
        """The SyncStateSet without the members that did not catch up in time or are not
        connected (RocketMQ's ``maybeShrinkSyncStateSet``)."""
        now = time.time()
        limit = self.settings.ha_max_time_slave_not_catchup / 1000.0
        connected = {c.slave_id for c in list(self.connections)}
        me = self.settings.broker_id
        return {m for m in self.sync_state_set
                if m == me or (m in connected and now - self.caught_up.get(m, 0) <= limit)}

    # -- a slave --------------------------------------------------------------------------------
    def on_appended(self) -> None:
        self._on_appended()

    def set_master_address(self, addr: str | None) -> None:
        """The name server's word on the master is ignored: in controller mode only the
        controller names it (a name server may still list a dead master for a while)."""

    # -- operators ------------------------------------------------------------------------------
    def status(self) -> dict:
        top = self.commitlog.max_offset()
        slaves = [{"address": c.peer, "broker_id": c.slave_id, "acked_offset": c.ack_offset,
                   "requested_offset": c.request_offset, "sent_offset": c.next_transfer,
                   "lag_bytes": max(0, top - max(c.ack_offset, 0)), "lag_seconds": 0.0,
                   "stalled": False, "behind_oldest_file": False,
                   "connected_seconds": round(time.time() - c.connected_at, 1),
                   "last_report_seconds_ago": None} for c in list(self.connections)]
        out = {"role": "SYNC_MASTER" if self.settings.is_master else "SLAVE",
               "controller_mode": True, "ha_port": self.port, "max_offset": top,
               "min_offset": self.commitlog.min_offset(), "confirm_offset": self.confirm_offset,
               "slave_acked_offset": self.group.acked, "waiting_puts": self.group.waiting,
               "epoch": self.epochs.last_epoch(), "sync_state_set": sorted(self.sync_state_set),
               "epoch_entries": [[e.epoch, e.start_offset] for e in self.epochs.entries()],
               "slaves": slaves}
        if self.client is not None:
            c = self.client
            out["master"] = {"address": c.master_address, "connected": c.connected,
                             "received_bytes": c.received_bytes,
                             "master_offset_seen": c.master_offset_seen,
                             "last_frame_seconds_ago": None, "last_error": c.last_error or None}
        return out


class _MasterConnection:
    """One slave on the master's HA socket: a reader (handshake, reports) and a writer."""

    def __init__(self, service: AutoSwitchHAService, sock: socket.socket, peer: str) -> None:
        self.service = service
        self.sock = sock
        self.peer = peer
        self.connected_at = time.time()
        self.slave_id = -1
        self.async_learner = False
        self.sync_from_last_file = False
        self.request_offset: int | None = None
        self.ack_offset = -1
        self.next_transfer = -1
        self.sent_to_at_last_transfer = 2**63 - 1
        self.closed = False
        self._handshake = threading.Event()
        self._first = threading.Event()
        self._wake = threading.Event()
        self._threads = [threading.Thread(target=self._read_loop, daemon=True,
                                          name=f"AutoSwitchHARead-{peer}"),
                         threading.Thread(target=self._write_loop, daemon=True,
                                          name=f"AutoSwitchHAWrite-{peer}")]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        log.warning("auto-switch HA connection from %s (broker id %s) closed: %s", self.peer,
                    self.slave_id, why)
        for fn in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                fn()
            except OSError:
                pass
        self._handshake.set()
        self._first.set()
        self._wake.set()
        self.service._closed(self)

    def _read_loop(self) -> None:
        cfg = self.service.cfg
        buf = bytearray()
        last = time.monotonic()
        try:
            while not self.closed:
                ready, _, _ = select.select([self.sock], [], [], 1.0)
                if not ready:
                    if time.monotonic() - last > cfg.ha_housekeeping_interval / 1000.0:
                        self.close("no report within haHousekeepingInterval")
                        return
                    continue
                data = self.sock.recv(65536)
                if not data:
                    self.close("slave closed the connection")
                    return
                last = time.monotonic()
                buf += data
                while len(buf) >= 4:
                    state = int.from_bytes(buf[:4], "big", signed=True)
                    if state == HANDSHAKE:
                        if len(buf) < SLAVE_HANDSHAKE.size:
                            break
                        _, last_file, learner, sid = SLAVE_HANDSHAKE.unpack_from(buf)
                        del buf[:SLAVE_HANDSHAKE.size]
                        self.slave_id, self.sync_from_last_file = sid, last_file == 1
                        self.async_learner = learner == 1
                        log.info("slave %s (broker id %d) handshakes", self.peer, sid)
                        self._handshake.set()
                    elif state == TRANSFER:
                        if len(buf) < SLAVE_REPORT.size:
                            break
                        _, offset = SLAVE_REPORT.unpack_from(buf)
                        del buf[:SLAVE_REPORT.size]
                        if offset < 0 or offset > self.service.commitlog.max_offset():
                            raise HAProtocolError(f"slave reported offset {offset} outside "
                                                  f"the CommitLog")
                        if self.request_offset is None:
                            self.request_offset = offset
                            self._first.set()
                        self.ack_offset = offset
                        self.service._slave_report(self, offset)
                    else:
                        raise HAProtocolError(f"slave sent state {state}")
        except (OSError, HAProtocolError) as exc:
            self.close(str(exc))

    def _write_loop(self) -> None:
        svc = self.service
        cfg = svc.cfg
        cl = svc.commitlog
        try:
            while not self.closed and not self._handshake.wait(0.5):
                pass
            if self.closed:
                return
            entries = svc.epochs.entries()[-MAX_ENTRIES:]
            body = b"".join(ENTRY.pack(e.epoch, e.start_offset) for e in entries)
            self.sock.sendall(MASTER_HANDSHAKE.pack(HANDSHAKE, len(body), cl.max_offset(),
                                                    svc.epochs.last_epoch()) + body)
            while not self.closed and not self._first.wait(0.5):
                pass
            if self.closed:
                return
            req = self.request_offset or 0
            if req == 0:
                if self.sync_from_last_file:
                    top = cl.max_offset()
                    req = top - top % cl.file_size
                else:
                    req = cl.min_offset()
            nxt = req
            self.next_transfer = nxt
            entry = svc.epochs.find_by_offset(nxt) or svc.epochs.last()
            heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
            last_write = 0.0
            while not self.closed:
                self._wake.clear()
                last_epoch = svc.epochs.last_epoch()
                end = None if entry is None or entry.epoch == last_epoch else entry.end_offset
                limit = cfg.ha_transfer_batch_size
                if end is not None:
                    if nxt >= end:
                        entry = svc.epochs.next_entry(entry.epoch)
                        continue
                    limit = min(limit, end - nxt)
                data = cl.get_data(nxt, limit) if entry is not None else None
                if data:
                    self.sent_to_at_last_transfer = cl.max_offset()
                    self.sock.sendall(self._header(nxt, len(data), entry) + bytes(data))
                    nxt += len(data)
                    self.next_transfer = nxt
                    last_write = time.monotonic()
                    continue
                if self.slave_id >= 0 and nxt >= cl.max_offset():
                    svc.caught_up[self.slave_id] = time.time()
                if time.monotonic() - last_write > heartbeat_s:
                    self.sock.sendall(self._header(nxt, 0, entry or svc.epochs.first()))
                    last_write = time.monotonic()
                self._wake.wait(0.1)
        except OSError as exc:
            self.close(f"send failed: {exc}")

    def _header(self, offset: int, size: int, entry: EpochEntry | None) -> bytes:
        epoch, start = (entry.epoch, entry.start_offset) if entry is not None else (-1, 0)
        return MASTER_TRANSFER.pack(TRANSFER, size, offset, epoch, start,
                                    self.service.confirm_offset)


class _SlaveClient:
    """The slave side: connect, handshake, compare epochs, then take frames and report."""

    def __init__(self, service: AutoSwitchHAService) -> None:
        self.service = service
        self.master_address = service.settings.master_ha_address
        self.connected = False
        self.received_bytes = 0
        self.master_offset_seen = 0
        self.last_error = ""
        self.truncate_requested: int | None = None
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="AutoSwitchHAClient", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not threading.current_thread():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            addr = self.master_address
            if not addr:
                self._stop.wait(0.5)
                continue
            try:
                self._session(addr)
            except (OSError, HAProtocolError, ValueError) as exc:
                self.last_error = str(exc) or type(exc).__name__
                if self.connected:
                    log.warning("auto-switch HA connection to master %s closed: %s", addr,
                                self.last_error)
            finally:
                self.connected = False
                sock, self._sock = self._sock, None
                if sock is not None:
                    sock.close()
            if self.truncate_requested is not None:
                return
            self._stop.wait(1.0)

    def _recv_exact(self, sock: socket.socket, n: int, buf: bytearray) -> bytes:
        while len(buf) < n:
            if self._stop.is_set():
                raise OSError("stopped")
            ready, _, _ = select.select([sock], [], [], 1.0)
            if not ready:
                continue
            data = sock.recv(1 << 20)
            if not data:
                raise OSError("master closed the connection")
            buf += data
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def _session(self, addr: str) -> None:
        svc = self.service
        s = svc.settings
        cfg = svc.cfg
        cl = svc.commitlog
        host, _, port = addr.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self.connected = True
        sock.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, int(s.sync_from_last_file),
                                          int(s.async_learner), s.broker_id))
        buf = bytearray()
        state, size, master_max, _ = MASTER_HANDSHAKE.unpack(
            self._recv_exact(sock, MASTER_HANDSHAKE.size, buf))
        if state != HANDSHAKE or size < 0 or size % ENTRY.size or size > ENTRY.size * MAX_ENTRIES:
            raise HAProtocolError(f"not a master handshake: state {state}, body {size}")
        body = self._recv_exact(sock, size, buf)
        master_entries = [EpochEntry(*ENTRY.unpack_from(body, i))
                          for i in range(0, size, ENTRY.size)]
        own = cl.max_offset()
        if len(svc.epochs):
            point = consistent_point(svc.epochs.entries(), own, master_entries, master_max)
            if point < 0:
                raise ValueError(f"no consistent point between the master's epochs "
                                 f"{master_entries} and ours {svc.epochs.entries()}")
            if point < own:
                log.warning("CommitLog diverges from master %s after offset %d (ours ends at "
                            "%d): the tail is cut into the quarantine", addr, point, own)
                self.truncate_requested = point
                if s.on_truncate is not None:
                    s.on_truncate(point)
                return
            svc.epochs.truncate_suffix_by_offset(point)
        log.info("auto-switch HA: transfer from master %s at %d", addr, own)
        sock.sendall(SLAVE_REPORT.pack(TRANSFER, own))
        reported, last_report = own, time.monotonic()
        received_epoch = -1
        heartbeat_s = cfg.ha_send_heartbeat_interval / 1000.0
        housekeeping_s = cfg.ha_housekeeping_interval / 1000.0
        last_read = time.monotonic()
        while not self._stop.is_set():
            ready, _, _ = select.select([sock], [], [], min(1.0, heartbeat_s))
            if ready:
                data = sock.recv(1 << 20)
                if not data:
                    raise OSError("master closed the connection")
                buf += data
                last_read = time.monotonic()
                while len(buf) >= MASTER_TRANSFER.size:
                    state, size, offset, epoch, epoch_start, confirm = \
                        MASTER_TRANSFER.unpack_from(buf)
                    if state != TRANSFER or size < 0 or size > cl.file_size:
                        raise HAProtocolError(f"not a transfer header: state {state}, "
                                              f"size {size}")
                    if len(buf) < MASTER_TRANSFER.size + size:
                        break
                    chunk = bytes(buf[MASTER_TRANSFER.size:MASTER_TRANSFER.size + size])
                    del buf[:MASTER_TRANSFER.size + size]
                    mine = cl.max_offset()
                    if mine != 0 and mine != offset and size > 0:
                        raise HAProtocolError(f"master pushed offset {offset}, our CommitLog "
                                              f"ends at {mine}")
                    if epoch != received_epoch and epoch >= 0:
                        received_epoch = epoch
                        svc.epochs.append(epoch, epoch_start)
                    if size:
                        if not cl.append_data(offset, chunk):
                            raise HAProtocolError(f"cannot append {size} bytes at {offset}")
                        self.received_bytes += size
                        svc.on_appended()
                    self.master_offset_seen = offset + size
                    new_confirm = min(confirm, cl.max_offset())
                    if new_confirm != svc.confirm_offset:
                        svc.confirm_offset = new_confirm
                        svc.on_appended()  # the slave dispatches up to the confirm offset too
            elif time.monotonic() - last_read > housekeeping_s:
                raise OSError("master silent longer than haHousekeepingInterval")
            mine = cl.max_offset()
            if mine > reported or time.monotonic() - last_report > heartbeat_s:
                sock.sendall(SLAVE_REPORT.pack(TRANSFER, mine))
                reported, last_report = mine, time.monotonic()


def cut_tail(cfg: Any, offset: int, reason: str) -> Any:
    """A stopped store's CommitLog cut at ``offset``: every non-zero byte after it set aside in
    ``<store>/quarantine/`` first (``store.quarantine``), then the tail zeroed and later
    segments dropped. The next open's recovery drops the ConsumeQueue and index entries that
    pointed past the cut. Returns the quarantine event (None: nothing was there)."""
    from .. import quarantine
    from ..commitlog import CommitLog

    cl = CommitLog(cfg)
    cl.load()
    try:
        ev = quarantine.set_aside(cfg.store_path_root_dir, cl.queue.files, offset, reason)
        cl.truncate(offset)
        for mf in cl.queue.files:  # the zeroed tail durable before the store reopens
            try:
                mf.mm.flush()
            except (AttributeError, OSError, ValueError):
                pass
    finally:
        cl.close()
    return ev
