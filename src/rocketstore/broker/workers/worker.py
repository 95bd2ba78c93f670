"""A broker worker process: client sockets, frames and plain sends; the writer does the rest.

Theory of operation: the writer starts ``python -m rocketstore.broker.workers.worker`` with
the listening socket and one end of a Unix socket pair (the link) as inherited descriptors.
Every worker accepts on the same listening socket (the kernel hands each connection to one of
them; a worker that dies leaves the socket and its queued connections to the others). Per
client connection the worker cuts frames and decodes headers with the compiled codec, then:

* a plain send (``send_rule.plan_send`` answers ``Put``) is encoded into its CommitLog record
  here and goes to the writer as a PUT — a read's sends are planned and encoded in one call,
  ``put_batch.link_puts`` (compiled: ``_speedups.pyx``); the writer's RESULT comes back and
  the worker encodes the response — or, for FALLBACK, sends the original frame to the writer
  after all;
* every other frame (pulls, heartbeats, admin, batches, a client's answer to a broker request)
  goes to the writer whole (FRAME) and its answers come back whole (FRAME) to be written.

The worker keeps no broker state: connection limits, idleness, ACL and every answer but a plain
send's are the writer's. It closes a connection whose frame breaks the protocol or stalls
(``serverFrameReadTimeoutSeconds``) and tells the writer. When the link ends — the writer
exited or was killed — the worker closes every client connection and exits: clients reconnect
to the restarted broker, as to a restarted Java broker.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from typing import cast

from ...errors import ProtocolError
from ...netlimits import peer_of
from ...remoting.codes import FRAME_MAX_LENGTH, SEND_REQUEST_CODES
from ...remoting.command import RemotingCommand
from ...remoting.connection import RemotingConnection, cut_frame
from ...remoting.header import decode_header
from ..send_order import SendOrder
from ..send_rule import SendRules, send_answer_header
from . import link as L
from .outbox import Outbox
from .put_batch import link_puts

log = logging.getLogger("rocketstore.worker")
_CODEC = RemotingConnection()  # only its frame encoder is used (no state)
MAX_PUTS = 1024  # a client's sends in flight before its socket is not read (as MAX_INFLIGHT)


class ClientConn(asyncio.Protocol):
    """One client connection in a worker."""

    def __init__(self, worker: "Worker") -> None:
        self.w = worker
        self.id = next(worker.ids)
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.peer = "0.0.0.0:0"
        self.closed = False
        self.partial_since: float | None = None
        self.out: list[bytes] = []
        # PUTs the writer has not answered (fast), the sends held behind them (waiting:
        # (cmd, frame, seq, link PUT message or None), in order)
        self.order: SendOrder[None, tuple[RemotingCommand, bytes, int, bytes | None]] = \
            SendOrder()
        self.held = False  # reading paused: too many puts in flight (MAX_PUTS)
        self.writer_paused = False  # reading paused by the writer (its MAX_INFLIGHT)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        self.peer = peer_of(transport.get_extra_info("peername"))
        self.w.conns[self.id] = self
        self.w.send(L.open_msg(self.id, self.peer))

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.buf
        buf += data
        pos = 0
        w = self.w
        # one pass cuts the read's frames (a non-send is not decoded), one call plans and
        # encodes its sends (``put_batch.link_puts``), one pass hands them on in order
        frames: list[tuple[int, int, RemotingCommand | None]] = []
        broken: ProtocolError | None = None
        try:
            while True:
                cut = cut_frame(buf, pos, FRAME_MAX_LENGTH)
                if cut is None:
                    break
                end, stype, header, body = cut
                raw_start = pos
                pos = end
                if stype == 1 and len(header) >= 2 and int.from_bytes(
                        header[:2], "big", signed=True) not in SEND_REQUEST_CODES:
                    frames.append((raw_start, end, None))  # not a send: no need to decode
                    continue
                cmd = decode_header(header, stype, body)
                if cmd.code not in SEND_REQUEST_CODES or cmd.is_response:
                    frames.append((raw_start, end, None))
                else:
                    frames.append((raw_start, end, cmd))
        except ProtocolError as exc:
            broken = exc  # the frames before it are handled, then the connection closes
        sends = [(c.code, c.ext_fields, c.body or b"") for _, _, c in frames if c is not None]
        puts: list[bytes | None] = []
        seq0 = w.next_seq
        if sends:
            w.next_seq += len(sends)
            try:
                puts = link_puts(sends, self.peer, w.settings, seq0, self.id)
            except Exception:  # whatever it is, the writer's send processor answers
                log.debug("sends from %s handled whole by the writer", self.peer,
                          exc_info=True)
                puts = [None] * len(sends)
        i = 0
        order = self.order
        for raw_start, end, send in frames:
            if send is None:
                w.forward(self.id, buf, raw_start, end)
                continue
            put = puts[i]
            seq = seq0 + i
            i += 1
            frame = bytes(buf[raw_start:end])
            if order.waiting or (put is None and order.fast):
                order.waiting.append((send, frame, seq, put))  # after the PUTs ahead of it
            else:
                self._send(send, frame, seq, put)
            if order.fast + len(order.waiting) >= MAX_PUTS and not self.held:
                self.held = True
                self._reading()
        if broken is not None:
            log.info("broker: closing %s: %s", self.peer, broken)
            self.abort(protocol_error=True)
            return
        if pos:
            del buf[:pos]
        if not buf:
            self.partial_since = None
        elif pos or self.partial_since is None:  # a new frame begun
            self.partial_since = time.monotonic()

    def _send(self, cmd: RemotingCommand, frame: bytes, seq: int, put: bytes | None) -> None:
        """A send to the writer: as a PUT (``put``: the link message, the fast path) or,
        ``put`` None, its frame whole."""
        w = self.w
        if put is None:
            w.send_parts([L.frame_head(self.id, len(frame)), frame])
            return
        w.pending[seq] = (self, cmd, frame)
        w.send(put)
        self.order.fast += 1

    def _send_waiting(self) -> None:
        """Send what waited, in order, up to the next frame that must wait again."""
        waiting = self.order.waiting
        while waiting and not self.closed:
            cmd, frame, seq, put = waiting[0]
            if put is None and self.order.fast:
                return
            waiting.popleft()
            self._send(cmd, frame, seq, put)

    def _reading(self) -> None:
        """Pause or resume reading this client as the two reasons say."""
        if self.transport is None or self.closed:
            return
        if self.held or self.writer_paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def put_answered(self) -> None:
        order = self.order
        order.answered()
        if order.waiting and not order.fast:
            self._send_waiting()
        if self.held and order.fast + len(order.waiting) <= MAX_PUTS // 2:
            self.held = False
            self._reading()

    def eof_received(self) -> bool:
        if self.buf:  # the peer ended the stream inside a frame: its bytes mean nothing
            log.info("broker: closing %s: connection closed inside a frame (%d bytes pending)",
                     self.peer, len(self.buf))
            self.abort(protocol_error=True)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.w.conns.pop(self.id, None) is not None and not self.closed:
            self.w.send(L.close_msg(self.id))
        self.closed = True

    def write(self, data: bytes) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        if self.out:
            self.out.append(data)
            return
        self.out.append(data)
        self.w.loop.call_soon(self._flush)

    def _flush(self) -> None:
        parts, self.out = self.out, []
        if parts and not self.closed and self.transport is not None \
                and not self.transport.is_closing():
            self.transport.writelines(parts)

    def abort(self, protocol_error: bool = False, tell: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        if self.w.conns.pop(self.id, None) is not None and tell:
            self.w.send(L.close_msg(self.id, protocol_error))
        if self.transport is not None:
            self.transport.abort()


class WriterLink(asyncio.Protocol):
    def __init__(self, worker: "Worker") -> None:
        self.w = worker
        self.decoder = L.LinkDecoder()

    def data_received(self, data: bytes) -> None:
        w = self.w
        try:
            msgs = self.decoder.feed(data)
        except L.LinkError as exc:
            log.error("link to the writer broken: %s", exc)
            w.done.set()
            return
        for kind, payload in msgs:
            if kind == L.RESULT:
                w.on_result(L.parse_result(payload))
            elif kind == L.FRAME:
                conn = w.conns.get(L.parse_conn(payload))
                if conn is not None:
                    conn.write(payload[L.CONN.size:])
            elif kind == L.CLOSE:
                conn = w.conns.get(L.parse_close(payload)[0])
                if conn is not None:
                    conn.abort(tell=False)
            elif kind == L.PAUSE or kind == L.RESUME:
                conn = w.conns.get(L.parse_conn(payload))
                if conn is not None:
                    conn.writer_paused = kind == L.PAUSE
                    conn._reading()
            elif kind == L.STOP:
                w.stop_accepting()

    def connection_lost(self, exc: Exception | None) -> None:
        self.w.done.set()


class Worker(Outbox):
    def __init__(self, settings: SendRules, frame_timeout_s: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.frame_timeout_s = frame_timeout_s
        self.conns: dict[int, ClientConn] = {}
        self.pending: dict[int, tuple[ClientConn, RemotingCommand, bytes]] = {}
        self.ids = itertools.count(1)
        self.next_seq = 1  # the sequence number of the next send (``put_batch.link_puts``)
        self.loop = loop
        self.link: asyncio.Transport | None = None
        self.server: asyncio.AbstractServer | None = None
        self.done = asyncio.Event()
        self._out: list[bytes] = []

    # -- to the writer --------------------------------------------------------------------------
    def _target(self) -> asyncio.WriteTransport | None:
        return self.link

    def forward(self, conn: int, buf: bytearray, start: int, end: int) -> None:
        self.send_parts([L.frame_head(conn, end - start), bytes(buf[start:end])])

    # -- from the writer ------------------------------------------------------------------------
    def on_result(self, r: L.Result) -> None:
        entry = self.pending.pop(r.seq, None)
        if entry is None:
            return
        conn, cmd, raw = entry
        if conn.closed:
            return
        if r.code == L.FALLBACK:  # again, whole; before anything that waited behind it
            self.send_parts([L.frame_head(conn.id, len(raw), L.REFRAME), raw])
            conn.put_answered()
            return
        conn.put_answered()
        if cmd.is_oneway:
            return
        if r.msg_id:
            resp = cmd.response(r.code, send_answer_header(r.msg_id, r.queue_id, r.queue_offset))
        else:
            resp = cmd.response(r.code, remark=r.remark or None)
        conn.write(b"".join(_CODEC.send_parts(resp)))

    # -- lifecycle ------------------------------------------------------------------------------
    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    async def sweep(self) -> None:
        """Close connections whose frame has been half-read too long."""
        if self.frame_timeout_s <= 0:
            return
        while True:
            await asyncio.sleep(min(1.0, self.frame_timeout_s / 2))
            now = time.monotonic()
            for conn in list(self.conns.values()):
                if conn.partial_since is not None and \
                        now - conn.partial_since > self.frame_timeout_s:
                    log.info("closing %s: a frame begun %.0f s ago is not whole "
                             "(serverFrameReadTimeoutSeconds)", conn.peer, self.frame_timeout_s)
                    conn.abort(protocol_error=True)


async def _main(listen_fd: int, link_fd: int, settings: SendRules, frame_timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    w = Worker(settings, frame_timeout_s, loop)
    link_sock = socket.socket(fileno=link_fd)
    w.link, _ = await loop.create_unix_connection(lambda: WriterLink(w), sock=link_sock)
    listen_sock = socket.socket(fileno=listen_fd)
    w.server = await loop.create_server(lambda: ClientConn(w), sock=listen_sock, backlog=1024)
    loop.add_signal_handler(signal.SIGTERM, w.done.set)
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # the writer decides when to stop
    sweeper = loop.create_task(w.sweep())
    await w.done.wait()
    sweeper.cancel()
    w.stop_accepting()
    for conn in list(w.conns.values()):
        conn.abort(tell=False)
    await asyncio.sleep(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rocketstore-worker")
    ap.add_argument("--listen-fd", type=int, required=True)
    ap.add_argument("--link-fd", type=int, required=True)
    ap.add_argument("--settings", required=True, help="JSON of send_rule.SendRules")
    ap.add_argument("--frame-timeout", type=float, default=0.0)
    ap.add_argument("--log-level", default="WARNING")
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level, stream=sys.stderr,
                        format=f"%(asctime)s worker[{os.getpid()}] %(levelname)s %(message)s")
    settings = SendRules(**json.loads(a.settings))
    from ..eventloop import run, tune_gc  # uvloop when installed, as the writer
    tune_gc()
    run(_main(a.listen_fd, a.link_fd, settings, a.frame_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
