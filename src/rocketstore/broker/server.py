"""The asyncio side of the broker and the name server: sockets in, ``RemotingCommand`` out.

Theory of operation: one ``_Channel`` (an ``asyncio.Protocol``) per TCP connection feeds bytes to
a sans-IO ``RemotingConnection``. Each whole request becomes its own task, so requests on one
connection run concurrently (a held long-poll never blocks the heartbeat or send behind it) and
responses go out in completion order, matched by ``opaque``. A oneway request gets no answer; an
unknown code gets REQUEST_CODE_NOT_SUPPORTED; a handler error becomes SYSTEM_ERROR with the
error's message, or MESSAGE_ILLEGAL-like codes chosen by the handler.

Bad input never reaches the store: a frame that violates the protocol (garbage, a length over
16 MiB or negative, a header that is not JSON, a stream that ends inside a frame) raises
``RemoteProtocolError`` in the codec, and the channel is aborted at once — that connection only.
A client that floods requests without reading answers is paused once ``MAX_INFLIGHT`` of its
requests are in flight and resumed at half that.

Connection limits (``rocketstore.netlimits``, the same pieces the console and metrics servers
use): a connection over the port's or its client address's cap is closed at once; a sweeper
closes a channel idle for ``serverChannelMaxIdleTimeSeconds`` (one with a held request is not
idle) and one whose frame has been half-read for ``serverFrameReadTimeoutSeconds``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from ..errors import ProtocolError
from ..netlimits import ConnectionClock, ConnectionLimiter, Limits, peer_of
from ..remoting.codes import SEND_REQUEST_CODES, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.connection import CLOSED, NEED_DATA, RemotingConnection
from .send_order import SendOrder

log = logging.getLogger(__name__)
Handler = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]
MAX_INFLIGHT = 1024


class _Channel(asyncio.Protocol):
    def __init__(self, server: "RemotingServer") -> None:
        self.server = server
        self.codec = RemotingConnection()
        self.transport: asyncio.Transport | None = None
        self.peer = "0.0.0.0:0"
        self.inflight: set[asyncio.Task] = set()
        self.paused = False
        self.closed = False
        self.pending: dict[int, asyncio.Future] = {}  # opaque -> answer of a call() to the client
        self._out: list[bytes] = []  # frames written this loop turn, sent by ``_flush``
        self.clock = ConnectionClock()
        self.admitted = False
        self.order: SendOrder[Any, None] = SendOrder()  # this connection's sends (send_order)

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = peer_of(transport.get_extra_info("peername"))
        refused = self.server.limiter.admit(self.host)
        if refused is not None:
            log.warning("closing %s: %s", self.peer, refused)
            self.closed = True
            transport.abort()
            return
        self.admitted = True
        self.server.channels.add(self)

    @property
    def host(self) -> str:
        return self.peer.rsplit(":", 1)[0]

    def data_received(self, data: bytes) -> None:
        self.clock.touched()
        self.codec.receive_data(data)
        done = self._drain_commands()
        if self.order.gathered:
            self.server.local_sends.append(self)
        self.clock.frame_state(self.codec.buffered > 0, done > 0)

    def eof_received(self) -> bool:
        self.codec.receive_data(b"")
        self._drain_commands()
        if self.order.gathered:
            self.server.local_sends.append(self)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.admitted:
            return
        self.admitted = False
        self.server.limiter.release(self.host)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.peer} closed"))
        self.server.channels.discard(self)
        for task in list(self.inflight):  # nobody is left to answer (a held pull, say)
            task.cancel()
        self.server.broker.connection_closed(self)

    # -- commands -------------------------------------------------------------------------------
    def _drain_commands(self) -> int:
        """Hand every whole frame on; how many there were. Plain sends go to the fast path
        (``server.local_sends``) unless a send of this connection is with the send processor:
        the sends after it follow it there, so a connection's sends keep their order."""
        done = 0
        local = self.server.local_sends
        gathering = local is not None and self.order.open
        while not self.closed:
            try:
                cmd = self.codec.next_command()
            except ProtocolError as exc:
                self.server.bad_connections += 1
                log.info("%s: closing %s: %s", self.server.name, self.peer, exc)
                self.abort()
                return done
            if cmd is NEED_DATA or cmd is CLOSED:
                return done
            assert isinstance(cmd, RemotingCommand)
            done += 1
            if cmd.is_response:
                fut = self.pending.pop(cmd.opaque, None)  # else: an answer to a oneway notify
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                continue
            is_send = cmd.code in SEND_REQUEST_CODES
            if gathering and is_send:
                if local.take(self, cmd):
                    self._hold()
                    continue
                gathering = False
            if self.order.gathered:  # the sends gathered before this request go in first
                local.append(self)
            task = asyncio.get_running_loop().create_task(self._handle(cmd))
            self.inflight.add(task)
            self.server.inflight.add(task)
            task.add_done_callback(self._done)
            if is_send:
                self.order.whole += 1
                task.add_done_callback(self._send_done)
            self._hold()

    def _send_done(self, task: asyncio.Task) -> None:
        self.order.whole -= 1

    def _hold(self) -> None:
        """Stop reading while MAX_INFLIGHT requests of this connection are unanswered."""
        if len(self.inflight) + self.order.fast >= MAX_INFLIGHT and not self.paused \
                and self.transport:
            self.paused = True
            self.transport.pause_reading()

    def fast_put_answered(self) -> None:
        self.order.answered()
        self._release()

    def _done(self, task: asyncio.Task) -> None:
        self.inflight.discard(task)
        self.server.inflight.discard(task)
        self._release()

    def _release(self) -> None:
        if self.paused and len(self.inflight) + self.order.fast <= MAX_INFLIGHT // 2 \
                and not self.closed:
            self.paused = False
            if self.transport:
                self.transport.resume_reading()

    async def _handle(self, cmd: RemotingCommand) -> None:
        handler = self.server.handlers.get(cmd.code)
        try:
            if handler is None:  # logged as RocketMQ does (" request type N not supported")
                log.info("%s: request type %s not supported", self.server.name, cmd.code)
                resp = cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                    remark=f" request type {cmd.code} not supported")
            else:
                resp = await handler(self, cmd)
        except asyncio.CancelledError:
            return
        except ValueError as exc:
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except Exception as exc:  # a bug or a store failure: answer, log, keep serving
            log.exception("%s: request %s failed", self.server.name, cmd.code)
            resp = cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
        if resp is None or cmd.is_oneway:
            return
        self.write(resp)

    def write(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd``'s frame; all frames queued in one loop turn go out in one write (a
        client with many requests in flight on one connection — RocketMQ's Java client — gets
        its answers in one syscall instead of one each)."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        parts = self.codec.send_parts(cmd)
        if self._out:
            self._out.extend(parts)
            return
        self._out = parts
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        parts, self._out = self._out, []
        if parts and not self.closed and self.transport is not None \
                and not self.transport.is_closing():
            self.clock.touched()
            self.transport.writelines(parts)

    def notify(self, cmd: RemotingCommand) -> None:
        """Send a server-initiated (oneway) request to this client."""
        self.write(cmd)

    async def call(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a server-initiated request and wait for the client's answer (raises
        ``ConnectionError`` when the connection is gone, ``TimeoutError`` after ``timeout_s``)."""
        if self.closed:
            raise ConnectionError(f"connection to {self.peer} is closed")
        fut = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        try:
            self.write(cmd)
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self.pending.pop(cmd.opaque, None)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class RemotingServer:
    def __init__(self, broker: Any, handlers: dict[int, Handler], name: str,
                 limits: Limits | None = None) -> None:
        self.broker = broker
        self.handlers = handlers
        self.name = name
        self.limits = limits or Limits.from_config(getattr(broker, "config", None))
        self.limiter = ConnectionLimiter(self.limits, name)
        self._sweeper: asyncio.Task | None = None
        self.channels: set[_Channel] = set()
        self.inflight: set[asyncio.Task] = set()
        self.local_sends: Any = None  # workers.local.LocalSends: plain sends' fast path
        self.bad_connections = 0
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Channel(self), host, port,
                                                reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = loop.create_task(self._sweep(), name=f"{self.name}-sweeper")

    def start_without_socket(self, port: int) -> None:
        """Serve connections that worker processes accept (``workers.pool``): no listening
        socket here, the sweeper runs, ``attach`` makes each connection's channel."""
        self.port = port
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(),
                                                               name=f"{self.name}-sweeper")

    def attach(self, transport: Any) -> "_Channel":
        """A channel over ``transport`` (a connection another process holds)."""
        ch = _Channel(self)
        ch.connection_made(transport)
        return ch

    async def _sweep(self) -> None:
        """Close idle channels and channels with a stalled frame."""
        limits = self.limits
        while True:
            await asyncio.sleep(limits.sweep_interval_s)
            now = time.monotonic()
            for ch in list(self.channels):
                why = ch.clock.verdict(now, limits, busy=bool(ch.inflight or ch.order.fast))
                if why is None or ch.closed:
                    continue
                if why == "idle":
                    self.limiter.closed_idle += 1
                    log.info("%s: closing %s: idle for %.0f s (serverChannelMaxIdleTimeSeconds)",
                             self.name, ch.peer, limits.idle_s)
                else:
                    self.limiter.closed_stalled += 1
                    log.info("%s: closing %s: a frame begun %.0f s ago is not whole "
                             "(serverFrameReadTimeoutSeconds)", self.name, ch.peer,
                             limits.frame_timeout_s)
                ch.abort()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the requests in flight to be answered."""
        t0 = time.monotonic()
        pending = set(self.inflight)
        if pending and timeout_s > 0:
            await asyncio.wait(pending, timeout=timeout_s)
        if self.local_sends is not None:
            await self.local_sends.drain(timeout_s - (time.monotonic() - t0))

    async def close(self) -> None:
        for t in list(self.inflight):
            t.cancel()
        for ch in list(self.channels):
            if ch.transport is not None:
                ch.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
