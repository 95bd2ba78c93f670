"""Connection limits shared by every server of ``rocketstore serve`` (remoting, console,
metrics): how many connections a port takes, how many one client address may hold, when an idle
connection is closed and how long a request may take to arrive whole.

The pieces know nothing of the server they guard, so each server (the asyncio remoting server, a
worker process of its own, uvicorn's protocol, a threaded WSGI server) only calls ``admit`` when
a connection opens, ``release`` when it closes, and asks ``ConnectionClock`` whether to close it:

- ``ConnectionLimiter``: a count per port and per client address, thread-safe; ``admit`` answers
  None (taken) or the reason it refuses.
- ``ConnectionClock``: one connection's last activity and when its current frame (or request)
  began; ``verdict(now, limits, busy)`` says "idle", "stalled" or None.

Defaults: ``serverChannelMaxIdleTimeSeconds`` 120 (RocketMQ's key and value), a frame that stalls
for 30 s, 4096 connections a port, 1024 per client address (``broker.conf`` keys in README
"Security").
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_connections: int = 4096  # per listening port
    max_per_client: int = 1024  # per client address on one port
    idle_s: float = 120.0  # no byte either way for this long: closed (0 = never)
    frame_timeout_s: float = 30.0  # a frame (request) begun and not whole after this: closed

    @classmethod
    def from_config(cls, config: object) -> "Limits":
        """The limits a ``BrokerConfig`` names (defaults for what it lacks)."""
        d = cls()
        return cls(int(getattr(config, "server_max_connections", d.max_connections)),
                   int(getattr(config, "server_max_connections_per_client", d.max_per_client)),
                   float(getattr(config, "server_channel_max_idle_s", d.idle_s)),
                   float(getattr(config, "server_frame_read_timeout_s", d.frame_timeout_s)))

    @property
    def sweep_interval_s(self) -> float:
        """How often a server should look for connections to close."""
        spans = [s for s in (self.idle_s, self.frame_timeout_s) if s > 0]
        return max(0.05, min([1.0, *(s / 4 for s in spans)]))


class ConnectionLimiter:
    """Open connections of one port, in total and per client address."""

    def __init__(self, limits: Limits, name: str = "server") -> None:
        self.limits = limits
        self.name = name
        self._lock = threading.Lock()
        self._per: dict[str, int] = {}
        self.total = 0
        self.refused = 0
        self.closed_idle = 0
        self.closed_stalled = 0

    def admit(self, host: str) -> str | None:
        """Count a new connection from ``host``; the reason when it must be refused instead."""
        with self._lock:
            if self.total >= self.limits.max_connections:
                self.refused += 1
                return (f"{self.name}: {self.total} connections open, the most this port takes "
                        f"(serverMaxConnections={self.limits.max_connections})")
            n = self._per.get(host, 0)
            if n >= self.limits.max_per_client:
                self.refused += 1
                return (f"{self.name}: {host} holds {n} connections, the most one client may "
                        f"(serverMaxConnectionsPerClient={self.limits.max_per_client})")
            self._per[host] = n + 1
            self.total += 1
            return None

    def release(self, host: str) -> None:
        with self._lock:
            n = self._per.get(host, 0)
            if n <= 1:
                self._per.pop(host, None)
            else:
                self._per[host] = n - 1
            self.total = max(0, self.total - 1)

    def count(self, host: str) -> int:
        with self._lock:
            return self._per.get(host, 0)


class ConnectionClock:
    """When one connection last moved a byte, and since when a frame has been half-read."""

    __slots__ = ("last_activity", "partial_since")

    def __init__(self, now: float | None = None) -> None:
        self.last_activity = time.monotonic() if now is None else now
        self.partial_since: float | None = None

    def touched(self, now: float | None = None) -> None:
        self.last_activity = time.monotonic() if now is None else now

    def frame_state(self, partial: bool, completed: bool, now: float | None = None) -> None:
        """After reading: ``partial`` (a frame is half-read), ``completed`` (one or more frames
        were finished by this read, so a half-read one left over is a new one)."""
        if not partial:
            self.partial_since = None
        elif completed or self.partial_since is None:
            self.partial_since = time.monotonic() if now is None else now

    def verdict(self, now: float, limits: Limits, busy: bool = False) -> str | None:
        """"stalled", "idle" or None. ``busy``: the server still owes this connection an answer
        (a held long-poll), which is not idleness."""
        if limits.frame_timeout_s > 0 and self.partial_since is not None and \
                now - self.partial_since > limits.frame_timeout_s:
            return "stalled"
        if limits.idle_s > 0 and not busy and now - self.last_activity > limits.idle_s:
            return "idle"
        return None


def peer_of(peername: object) -> str:
    """``host:port`` of a socket's peer name, IPv4-mapped and loopback IPv6 shown as IPv4 (the
    address a born host and the per-client caps use)."""
    if not peername:
        return "0.0.0.0:0"
    host, port = peername[0], peername[1]  # type: ignore[index]
    if host in ("::1", "::ffff:127.0.0.1"):
        host = "127.0.0.1"
    elif host.startswith("::ffff:"):
        host = host[7:]
    return f"{host}:{port}"


__all__ = ["Limits", "ConnectionLimiter", "ConnectionClock", "peer_of"]
