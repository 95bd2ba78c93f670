"""``GrpcProxy``: the gRPC listener, with a lifecycle, over the broker's pop service.

Theory of operation: the pop state and its revive task are the broker's (``pieces.pop_service``,
shared with the remoting door); given pieces without one, ``start()`` makes its own, replays the
revive queue and starts its revive task, and ``stop()`` stops it. ``start()`` starts a
``grpc.aio`` server on the broker's event loop; ``stop()`` stops accepting and gives in-flight
calls ``grace_s`` (held receives are released by the broker's ``PullHoldService.wake_all``).
The broker calls ``stop()`` before it closes the store.
"""
from __future__ import annotations

import logging
from typing import Any

from ..broker.services.pop import PopService
from .consume import Consumption
from .pieces import BrokerPieces
from .protocol import services
from .service import MessagingService

log = logging.getLogger(__name__)
MAX_INBOUND_MESSAGE_BYTES = 130 * 1024 * 1024  # the 5.x proxy's grpcMaxInboundMessageSize


class GrpcProxy:
    def __init__(self, pieces: BrokerPieces, host: str, port: int) -> None:
        self.p = pieces
        self.host = host
        self.port = port
        self._own_pop = pieces.pop_service is None
        self.pop_service = pieces.pop_service or PopService(
            store=pieces.store, topics=pieces.topics, offsets=pieces.offsets,
            config=pieces.config, put_message=pieces.put_message, run=pieces.run,
            subgroups=pieces.subgroups, filters=pieces.filters)
        self.pop = self.pop_service.pop
        self.consumption = Consumption(pieces, self.pop_service)
        self.service = MessagingService(pieces, self.consumption, lambda: self.port)
        self._server: Any = None

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        import grpc

        if self._own_pop:
            await self.p.run(self.pop_service.open)
        interceptors = []
        if self.p.acl is not None:  # aclEnable: every call signed and checked, as the 5.x proxy
            from .acl import AclInterceptor
            interceptors.append(AclInterceptor(
                self.p.acl, getattr(self.p.config, "acl_signature_window_s", 900)))
        idle_s = float(getattr(self.p.config, "server_channel_max_idle_s", 120) or 0)
        self._server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
            # an HTTP/2 connection without an open call for this long is closed (GOAWAY), as a
            # remoting channel is after serverChannelMaxIdleTimeSeconds
            *([("grpc.max_connection_idle_ms", int(idle_s * 1000))] if idle_s > 0 else [])])
        services.add_MessagingServiceServicer_to_server(self.service, self._server)
        try:
            bound = self._server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.host}:{self.port} for gRPC: {exc}") from exc
        if not bound:
            raise OSError(f"cannot listen on {self.host}:{self.port} for gRPC")
        self.port = bound
        await self._server.start()
        if self._own_pop:
            self.pop_service.start()
        log.info("gRPC (RocketMQ 5.x) listening on %s:%s", self.host, self.port)

    async def stop(self, grace_s: float = 2.0) -> None:
        if self._server is not None:
            self.service.close_streams()
            await self._server.stop(grace_s)
            self._server = None
        if self._own_pop:
            await self.pop_service.stop()
