"""The Telemetry stream of a 5.x client, and transactions over gRPC.

Theory of operation: a client opens ``Telemetry`` first and keeps it open; it is the only way
the server can reach the client. ``TelemetryChannel`` is that way out: a queue the stream's
handler drains. For a producer the channel is registered in the broker's ``ProducerManager``
under each topic it publishes to — the 5.x proxy uses the topic as the producer group of a
transactional message (``PGROUP``) — so the broker's transaction check service, which asks "a
live connection of the group", reaches gRPC producers too: the CHECK_TRANSACTION_STATE command
it sends is turned into a ``RecoverOrphanedTransactionCommand`` (the half message and its
transaction id) and the client answers with ``EndTransaction`` (source SERVER_CHECK).

A transactional send stores a half message (``TransactionalMessageService.half_message``); its
transaction id is the half record's offset message id, so ``EndTransaction`` finds the record
by CommitLog offset and hands the decision to the same service END_TRANSACTION (37) uses.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..format.message import (PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, TRANSACTION_COMMIT_TYPE,
                              TRANSACTION_ROLLBACK_TYPE, decode_message, parse_message_id)
from .convert import ValidationError, _host_port, to_grpc_message
from .pieces import BrokerPieces
from .protocol import pb, status

log = logging.getLogger(__name__)
_CLOSED = object()
CHECK_TRANSACTION_STATE = 39  # RequestCode: the only broker command a gRPC client is sent


def peer_address(peer: str | None) -> str:
    """gRPC's ``ipv4:127.0.0.1:5000`` → the ``host:port`` RocketMQ shows as a client address."""
    return _host_port(peer or "") or str(peer or "")


class TelemetryChannel:
    """The server-to-client half of one Telemetry stream (``notify`` is what the broker's
    transaction check calls on a producer connection)."""

    def __init__(self, client_id: str, peer: str, language: str = "OTHER",
                 version: int = 0) -> None:
        self.client_id = client_id
        self.peer = peer
        self.language = language  # x-mq-language, as the client registries show it
        self.version = version  # x-mq-client-version as an MQVersion ordinal
        self.closed = False
        self.topics: tuple[str, ...] = ()
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()

    def send(self, cmd: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, cmd)

    def close(self) -> None:
        self.closed = True
        self._loop.call_soon_threadsafe(self._queue.put_nowait, _CLOSED)

    async def next(self) -> Any:
        item = await self._queue.get()
        return None if item is _CLOSED else item

    async def call(self, cmd: Any, timeout_s: float) -> Any:
        """A broker request that wants an answer from the client (mqadmin consumerStatus,
        consumerRunningInfo, consumeMessageDirectly): not relayed to 5.x clients, refused
        at once rather than left to time out."""
        raise ConnectionError(f"{self.client_id} is a RocketMQ 5.x gRPC client: request code "
                              f"{getattr(cmd, 'code', '?')} is not relayed to it")

    def notify(self, cmd: Any) -> None:
        """A CHECK_TRANSACTION_STATE command of the check service → RecoverOrphanedTransaction.
        Other broker commands (NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET ...)
        mean nothing to a 5.x client and are dropped, as the 5.x proxy's channel does."""
        if getattr(cmd, "code", CHECK_TRANSACTION_STATE) != CHECK_TRANSACTION_STATE:
            return
        if self.closed:
            raise ConnectionError("telemetry stream closed")
        half = decode_message(cmd.body, 0)
        props = dict(half.properties)
        topic = props.get(PROPERTY_REAL_TOPIC, half.topic)
        half.queue_id = int(props.get(PROPERTY_REAL_QUEUE_ID, half.queue_id))
        tx_id = cmd.ext_fields.get("offsetMsgId") or half.msg_id
        self.send(pb.TelemetryCommand(
            recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                message=to_grpc_message(half, topic=topic), transaction_id=tx_id)))


def register_producer(pieces: BrokerPieces, channel: TelemetryChannel, topics: list[str]) -> None:
    """(Re-)register a publishing client under each of its topics (its PGROUP)."""
    if pieces.producers is None:
        return
    channel.topics = tuple(topics)
    for topic in topics:
        try:
            pieces.producers.register(topic, channel, channel.client_id,
                                      language=channel.language, version=channel.version)
        except ValueError:
            continue


def unregister(pieces: BrokerPieces, channel: TelemetryChannel) -> None:
    channel.close()
    if pieces.producers is not None:
        pieces.producers.connection_closed(channel)


async def end_transaction(pieces: BrokerPieces, req: Any) -> Any:
    from ..broker.services.transaction import EndTransactionRequest

    service = pieces.transactions
    if service is None:
        return status(pb.NOT_IMPLEMENTED, "transactions are not enabled on this broker")
    if not req.transaction_id.strip():
        return status(pb.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
    if req.resolution not in (pb.COMMIT, pb.ROLLBACK):
        return status(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
    try:
        _, offset = parse_message_id(req.transaction_id)
    except ValueError:
        return status(pb.INVALID_TRANSACTION_ID, f"transaction id {req.transaction_id!r} is "
                                                 f"not one this broker gave out")
    half = await pieces.run(pieces.store.look_message_by_offset, offset)
    if half is None:
        return status(pb.INVALID_TRANSACTION_ID, "no prepared message for this transaction id")
    state = TRANSACTION_COMMIT_TYPE if req.resolution == pb.COMMIT else TRANSACTION_ROLLBACK_TYPE
    end = EndTransactionRequest(
        producer_group=req.topic.name, tran_state_table_offset=half.queue_offset,
        commit_log_offset=offset, commit_or_rollback=state,
        from_transaction_check=req.source == pb.SOURCE_SERVER_CHECK,
        msg_id=req.message_id, transaction_id=req.transaction_id)
    result = await pieces.run(service.end_transaction, end)
    if result is None or result[0] == 0:
        return status(pb.OK)
    code, remark = result
    if remark and "Find prepared" in remark:
        return status(pb.INVALID_TRANSACTION_ID, remark)
    return status(pb.BAD_REQUEST if "group wrong" in (remark or "") else pb.INTERNAL_SERVER_ERROR,
                  remark or f"end transaction failed ({code})")


def half_message(pieces: BrokerPieces, sm: Any) -> Any:
    if pieces.transactions is None:
        raise ValidationError(pb.NOT_IMPLEMENTED, "transactions are not enabled on this broker")
    return pieces.transactions.half_message(sm)
