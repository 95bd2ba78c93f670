"""The writer's side of the multi-process broker: the workers, their links and the put fast path.

Theory of operation: ``WorkerPool.start`` binds listenPort once and starts N worker processes
(``worker``), each inheriting the listening socket and one end of its own Unix socket pair.
The writer never accepts on listenPort itself: it holds the socket only so a restarted worker
can inherit it again. Each link is an asyncio protocol here (``Link``):

* OPEN makes a ``_Channel`` of the broker's ``RemotingServer`` over a ``VirtualTransport``, so
  every processor, the connection limits, the idle sweeper, consumer and producer tables, the
  transaction check-back and NOTIFY_CONSUMER_IDS_CHANGED work on a worker's connection exactly
  as on one of our own; FRAME feeds that channel's codec; what the channel writes goes back
  as FRAME; CLOSE is the connection's end either way.
* PUT is the fast path (``FastPuts``): the send rule's topic checks (``send_rule.check_put_topic``,
  auto-creation included), the properties parsed for the dispatch; the PUTs of one read of the
  link (up to ``PUTS_PER_APPEND``) are then appended together by ``Puts.put_encoded_then`` —
  one lock, one dispatch feed item and one wake-up for all, inline on this loop when the append
  can be done at once, which is the common case, else through the put thread / group commit /
  replica wait. Each PUT keeps its own RESULT (queue offset, msgId, its own durability offset);
  the RESULTs go back in the same loop turn as every other answer of that read. The PUTs
  gathered are appended before any other kind of message of the read is handled, so a
  connection's sends keep their order. Anything the fast path does not
  take (a refused topic, a queue id out of range) is answered FALLBACK, and the worker sends the
  frame again to be handled whole (REFRAME), so every error answer has one implementation.
* Order on a connection: while a send of a connection is with the send processor (a batch, a
  delayed or transactional send, a FALLBACK) or on its way back as REFRAME, that connection's
  later PUTs are answered FALLBACK too and follow it; the worker holds a send it must forward
  whole until that connection's PUTs in flight are answered. So a client that pipelines mixed
  sends on one connection gets them stored in the order it sent them, as with one process.
  Both ends keep these counts in the connection's ``send_order.SendOrder``.

A worker that exits is restarted (at most once a second): its connections are closed on the
broker side like any closed connection; puts it had sent and the writer appended stay appended
(their clients see the connection drop and may retry, as with any broker). The pool stops the
workers first at shutdown: STOP (no more accepting), the puts in flight answered, then the links
close and each worker closes its clients and exits.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, cast

from ...format.message import EncodedMessage, string_to_properties
from ...remoting.codes import ResponseCode
from ...store.results import PutMessageResult
from ..services.puts import Done
from ..send_rule import (SendRules, TopicLookup, check_put_topic, error_remark, put_code,
                         put_failure_remark, send_topic, status_ok)
from . import link as L
from .outbox import Outbox

if TYPE_CHECKING:
    from ..contexts import SendContext
    from ..server import RemotingServer, _Channel

log = logging.getLogger(__name__)
RESTART_DELAY_S = 1.0


class VirtualTransport:
    """What a ``_Channel`` writes to, for a connection a worker holds."""

    def __init__(self, link: "Link", conn: int, peer: str) -> None:
        self.link = link
        self.conn = conn
        self.peer = peer
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            host, _, port = self.peer.rpartition(":")
            return (host, int(port or 0))
        return default

    def writelines(self, parts: list[bytes]) -> None:
        if not self.closing:
            data = b"".join(parts)
            self.link.send_parts([L.frame_head(self.conn, len(data)), data])

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.close()

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.link.send(L.close_msg(self.conn))
        self.link.loop.call_soon(self.link.closed_here, self.conn)

    def pause_reading(self) -> None:  # the channel's MAX_INFLIGHT: the worker stops reading
        if not self.closing:
            self.link.send(L.conn_msg(L.PAUSE, self.conn))

    def resume_reading(self) -> None:
        if not self.closing:
            self.link.send(L.conn_msg(L.RESUME, self.conn))


PUTS_PER_APPEND = 64  # at most this many PUTs of one read in one append (bounds the batch)


class Link(Outbox, asyncio.Protocol):
    """The writer's end of one worker's link."""

    def __init__(self, pool: "WorkerPool", index: int) -> None:
        self.pool = pool
        self.index = index
        self.loop = pool.loop
        self.decoder = L.LinkDecoder()
        self.channels: dict[int, _Channel] = {}
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self.lost = asyncio.Event()
        self.puts: list[tuple[EncodedMessage, Done]] = []  # gathered this read: FastPuts.append

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)

    def _target(self) -> asyncio.WriteTransport | None:
        return self.transport

    def data_received(self, data: bytes) -> None:
        try:
            msgs = self.decoder.feed(data)
        except L.LinkError as exc:
            log.error("worker %d: link broken (%s): restarting it", self.index, exc)
            if self.transport is not None:
                self.transport.abort()
            return
        pool = self.pool
        fast = pool.fast
        for kind, payload in msgs:
            if kind == L.PUT:
                fast.on_put(self, L.parse_put(payload))
                if len(self.puts) >= PUTS_PER_APPEND:
                    fast.append(self.take_puts())
                continue
            if self.puts:  # the sends before this message go in first
                fast.append(self.take_puts())
            if kind == L.FRAME or kind == L.REFRAME:
                ch = self.channels.get(L.parse_conn(payload))
                if ch is not None and kind == L.REFRAME:
                    ch.order.reframed()
                if ch is not None and not ch.closed:
                    ch.data_received(payload[L.CONN.size:])
            elif kind == L.OPEN:
                conn, peer = L.parse_open(payload)
                ch = pool.server.attach(VirtualTransport(self, conn, peer))
                if ch.admitted:
                    self.channels[conn] = ch
            elif kind == L.CLOSE:
                conn, bad = L.parse_close(payload)
                if bad:
                    pool.server.bad_connections += 1
                ch = self.channels.pop(conn, None)
                if ch is not None:  # after the requests of this read have started, as a
                    _closing(ch)  # socket's close follows its last data
                    self.loop.call_soon(ch.connection_lost, None)
        if self.puts:
            fast.append(self.take_puts())

    def take_puts(self) -> list[tuple[EncodedMessage, Done]]:
        puts, self.puts = self.puts, []
        return puts

    def closed_here(self, conn: int) -> None:
        """The broker closed a connection (idle, a limit, a bad frame): its channel ends."""
        ch = self.channels.pop(conn, None)
        if ch is not None:
            ch.connection_lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for conn in list(self.channels):
            ch = self.channels.pop(conn)
            _closing(ch)
            ch.connection_lost(None)
        self.lost.set()


def _closing(ch: _Channel) -> None:
    """A worker's connection is closing: its channel writes nothing more."""
    if isinstance(ch.transport, VirtualTransport):
        ch.transport.closing = True


