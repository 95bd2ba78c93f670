"""END_TRANSACTION (37): a producer's COMMIT or ROLLBACK of a half message, handed to the
transaction service (``services.transaction``, which also runs the checks)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ..services.transaction import _STATE_NAMES, EndTransactionRequest

if TYPE_CHECKING:
    from ..contexts import SendContext

log = logging.getLogger(__name__)


async def end_transaction(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
    req = EndTransactionRequest.from_command(cmd)
    service = ctx.transactions
    if service is None:
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark="broker is starting")
    result = await ctx.run(service.end_transaction, req)
    if result is None:
        return None
    code, remark = result
    if code != ResponseCode.SUCCESS:
        log.warning("END_TRANSACTION %s of %s from %s: %s", _STATE_NAMES.get(
            req.commit_or_rollback), req.transaction_id or req.msg_id, conn.peer, remark)
    return cmd.response(code, remark=remark)
