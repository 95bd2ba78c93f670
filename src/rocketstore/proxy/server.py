"""``GrpcProxy``: the gRPC listener, the pop state and the revive service, with a lifecycle.

Theory of operation: ``start()`` replays the revive queue into the pop state (see ``pop``),
starts a ``grpc.aio`` server on the broker's event loop and the revive service; ``stop()``
stops accepting, gives in-flight calls ``grace_s`` (held receives are released by the broker's
``PullHoldService.wake_all``), stops the revive service and commits the revive offset. The
broker calls ``stop()`` before it closes the store.
"""
from __future__ import annotations

import logging
from typing import Any

from ..format.message import Message
from .consume import Consumption, ReviveService
from .pieces import BrokerPieces
from .pop import REVIVE_GROUP, PopState, revive_topic
from .protocol import services
from .service import MessagingService

log = logging.getLogger(__name__)
MAX_INBOUND_MESSAGE_BYTES = 130 * 1024 * 1024  # the 5.x proxy's grpcMaxInboundMessageSize


class GrpcProxy:
    def __init__(self, pieces: BrokerPieces, host: str, port: int) -> None:
        self.p = pieces
        self.host = host
        self.port = port
        self.revive_topic = revive_topic(pieces.config.cluster_name)
        self.pop = PopState(pieces.config.broker_name, self._write_revive, self._commit_revive,
                            on_fifo_done=lambda ck: self.consumption.fifo_done(ck))
        self.consumption = Consumption(pieces, self.pop)
        self.service = MessagingService(pieces, self.consumption, lambda: self.port)
        self.revive = ReviveService(self.consumption)
        self._server: Any = None

    # -- the revive queue, through the store ---------------------------------------------------
    def _write_revive(self, tags: str, body: bytes) -> int:
        r = self.p.put_message(Message(topic=self.revive_topic, body=body, tags=tags, queue_id=0))
        if r.status.name not in ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
                                 "SLAVE_NOT_AVAILABLE"):
            raise RuntimeError(f"cannot write the pop revive log: {r.status.name}")
        return r.queue_offset

    def _commit_revive(self, offset: int) -> None:
        if self.p.offsets.query(REVIVE_GROUP, self.revive_topic, 0) != offset:  # idle: no write
            self.p.offsets.commit(REVIVE_GROUP, self.revive_topic, 0, offset)

    def _replay(self) -> int:
        store = self.p.store
        store.wait_dispatched(timeout=30)
        offset = max(self.p.offsets.query(REVIVE_GROUP, self.revive_topic, 0),
                     store.get_min_offset_in_queue(self.revive_topic, 0))

        def records():
            nonlocal offset
            while True:
                g = store.get_message(REVIVE_GROUP, self.revive_topic, 0, offset, 256)
                if g.status.name != "FOUND" or not g.messages:
                    return
                for m in g.messages:
                    yield m.queue_offset, m.tags or "", m.body
                offset = g.next_begin_offset
        return self.pop.replay(records())

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        import grpc

        if self.p.topics.get(self.revive_topic) is None:
            self.p.topics.create(self.revive_topic, 1)
        n = await self.p.run(self._replay)
        if n:
            log.info("pop: %d open checkpoints recovered from %s", n, self.revive_topic)
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
        self.revive.start()
        log.info("gRPC (RocketMQ 5.x) listening on %s:%s", self.host, self.port)

    async def stop(self, grace_s: float = 2.0) -> None:
        if self._server is not None:
            self.service.close_streams()
            await self._server.stop(grace_s)
            self._server = None
        await self.revive.stop()
