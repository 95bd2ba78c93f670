"""What the console and metrics HTTP servers check before a request reaches a page.

- **Host allow-list.** A page on another site can reach ``127.0.0.1`` through DNS rebinding (its
  name resolves to us, its scripts then read our answers as its own origin); the ``Host`` header
  still carries the other site's name. Every request whose ``Host`` is not one of ``127.0.0.1``,
  ``localhost``, ``[::1]``, the bind address or ``httpAllowedHosts`` (comma-separated) is
  answered 400 and goes no further.
- **Connection limits** (``rocketstore.netlimits``, as on the remoting ports): a connection over
  the port's or its client address's cap is closed at once; one that has not sent a whole
  request within ``serverFrameReadTimeoutSeconds`` of opening (or of its last answer) is closed.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any, Callable, Iterable

from ..netlimits import ConnectionLimiter, Limits

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts(bind_host: str, extra: str | Iterable[str] | None = None) -> frozenset[str]:
    """The ``Host`` names a server bound to ``bind_host`` answers."""
    names = set(LOOPBACK_HOSTS)
    if bind_host and bind_host not in ("0.0.0.0", "::", ""):
        names.add(f"[{bind_host}]" if ":" in bind_host else bind_host)
    if isinstance(extra, str):
        extra = extra.split(",")
    for name in extra or ():
        name = name.strip().lower()
        if name:
            names.add(f"[{name}]" if ":" in name and not name.startswith("[") else name)
    return frozenset(n.lower() for n in names)


def host_name(header: str | None) -> str | None:
    """The name part of a ``Host`` header (port dropped, IPv6 kept in brackets), lower case."""
    if not header:
        return None
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[:end + 1] if end > 0 else None
    return h.split(":", 1)[0] or None


def refusal(header: str | None) -> bytes:
    return (f"Host {header!r} is not one this server answers (add it to httpAllowedHosts)\n"
            .encode("utf-8", "replace"))


class HostCheck:
    """ASGI middleware: requests whose ``Host`` is not allowed get 400."""

    def __init__(self, app: Any, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            header = next((v.decode("latin-1") for k, v in scope.get("headers") or ()
                           if k == b"host"), None)
            if host_name(header) not in self.allowed:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = refusal(header)
                await send({"type": "http.response.start", "status": 400, "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def host_check_wsgi(app: Callable, allowed: frozenset[str]) -> Callable:
    """The same check for a WSGI app (the metrics server)."""
    def checked(environ: dict, start_response: Callable) -> Any:
        header = environ.get("HTTP_HOST")
        if host_name(header) not in allowed:
            body = refusal(header)
            start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8"),
                                               ("Content-Length", str(len(body)))])
            return [body]
        return app(environ, start_response)
    return checked


def limited_protocol(base: type, limiter: ConnectionLimiter, limits: Limits) -> type:
    """A subclass of uvicorn's HTTP protocol class ``base`` that keeps ``limiter``'s counts and
    closes a connection whose next request is not whole within ``limits.frame_timeout_s``."""
    class Limited(base):  # type: ignore[misc, valid-type]
        _rs_admitted = False
        _rs_timer: asyncio.TimerHandle | None = None
        _rs_host = "?"

        def connection_made(self, transport: Any) -> None:
            peer = transport.get_extra_info("peername")
            self._rs_host = peer[0] if peer else "?"
            refused = limiter.admit(self._rs_host)
            if refused is not None:
                log.warning("closing %s: %s", self._rs_host, refused)
                transport.abort()
                return
            self._rs_admitted = True
            super().connection_made(transport)
            self._rs_arm()

        def _rs_arm(self) -> None:
            if self._rs_timer is not None:
                self._rs_timer.cancel()
            self._rs_timer = None
            if limits.frame_timeout_s > 0:
                self._rs_cycle = self.cycle
                self._rs_timer = self.loop.call_later(limits.frame_timeout_s, self._rs_check)

        def _rs_check(self) -> None:
            self._rs_timer = None
            if self.transport is None or self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is self._rs_cycle and (cycle is None or cycle.response_complete):
                limiter.closed_stalled += 1
                log.info("closing %s: no whole request in %.0f s (serverFrameReadTimeoutSeconds)",
                         self._rs_host, limits.frame_timeout_s)
                self.transport.abort()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._rs_arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._rs_admitted:
                return
            self._rs_admitted = False
            if self._rs_timer is not None:
                self._rs_timer.cancel()
                self._rs_timer = None
            limiter.release(self._rs_host)
            super().connection_lost(exc)
    return Limited


def limited_wsgi_server(app: Callable, host: str, port: int, limiter: ConnectionLimiter,
                        limits: Limits) -> Any:
    """A threaded WSGI server (prometheus-client's kind) with the same limits: a connection over
    the caps is closed at once, a stalled read times out after ``limits.frame_timeout_s``."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Handler(WSGIRequestHandler):
        timeout = limits.frame_timeout_s or None  # socket timeout of each read and write
        _headers_done = False

        def setup(self) -> None:
            super().setup()
            self._watchdog = None
            if limits.frame_timeout_s > 0:  # the whole request, not each read (a trickle)
                self._watchdog = threading.Timer(limits.frame_timeout_s, self._stalled)
                self._watchdog.daemon = True
                self._watchdog.start()

        def _stalled(self) -> None:
            if not self._headers_done:
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def parse_request(self) -> bool:
            ok = super().parse_request()
            self._headers_done = True
            return ok

        def finish(self) -> None:
            if self._watchdog is not None:
                self._watchdog.cancel()
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    hosts: dict[Any, str] = {}

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        request_queue_size = 128  # socketserver's 5 would stall connects under load

        def handle_error(self, request: Any, client_address: Any) -> None:
            import sys
            exc = sys.exc_info()[1]
            if isinstance(exc, (TimeoutError, ConnectionError)):
                limiter.closed_stalled += isinstance(exc, TimeoutError)
                log.info("closing %s: %s", client_address[0],
                         "no whole request in time (serverFrameReadTimeoutSeconds)"
                         if isinstance(exc, TimeoutError) else exc)
                return
            log.exception("metrics: request from %s failed", client_address[0])

        def verify_request(self, request: Any, client_address: Any) -> bool:
            refused = limiter.admit(client_address[0])
            if refused is not None:
                log.warning("closing %s: %s", client_address[0], refused)
                return False
            hosts[request] = client_address[0]  # released by shutdown_request
            return True

        def shutdown_request(self, request: Any) -> None:
            host = hosts.pop(request, None)
            try:
                super().shutdown_request(request)
            finally:
                if host is not None:
                    limiter.release(host)

    return make_server(host, port, app, Server, handler_class=Handler)


__all__ = ["allowed_hosts", "host_name", "HostCheck", "host_check_wsgi", "limited_protocol",
           "limited_wsgi_server", "LOOPBACK_HOSTS"]