class FastPuts:
    """PUT → the store → RESULT, with ``processors.send``'s checks (see the module text)."""

    def __init__(self, ctx: SendContext, observe: Callable[[float], None] | None = None) -> None:
        self.ctx = ctx
        self.topics: TopicLookup = partial(send_topic, ctx.topics, ctx.config)
        self.observe = observe
        self.in_flight = 0
        self.taken = 0  # sends the fast path put (rocketstore_fast_sends_total)
        self.idle = asyncio.Event()
        self.idle.set()

    def check(self, ch: _Channel, p: L.Put) -> EncodedMessage | None:
        """The record to append for a worker's ``p``, counted in flight; None when the send
        must be handled whole (the send rule's topic checks refuse it, undecodable
        properties)."""
        ch.clock.touched()
        if not check_put_topic(self.topics, p.topic, p.queue_id, p.default_queue_nums):
            return None
        try:
            props = string_to_properties(p.record[p.props_off:].decode())
        except UnicodeDecodeError:
            return None
        self.admit()
        return EncodedMessage(p.record, p.store_ts_pos, p.topic, p.queue_id, p.sys_flag, props)

    def admit(self) -> None:
        """One more put taken by the fast path, in flight until ``outcome``."""
        self.in_flight += 1
        self.taken += 1
        self.idle.clear()

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every put taken is answered."""
        if self.in_flight and timeout_s > 0:
            try:
                await asyncio.wait_for(self.idle.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass

    def on_put(self, link: Link, p: L.Put) -> None:
        ch = link.channels.get(p.conn)
        if ch is None or ch.closed:  # nothing stored, the worker forgets the send
            link.send(L.result_msg(p.seq, L.FALLBACK))
            return
        # behind a send of this connection that the send processor has, or one the worker is
        # sending again whole: this one goes that way too, so the connection keeps its order
        rec = self.check(ch, p) if ch.order.open else None
        if rec is None:
            ch.order.reforwards += 1  # the worker sends the frame again (REFRAME)
            link.send(L.result_msg(p.seq, L.FALLBACK))
            return
        link.puts.append((rec, partial(self._done, link, p, time.perf_counter())))

    def append(self, gathered: list[tuple[EncodedMessage, Done]]) -> None:
        """Append the records gathered (one append; an answer each)."""
        dones = [done for _, done in gathered]
        try:
            self.ctx.puts.put_encoded_then([rec for rec, _ in gathered], dones)
        except Exception as exc:  # a store failure: answered as the send processor would
            log.exception("fast put failed")
            for done in dones:
                done(None, exc)

    def outcome(self, topic: str, body_len: int, t0: float, r: PutMessageResult | None,
                exc: BaseException | None) -> tuple[int, str, str]:
        """A put answered: (response code, msgId or "", remark); counted in the stats."""
        self.in_flight -= 1
        if not self.in_flight:
            self.idle.set()
        if exc is not None or r is None:
            return ResponseCode.SYSTEM_ERROR, "", error_remark(
                exc if exc is not None else RuntimeError("no result"))
        code = put_code(r.status)
        ok = status_ok(code)
        self.ctx.stats.record_put(topic, 1, body_len, ok)
        if self.observe is not None:
            self.observe(time.perf_counter() - t0)
        if ok:
            return code, r.msg_id or "", ""
        return code, "", put_failure_remark(r.status, r.error)

    def _done(self, link: Link, p: L.Put, t0: float, r: PutMessageResult | None,
              exc: BaseException | None) -> None:
        code, msg_id, remark = self.outcome(p.topic, p.body_len, t0, r, exc)
        if msg_id and r is not None:
            link.send(L.result_msg(p.seq, code, p.queue_id, r.queue_offset, msg_id))
        else:
            link.send(L.result_msg(p.seq, code, remark=remark))


class WorkerPool:
    def __init__(self, server: RemotingServer, send_ctx: SendContext, count: int,
                 frame_timeout_s: float,
                 observe: Callable[[float], None] | None = None) -> None:
        self.server = server
        self.count = count
        self.settings: SendRules | None = None
        self.frame_timeout_s = frame_timeout_s
        self.loop = asyncio.get_running_loop()
        self.fast = FastPuts(send_ctx, observe)
        self.sock: socket.socket | None = None
        self.links: list[Link | None] = [None] * count
        self.procs: list[asyncio.subprocess.Process | None] = [None] * count
        self.restarts = 0
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def bind(self, host: str, port: int) -> int:
        """Bind and listen on ``host:port`` (connections queue until the workers accept);
        the bound port."""
        self.sock = socket.create_server((host, port), backlog=1024, reuse_port=False)
        self.sock.set_inheritable(True)
        bound: int = self.sock.getsockname()[1]
        return bound

    async def start_workers(self, settings: SendRules) -> None:
        self.settings = settings
        for i in range(self.count):
            await self._spawn(i)
        for i in range(self.count):
            self._tasks.append(self.loop.create_task(self._supervise(i), name=f"worker-{i}"))

    async def _spawn(self, i: int) -> None:
        assert self.sock is not None and self.settings is not None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        lfd, kfd = self.sock.fileno(), theirs.fileno()
        theirs.set_inheritable(True)
        cmd = [sys.executable, "-m", "rocketstore.broker.workers.worker", "--listen-fd",
               str(lfd), "--link-fd", str(kfd), "--settings",
               json.dumps(self.settings.to_json()), "--frame-timeout", str(self.frame_timeout_s),
               "--log-level", logging.getLevelName(logging.getLogger().getEffectiveLevel())]
        env = dict(os.environ)
        env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
        self.procs[i] = await asyncio.create_subprocess_exec(*cmd, pass_fds=(lfd, kfd), env=env)
        theirs.close()
        _, link = await self.loop.create_unix_connection(partial(Link, self, i), sock=mine)
        self.links[i] = link

    async def _supervise(self, i: int) -> None:
        while not self._stopping:
            proc = self.procs[i]
            assert proc is not None
            rc = await proc.wait()
            link = self.links[i]
            if link is not None and link.transport is not None:
                link.transport.close()
                await link.lost.wait()
            if self._stopping:
                return
            log.error("worker process %d (pid %d) exited with %s: restarting it", i, proc.pid,
                      rc)
            self.restarts += 1
            await asyncio.sleep(RESTART_DELAY_S)
            if self._stopping:
                return
            await self._spawn(i)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.returncode is None]

    def describe(self) -> dict[str, Any]:
        """For ``status``, the console and /metrics."""
        return {"configured": self.count, "live": len(self.pids()), "pids": self.pids(),
                "restarts": self.restarts,
                "connections": sum(len(link.channels) for link in self.links if link is not None)}

    def stop_accepting(self) -> None:
        self._stopping = True
        for link in self.links:
            if link is not None:
                link.send(L.message(L.STOP))

    async def drain(self, timeout_s: float) -> None:
        await self.fast.drain(timeout_s)

    async def close(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        for link in self.links:
            if link is not None:
                link._flush()
                if link.transport is not None:
                    link.transport.close()
        for proc in self.procs:
            if proc is None or proc.returncode is not None:
                continue
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
