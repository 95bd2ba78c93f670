"""END_TRANSACTION (37): a producer's COMMIT or ROLLBACK of a half message, handed to the
transaction service (``services.transaction``, which also runs the checks).

rocketstore's batched form (``transactionBatchEnable``; RocketMQ has none): the header has
``batchEntries`` = N beside RocketMQ's fields, and the body N big-endian pairs
(tranStateTableOffset int64, commitLogOffset int64), all ended with the header's
commitOrRollback. The answer is SUCCESS when every entry was ended, else the first failure's
code, with "k of N failed: ..." as remark (the check settles those). A batched COMMIT is
answered once the reput has dispatched what it stored (at most ``DISPATCH_WAIT_S``): its rows
are visible to consumers when the committer hears back, as a Spark batch write promises when
``save()`` returns (a packed half message's rows are stored in one append, which a consumer
sees only once its consume queue entries are written)."""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, Any

from ...format.message import TRANSACTION_COMMIT_TYPE
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from ..services.transaction import _STATE_NAMES, EndTransactionRequest

if TYPE_CHECKING:
    from ..contexts import SendContext

log = logging.getLogger(__name__)


BATCH_FIELD = "batchEntries"
DISPATCH_WAIT_S = 5.0
_ENTRY = struct.Struct(">qq")


def decode_entries(body: bytes | None, n: int) -> list[tuple[int, int]]:
    body = body or b""
    if n <= 0 or len(body) != n * _ENTRY.size:
        raise ValueError(f"batchEntries={n} but the body holds {len(body)} bytes "
                         f"(want {_ENTRY.size} per entry)")
    return list(_ENTRY.iter_unpack(body))


async def _dispatched(store: Any, offset: int, timeout_s: float = DISPATCH_WAIT_S) -> None:
    """Wait (without a thread) until the reput has dispatched the CommitLog up to ``offset``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while store.get_max_phy_offset() - store.dispatch_behind_bytes() < offset:
        if time.monotonic() > deadline:
            log.warning("END_TRANSACTION answered before its records were dispatched (%.0f s)",
                        timeout_s)
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.005)


async def end_transaction(ctx: SendContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
    req = EndTransactionRequest.from_command(cmd)
    service = ctx.transactions
    if service is None:
        return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark="broker is starting")
    n = cmd.get_int(BATCH_FIELD, None)
    if n is not None:
        if not ctx.config.transaction_batch_enable:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark="batched END_TRANSACTION is off (transactionBatchEnable)")
        entries = decode_entries(cmd.body, n)  # a ValueError is answered as a bad header
        results = await ctx.run(service.end_transactions, req.producer_group, entries,
                                req.commit_or_rollback)
        if req.commit_or_rollback == TRANSACTION_COMMIT_TYPE:
            await _dispatched(ctx.store, ctx.store.get_max_phy_offset())
        ok = (ResponseCode.SUCCESS, None)
        if results.count(ok) == len(results):  # (one shared object: an identity scan in C)
            return cmd.response(ResponseCode.SUCCESS)
        bad = [(c, r) for c, r in results if c != ResponseCode.SUCCESS]
        log.warning("END_TRANSACTION %s of %d half messages from %s: %d failed, first: %s",
                    _STATE_NAMES.get(req.commit_or_rollback), n, conn.peer, len(bad), bad[0][1])
        return cmd.response(bad[0][0], remark=f"{len(bad)} of {n} failed: {bad[0][1]}")
    result = await ctx.run(service.end_transaction, req)
    if result is None:
        return None
    code, remark = result
    if code != ResponseCode.SUCCESS:
        log.warning("END_TRANSACTION %s of %s from %s: %s", _STATE_NAMES.get(
            req.commit_or_rollback), req.transaction_id or req.msg_id, conn.peer, remark)
    return cmd.response(code, remark=remark)
