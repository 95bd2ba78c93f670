"""END_TRANSACTION (37): a producer's COMMIT or ROLLBACK of a half message, handed to the
transaction service (``services.transaction``, which also runs the checks)."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ..services.transaction import _STATE_NAMES, EndTransactionRequest

if TYPE_CHECKING:
    from ..controller import Broker

log = logging.getLogger(__name__)


def handlers(broker: "Broker") -> dict[int, Any]:
    async def end_transaction(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        req = EndTransactionRequest.from_command(cmd)
        service = broker.transactions
        if service is None:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark="broker is starting")
        result = await broker.run(service.end_transaction, req)
        if result is None:
            return None
        code, remark = result
        if code != ResponseCode.SUCCESS:
            log.warning("END_TRANSACTION %s of %s from %s: %s", _STATE_NAMES.get(
                req.commit_or_rollback), req.transaction_id or req.msg_id, conn.peer, remark)
        return cmd.response(code, remark=remark)

    return {RequestCode.END_TRANSACTION: end_transaction}
