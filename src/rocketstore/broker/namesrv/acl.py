"""Opt-in ACL on the name server's write codes (``namesrvAclEnable=true``), as RocketMQ 5 offers.

RocketMQ 4.x's name server checks nothing: anyone who reaches the port can wipe a broker's write
permission (205), rewrite the KV config (100), register a fake broker or delete a topic's route.
With ``namesrvAclEnable=true`` the write codes below need an admin account of the broker's
``plain_acl.yml`` (the same accounts, white addresses and ``AclClientRPCHook`` signatures as the
broker's ACL, ``broker.acl.plain``); reads (routes, cluster info, topic lists, KV reads) stay open, as
clients need them before they know any account. ``mqadmin`` signs name-server requests with
``tools.yml``'s keys, so its commands keep working with an admin account. A broker registering
from an address in ``globalWhiteRemoteAddresses`` needs no signature (RocketMQ's brokers do not
sign); ours signs with ``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY`` when they are set.
A refusal is SYSTEM_ERROR with RocketMQ's ACL remark, as on the broker.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ..acl.address import AclError
from ..acl.plain import parse_request, validate

Handler = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]

WRITE_CODES = frozenset({
    RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.UPDATE_NAMESRV_CONFIG})


def check(manager: Any, cmd: RemotingCommand, peer: str | None) -> None:
    """Raise ``AclError`` unless ``cmd`` may run on the name server."""
    if cmd.code in WRITE_CODES:
        req = parse_request(cmd, peer)
        req.resources = {}  # a write code touches the cluster, not a topic: admin decides
        validate(manager.snapshot, req, WRITE_CODES)


def guard(manager: Any, handlers: dict[int, Handler]) -> dict[int, Handler]:
    """The name server's write handlers behind the check; reads unchanged."""
    def wrap(handler: Handler) -> Handler:
        async def checked(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
            try:
                check(manager, cmd, conn.peer)
            except AclError as exc:
                return cmd.response(ResponseCode.SYSTEM_ERROR, remark=exc.remark)
            return await handler(conn, cmd)
        return checked
    return {code: wrap(h) if code in WRITE_CODES else h for code, h in handlers.items()}


__all__ = ["WRITE_CODES", "check", "guard"]
