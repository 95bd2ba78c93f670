"""A listening controller: the service, its journal opened, behind a remoting server. Used by
``rocketstore controller`` and by ``rocketstore namesrv`` with ``enableControllerInNamesrv=true``
(where, as in RocketMQ, the controller listens on a port of its own: the address
``controllerDLegerPeers`` gives ``controllerDLegerSelfId``, else ``listenPort``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..broker.server import RemotingServer
from .config import ControllerConfig
from .processors import handlers
from .service import ControllerService


@dataclass
class RunningController:
    service: ControllerService
    server: RemotingServer
    address: str

    async def close(self) -> None:
        self.server.stop_accepting()
        await self.server.close()
        await self.service.stop()


def self_peer_port(cfg: ControllerConfig) -> int | None:
    """The port of ``controllerDLegerSelfId`` in ``controllerDLegerPeers``
    (``n0-127.0.0.1:9878;n1-...``), or None."""
    for peer in cfg.extra.get("controllerDLegerPeers", "").split(";"):
        ident, _, addr = peer.strip().partition("-")
        if ident == cfg.controllerDLegerSelfId and ":" in addr:
            try:
                return int(addr.rpartition(":")[2])
            except ValueError:
                raise ValueError(f"controllerDLegerPeers: bad port in {peer!r}") from None
    return None


async def start(cfg: ControllerConfig) -> RunningController:
    """Open the state (OSError/ValueError when it cannot be read), listen (OSError), serve."""
    svc = ControllerService(cfg)
    svc.open()
    srv = RemotingServer(svc, handlers(svc), "controller")
    try:
        await srv.start(cfg.listenHost, cfg.listenPort)
    except OSError:
        svc.journal.close()
        raise
    addr = f"{cfg.listenHost}:{srv.port}"
    svc.start(addr)
    return RunningController(svc, srv, addr)
