"""``MessagingService``: the RocketMQ 5.x gRPC activities over the broker's pieces.

Theory of operation: every RPC is a coroutine on the broker's event loop (``grpc.aio``); store
calls go to the broker's executor or put thread, as the remoting handlers' do. Clients identify
themselves with the ``x-mq-client-id`` metadata header and open the ``Telemetry`` stream first:
they send their ``Settings`` (producer: topics; consumer: group, subscriptions) and get back the
server's view — retry policy, max body size, receive batch size, long-polling time — exactly as
the 5.x proxy's ``GrpcClientSettingsManager`` fills it. Settings, heartbeats and
NotifyClientTermination keep the client in the broker's consumer / producer registries (see
``clients``). Routes point at this gRPC endpoint: the
address the client dialled (``QueryRoute.endpoints``), one broker, every queue of the topic.
Sends pick a queue like the proxy: a message group hashes to a fixed queue (Guava's
``consistentHash`` of the group's Java ``hashCode``), otherwise round robin. Bad input gets the
proxy's codes (``TOPIC_NOT_FOUND``, ``ILLEGAL_TOPIC``, ``ILLEGAL_CONSUMER_GROUP``,
``MESSAGE_BODY_TOO_LARGE``, ``CLIENT_ID_REQUIRED`` ...) in the response status; unknown topics
are never created by a gRPC client, as in RocketMQ 5.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, AsyncIterator

from ..broker.state.topics import readable, writable
from ..format.hashing import java_hash
from .clients import VERSION_HEADER, GrpcClients, language_of, metadata_of, version_ordinal
from .consume import Consumption
from .convert import ValidationError, to_store_message
from .pieces import BrokerPieces, check_group, check_topic
from .protocol import pb, services, status, to_duration
from .telemetry import (TelemetryChannel, end_transaction, half_message, peer_address,
                        register_producer, unregister)

log = logging.getLogger(__name__)
CLIENT_ID_HEADER = "x-mq-client-id"
PUT_OK = ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
_PUT_CODES = {"FLUSH_DISK_TIMEOUT": pb.MASTER_PERSISTENCE_TIMEOUT,
              "FLUSH_SLAVE_TIMEOUT": pb.SLAVE_PERSISTENCE_TIMEOUT,
              "SLAVE_NOT_AVAILABLE": pb.HA_NOT_AVAILABLE,
              "MESSAGE_ILLEGAL": pb.MESSAGE_BODY_TOO_LARGE,
              "PROPERTIES_SIZE_EXCEEDED": pb.MESSAGE_PROPERTIES_TOO_LARGE,
              "OS_PAGE_CACHE_BUSY": pb.TOO_MANY_REQUESTS,
              "SERVICE_NOT_AVAILABLE": pb.INTERNAL_SERVER_ERROR,
              "WHEEL_TIMER_MSG_ILLEGAL": pb.ILLEGAL_DELIVERY_TIME,
              "WHEEL_TIMER_FLOW_CONTROL": pb.TOO_MANY_REQUESTS,
              "WHEEL_TIMER_NOT_ENABLE": pb.INTERNAL_SERVER_ERROR}
# the 5.x proxy's ProxyConfig defaults
PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_MS = 20_000


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)`` (what the proxy uses for message groups)."""
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def _client_id(context: Any) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == CLIENT_ID_HEADER:
            return v
    return ""


