"""The client's asyncio transport: one TCP connection, many concurrent requests.

Theory of operation: ``RemotingClient`` wraps a ``RemotingConnection`` (the sans-IO codec) in an
``asyncio.Protocol``. ``invoke`` gives the request the next opaque, parks a future in a dict keyed
by opaque and writes the frame; responses may come back in any order and resolve their future
(RocketMQ's ``responseTable``, not a FIFO). Requests the server initiates (for instance
NOTIFY_CONSUMER_IDS_CHANGED) go to the ``on_request`` callback. When the connection drops, every
pending future fails with ``ConnectionError`` and the pool opens a new connection next time.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from ..errors import BrokerError, ProtocolError
from ..remoting.codes import ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.connection import CLOSED, NEED_DATA, RemotingConnection


def parse_addrs(spec: str, what: str = "name server") -> list[str]:
    """``"h1:9876;h2:9876"`` (commas also accepted) → the addresses; ``ValueError`` saying
    which one is not HOST:PORT with a port 1 to 65535."""
    addrs = [a.strip() for a in (spec or "").replace(";", ",").split(",") if a.strip()]
    if not addrs:
        raise ValueError(f"no {what} address given")
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{what} address {a!r}: want HOST:PORT with a port 1 to 65535, "
                             "e.g. 127.0.0.1:9876")
    return addrs


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, owner: "RemotingClient") -> None:
        self.owner = owner
        self.codec = RemotingConnection()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.owner._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.codec.receive_data(data)
        while True:
            try:
                cmd = self.codec.next_command()
            except ProtocolError as exc:
                self.owner._fail(ConnectionError(f"{self.owner.addr}: {exc}"))
                if self.owner._transport is not None:
                    self.owner._transport.abort()
                return
            if cmd is NEED_DATA or cmd is CLOSED:
                return
            assert isinstance(cmd, RemotingCommand)
            if cmd.is_response:
                fut = self.owner._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
            elif self.owner.on_request is not None:
                try:
                    self.owner.on_request(cmd)
                except Exception:
                    pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._fail(ConnectionError(f"{self.owner.addr}: connection closed"
                                         + (f" ({exc})" if exc else "")))


def _expire(fut: asyncio.Future, addr: str, code: int, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"{addr}: no answer to request {code} "
                                       f"within {timeout:.1f}s"))


class RemotingClient:
    def __init__(self, addr: str, on_request: Callable[[RemotingCommand], None] | None = None,
                 rpc_hook: Callable[[RemotingCommand], object] | None = None):
        self.addr = addr
        self.on_request = on_request
        self.rpc_hook = rpc_hook  # e.g. SessionCredentials.sign: called on each request sent
        self._transport: asyncio.Transport | None = None
        self._protocol: _ClientProtocol | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self.closed = False

    async def connect(self, timeout: float = 3.0) -> None:
        host, _, port = self.addr.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            _, self._protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _ClientProtocol(self), host, int(port)), timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to {self.addr}: {exc or 'timeout'}") from exc

    @property
    def alive(self) -> bool:
        return not self.closed and self._transport is not None and not self._transport.is_closing()

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    def _write(self, cmd: RemotingCommand) -> None:
        if not self.alive or self._protocol is None:
            raise ConnectionError(f"{self.addr}: not connected")
        if self.rpc_hook is not None and not cmd.is_response:
            self.rpc_hook(cmd)
        self._transport.writelines(self._protocol.codec.send_parts(cmd))  # type: ignore[union-attr]

    async def invoke(self, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[cmd.opaque] = fut
        # a timer instead of asyncio.wait_for: no extra task per request on the hot path
        timer = loop.call_later(timeout, _expire, fut, self.addr, cmd.code, timeout)
        try:
            self._write(cmd)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(cmd.opaque, None)

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        self._write(cmd)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(ConnectionError(f"{self.addr}: closed by us"))


class ConnectionPool:
    """One lazily opened, automatically reopened connection per address; a request the server
    initiates goes to ``on_request(cmd, addr)``."""

    def __init__(self, on_request: Callable[[RemotingCommand, str], None] | None = None,
                 rpc_hook: Callable[[RemotingCommand], object] | None = None) -> None:
        self.on_request = on_request
        self.rpc_hook = rpc_hook
        self._clients: dict[str, RemotingClient] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, addr: str) -> RemotingClient:
        c = self._clients.get(addr)
        if c is not None and c.alive:
            return c
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            c = self._clients.get(addr)
            if c is None or not c.alive:
                handler = self.on_request
                c = RemotingClient(addr, None if handler is None else
                                   (lambda cmd, a=addr: handler(cmd, a)), self.rpc_hook)
                await c.connect()
                self._clients[addr] = c
        return c

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        return await (await self.get(addr)).invoke(cmd, timeout)

    async def invoke_ok(self, addr: str, cmd: RemotingCommand, timeout: float = 5.0,
                        ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """``invoke`` that raises ``BrokerError`` unless the response code is in ``ok``."""
        resp = await self.invoke(addr, cmd, timeout)
        if resp.code not in ok:
            raise BrokerError(resp.code, resp.remark)
        return resp

    async def oneway(self, addr: str, cmd: RemotingCommand) -> None:
        (await self.get(addr)).invoke_oneway(cmd)

    def close(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()
