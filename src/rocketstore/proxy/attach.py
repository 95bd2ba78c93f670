"""``GrpcService``: the gRPC proxy attached to a broker, as ``rocketstore serve --grpc-port``
attaches it (the way the ops servers are attached): given to ``Broker.extensions`` before
``start()``, it is started once the broker's contexts exist, after the remoting servers, and
stopped before them. The proxy's ``BrokerPieces`` are filled from those contexts: it sees the
broker's state and put path, never the ``Broker``.
"""
from __future__ import annotations

from typing import Any

from .pieces import BrokerPieces
from .server import GrpcProxy


def pieces_from(contexts: dict[str, Any], delay_levels_ms: Any, route_perm: Any) -> BrokerPieces:
    send, pull, client = contexts["send"], contexts["pull"], contexts["client"]
    return BrokerPieces(store=send.store, topics=send.topics, offsets=pull.offsets,
                        config=send.config, run=send.run, put=send.puts.submit,
                        put_message=send.puts.put_blocking, hold=pull.hold,
                        delay_levels_ms=delay_levels_ms, transactions=send.transactions,
                        producers=send.producers, subgroups=client.subgroups,
                        consumers=client.consumers, filters=client.filters,
                        consumer_ids_changed=client.events.changed, route_perm=route_perm,
                        acl=contexts["acl"].acl,
                        pop_service=getattr(contexts.get("pop"), "service", None))


class GrpcService:
    def __init__(self, broker: Any, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.proxy: GrpcProxy | None = None

    async def start(self) -> None:
        b = self.broker
        pieces = pieces_from(b.contexts, b.delay_levels_ms, b.route_perm)
        self.proxy = GrpcProxy(pieces, self.host, self.port)
        await self.proxy.start()
        self.port = self.proxy.port
        b.config.grpc_port = self.proxy.port

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