class MessagingService(services.MessagingServiceServicer):
    def __init__(self, pieces: BrokerPieces, consumption: Consumption, port_of: Any) -> None:
        self.p = pieces
        self.consumption = consumption
        self._port_of = port_of  # () -> the gRPC port we listen on
        self._rr = itertools.count()
        self.clients: dict[str, dict] = {}  # client id -> {"settings", "group", "seen"}
        self.channels: dict[str, TelemetryChannel] = {}  # client id -> its open Telemetry
        self.registry = GrpcClients(pieces)  # consumers into the broker's ConsumerManager
        self._pruned = time.time()

    # -- helpers -----------------------------------------------------------------------------------
    def _endpoints(self, asked: Any) -> Any:
        if asked is not None and len(asked.addresses):
            return asked
        host = self.p.config.host
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=self._port_of())])

    def _broker(self, endpoints: Any) -> Any:
        return pb.Broker(name=self.p.config.broker_name, id=0, endpoints=endpoints)

    def _topic(self, name: str) -> Any:
        check_topic(name)
        tc = self.p.topics.get(name)
        if tc is None:
            raise ValidationError(pb.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        return tc

    def _touch(self, context: Any, group: str | None = None) -> str:
        cid = _client_id(context)
        if not cid:
            raise ValidationError(pb.CLIENT_ID_REQUIRED, "the x-mq-client-id header is required")
        c = self.clients.setdefault(cid, {"settings": None, "group": None})
        now = c["seen"] = time.time()
        if now - self._pruned > 60:  # forget clients silent for channelExpiredTimeout
            self._pruned = now
            limit = self.p.config.channel_expired_timeout_ms / 1000.0
            for k in [k for k, v in self.clients.items()
                      if now - v.get("seen", now) > limit and k not in self.channels]:
                del self.clients[k]
                self.registry.forget(k)
        if group:
            c["group"] = group
        return cid

    # -- route, heartbeat, assignment ----------------------------------------------------------------
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            self._touch(context)
            tc = self._topic(request.topic.name)
        except ValidationError as exc:
            return pb.QueryRouteResponse(status=status(exc.code, str(exc)))
        broker = self._broker(self._endpoints(request.endpoints))
        types = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
        queues = [pb.MessageQueue(topic=pb.Resource(name=tc.topic_name), id=i, permission=perm,
                                  broker=broker, accept_message_types=types)
                  for i, perm in route_queues(tc.read_queue_nums, tc.write_queue_nums,
                                              self.p.route_perm(tc))]
        return pb.QueryRouteResponse(status=status(pb.OK), message_queues=queues)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            group = request.group.name if request.HasField("group") else ""
            if group and request.client_type != pb.PRODUCER:
                check_group(group)
                self.p.group_config(group)
            cid = self._touch(context, group or None)
        except ValidationError as exc:
            return pb.HeartbeatResponse(status=status(exc.code, str(exc)))
        if group and request.client_type != pb.PRODUCER:  # renews the registry entry
            self.registry.consumer_registered(
                cid, metadata_of(context), context.peer(), self.channels.get(cid), group,
                request.client_type, self.clients[cid]["settings"], from_settings=False)
        channel = self.channels.get(cid)
        if channel is not None and channel.topics:  # keep the producer registration alive
            register_producer(self.p, channel, list(channel.topics))
        return pb.HeartbeatResponse(status=status(pb.OK))

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        try:
            self._touch(context)
            check_group(request.group.name)
            tc = self._topic(request.topic.name)
            self.p.group_config(request.group.name)
        except ValidationError as exc:
            return pb.QueryAssignmentResponse(status=status(exc.code, str(exc)))
        broker = self._broker(self._endpoints(request.endpoints))
        perm = self.p.route_perm(tc)
        if not readable(perm) or tc.read_queue_nums <= 0:
            return pb.QueryAssignmentResponse(status=status(pb.FORBIDDEN, "no readable queue"))
        # one assignment for the whole broker: a receive pops from every queue (id -1)
        mq = pb.MessageQueue(topic=pb.Resource(name=tc.topic_name), id=-1,
                             permission=_permission(perm), broker=broker,
                             accept_message_types=[pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])
        return pb.QueryAssignmentResponse(status=status(pb.OK),
                                          assignments=[pb.Assignment(message_queue=mq)])

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        cid = _client_id(context)
        known = self.clients.get(cid) or {}
        group = request.group.name if request.HasField("group") else known.get("group")
        self.registry.consumer_gone(cid, group)
        self.clients.pop(cid, None)
        channel = self.channels.pop(cid, None)
        if channel is not None:
            unregister(self.p, channel)
        return pb.NotifyClientTerminationResponse(status=status(pb.OK))

    # -- send --------------------------------------------------------------------------------------
    def _queue_for(self, tc: Any, msg: Any, single: bool) -> int:
        group = msg.system_properties.message_group
        if single and msg.system_properties.HasField("message_group") and group:
            return consistent_hash(java_hash(group), tc.write_queue_nums)
        return next(self._rr) % tc.write_queue_nums

    async def SendMessage(self, request: Any, context: Any) -> Any:
        msgs = list(request.messages)
        try:
            cid = self._touch(context)
            if not msgs:
                raise ValidationError(pb.BAD_REQUEST, "no message to send")
            topic = msgs[0].topic.name
            if any(m.topic.name != topic for m in msgs):
                raise ValidationError(pb.BAD_REQUEST, "all messages of a send need one topic")
            tc = self._topic(topic)
            if not writable(tc.perm):  # the broker's own check (SendMessageProcessor)
                raise ValidationError(pb.FORBIDDEN, f"the topic[{topic}] sending message is forbidden")
            transactional = msgs[0].system_properties.message_type == pb.TRANSACTION
            if transactional and len(msgs) > 1:
                raise ValidationError(pb.BAD_REQUEST, "a transactional send carries one message")
            if transactional and getattr(self.p.config, "reject_transaction_message", False):
                raise ValidationError(pb.FORBIDDEN, "sending transaction message is forbidden")
            queue_id = self._queue_for(tc, msgs[0], len(msgs) == 1)
            max_body = self.p.store.cfg.max_message_size
            store_msgs = []
            for m in msgs:
                # the topic is the producer group, as the 5.x proxy does for transaction checks
                sm = to_store_message(m, producer_group=topic, born_host=context.peer(),
                                      max_body=max_body, levels_ms=self.p.delay_levels_ms)
                sm.queue_id = queue_id
                store_msgs.append(half_message(self.p, sm) if transactional else sm)
        except ValidationError as exc:
            return pb.SendMessageResponse(status=status(exc.code, str(exc)))
        entries = []
        for sm in store_msgs:
            try:
                r = await self.p.put(self.p.put_message, sm)
            except ValueError as exc:  # the store refused it (size, properties)
                entries.append(pb.SendResultEntry(status=status(pb.BAD_REQUEST, str(exc))))
                continue
            name = r.status.name
            code = pb.OK if name == "PUT_OK" else _PUT_CODES.get(name, pb.INTERNAL_SERVER_ERROR)
            ok = name in PUT_OK
            entries.append(pb.SendResultEntry(
                status=status(code, "OK" if code == pb.OK else
                              f"{name}: {r.error}" if r.error and name.startswith("WHEEL_TIMER") else name),
                message_id=sm.properties["UNIQ_KEY"] if ok else "",
                transaction_id=r.msg_id if ok and transactional else "",
                offset=r.queue_offset if ok else 0))
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS)
        return pb.SendMessageResponse(status=overall, entries=entries)

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        try:
            self._touch(context)
            self._topic(request.topic.name)
        except ValidationError as exc:
            return pb.EndTransactionResponse(status=status(exc.code, str(exc)))
        return pb.EndTransactionResponse(status=await end_transaction(self.p, request))

    # -- consume -----------------------------------------------------------------------------------
    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            self._touch(context, request.group.name)
        except ValidationError as exc:
            yield pb.ReceiveMessageResponse(status=status(exc.code, str(exc)))
            return
        async for resp in self.consumption.receive(request, context):
            yield resp

    async def AckMessage(self, request: Any, context: Any) -> Any:
        return await self.consumption.ack(request)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return await self.consumption.change_invisible(request)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        return await self.consumption.forward_to_dlq(request)

    # -- telemetry ---------------------------------------------------------------------------------
    def _settings_reply(self, s: Any) -> Any:
        out = pb.Settings()
        out.CopyFrom(s)
        if s.HasField("publishing"):
            bp = out.backoff_policy
            bp.max_attempts = PRODUCER_MAX_ATTEMPTS
            bp.exponential_backoff.initial.CopyFrom(to_duration(10))
            bp.exponential_backoff.max.CopyFrom(to_duration(1000))
            bp.exponential_backoff.multiplier = 2.0
            out.publishing.max_body_size = self.p.store.cfg.max_message_size
            out.publishing.validate_message_type = False
        elif s.HasField("subscription"):
            sub = out.subscription
            sub.receive_batch_size = RECEIVE_BATCH_SIZE
            sub.long_polling_timeout.CopyFrom(to_duration(LONG_POLLING_MS))
            cfg = self.p.subgroups.get(sub.group.name) if self.p.subgroups is not None else None
            sub.fifo = bool(getattr(cfg, "consume_message_orderly", False))
            bp = out.backoff_policy
            bp.max_attempts = self.p.max_reconsume_times(sub.group.name) + 1
            levels = list(self.p.delay_levels_ms[2:]) or [10_000]
            del bp.customized_backoff.next[:]
            bp.customized_backoff.next.extend(to_duration(ms) for ms in levels)
        return out

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        cid = _client_id(context)
        meta = metadata_of(context)
        channel = TelemetryChannel(cid, peer_address(context.peer()), language_of(meta),
                                   version_ordinal(meta.get(VERSION_HEADER)))
        old = self.channels.get(cid)
        self.channels[cid] = channel
        if old is not None:
            unregister(self.p, old)

        async def read() -> None:
            try:
                async for cmd in request_iterator:
                    if cmd.WhichOneof("command") == "settings":
                        channel.send(self._on_settings(cid, channel, cmd.settings, meta))
                    # thread stack traces, verify results: nothing to do with them here
            except (asyncio.CancelledError, Exception):  # the client went away
                pass
            finally:
                channel.close()

        reader = asyncio.ensure_future(read())
        try:
            while (item := await channel.next()) is not None:
                yield item
        finally:
            reader.cancel()
            unregister(self.p, channel)
            if self.channels.get(cid) is channel:
                del self.channels[cid]

    def _on_settings(self, cid: str, channel: TelemetryChannel, settings: Any,
                     meta: dict[str, str]) -> Any:
        c = self.clients.setdefault(cid, {"settings": None, "group": None})
        c["settings"], c["seen"] = settings, time.time()
        if settings.HasField("subscription"):
            c["group"] = settings.subscription.group.name
            self.registry.consumer_registered(cid, meta, channel.peer, channel, c["group"],
                                              settings.client_type, settings, from_settings=True)
        elif settings.HasField("publishing"):
            topics = [t.name for t in settings.publishing.topics if self.p.topics.get(t.name)]
            register_producer(self.p, channel, topics)
        return pb.TelemetryCommand(status=status(pb.OK), settings=self._settings_reply(settings))

    def close_streams(self) -> None:
        """End every Telemetry stream (shutdown)."""
        for channel in list(self.channels.values()):
            unregister(self.p, channel)


def _permission(perm: int) -> int:
    """A topic perm as a 5.x ``Permission``."""
    r, w = readable(perm), writable(perm)
    return pb.READ_WRITE if r and w else pb.READ if r else pb.WRITE if w else pb.NONE


def route_queues(r: int, w: int, perm: int) -> list[tuple[int, int]]:
    """(queue id, Permission) of a topic's route, by RocketMQ 5's rule
    (``RouteActivity.genMessageQueueFromQueueData``): with read and write perm, queues below
    both counts READ_WRITE and the rest READ or WRITE; with one of them, that many queues of it;
    with neither, NONE queues. Ids are the broker's queue ids (a send names the queue it
    writes), where RocketMQ's proxy numbers read-only queues first."""
    if readable(perm) and writable(perm):
        both = min(r, w)
        return [(i, pb.READ_WRITE if i < both else pb.READ if i < r else pb.WRITE)
                for i in range(max(r, w))]
    if writable(perm):
        return [(i, pb.WRITE) for i in range(w)]
    if readable(perm):
        return [(i, pb.READ) for i in range(r)]
    return [(i, pb.NONE) for i in range(max(1, r, w))]
