"""``TransactionProducer``: RocketMQ's transactional messages (``TransactionMQProducer``).

    from rocketstore.client import LocalTransactionState, TransactionProducer

    def check(msg):                      # the broker asks about an undecided transaction
        return LocalTransactionState.COMMIT_MESSAGE if db_has(msg.uniq_key) \\
            else LocalTransactionState.ROLLBACK_MESSAGE

    with TransactionProducer("PG", "127.0.0.1:9876", check_listener=check) as p:
        def local(msg, arg):             # runs after the half message is stored
            db_insert(msg.properties["UNIQ_KEY"], arg)
            return LocalTransactionState.COMMIT_MESSAGE
        r = p.send_message_in_transaction("T", b"order 1", local, arg=order)
        r.local_transaction_state, r.transaction_id

Theory of operation (``DefaultMQProducerImpl.sendMessageInTransaction``): the message goes out
with ``TRAN_MSG=true``, ``PGROUP=<group>`` and sysFlag PREPARED, so the broker stores it as a
half message no consumer sees. If the broker stored it (SEND_OK), the local-transaction callback
runs — in the caller's thread for the blocking class — and its answer goes to the broker in an
END_TRANSACTION: COMMIT_MESSAGE delivers the message, ROLLBACK_MESSAGE drops it, UNKNOW (or an
exception in the callback) leaves it for the broker's check. The transaction id is the message's
UNIQ_KEY. The producer heartbeats its group to every broker of the cluster (at start, every
``heartbeat_interval_s``, and at once to a broker it stores a half message on for the first
time), so the broker can ask it — or any other live producer of the group,
for instance one started after this process died — CHECK_TRANSACTION_STATE; the check listener
gets the message (a ``MessageExt`` on its real topic) on a worker thread and its answer goes back
as an END_TRANSACTION marked ``fromTransactionCheck``.
"""
from __future__ import annotations

import asyncio
import enum
import inspect
import json
import logging
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Sequence, Union

from ..errors import BrokerError
from ..format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_PRODUCER_GROUP,
                              PROPERTY_TRANSACTION_PACKED, PROPERTY_TRANSACTION_PREPARED,
                              PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, TRANSACTION_COMMIT_TYPE,
                              TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE,
                              TRANSACTION_ROLLBACK_TYPE, Message, MessageExt, parse_message_id)
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.jsonbody import load_json_text
from ._sync import LoopThread
from .consumer import decode_messages
from .instance import ClientInstance, sleep_or
from .producer import AsyncProducer, SendResult, batch_body, build_properties

log = logging.getLogger(__name__)


async def end_transaction_at(instance: ClientInstance, addr: str, header: dict) -> None:
    """One END_TRANSACTION to the broker at ``addr``; ``header`` holds RocketMQ's
    EndTransactionRequestHeader fields (producerGroup, tranStateTableOffset, commitLogOffset,
    commitOrRollback, fromTransactionCheck, msgId, transactionId)."""
    await instance.invoke(addr, RequestCode.END_TRANSACTION, header)


# -- rocketstore's batched transactions (``transactionBatchEnable``; RocketMQ has none) --------
TRANSACTION_BATCH_KEY = "transactionBatchEnable"  # in GET_BROKER_CONFIG's answer
TRANSACTION_PACK_KEY = "transactionPackEnable"  # ditto: packed half messages
_FLAG_KEYS = (TRANSACTION_BATCH_KEY, TRANSACTION_PACK_KEY)
_BROKER_FLAGS: dict[str, tuple[frozenset[str], float]] = {}  # broker address -> (keys, when)
BATCH_SUPPORT_TTL_S = 60.0


async def _broker_flags(instance: ClientInstance, addr: str) -> frozenset[str]:
    """Which of our transaction keys the broker at ``addr`` says are true in GET_BROKER_CONFIG.
    A RocketMQ broker has none, and a broker that does not answer counts as one without (asked
    again after ``BATCH_SUPPORT_TTL_S``)."""
    known = _BROKER_FLAGS.get(addr)
    now = time.monotonic()
    if known is not None and now - known[1] < BATCH_SUPPORT_TTL_S:
        return known[0]
    try:
        resp = await instance.invoke(addr, RequestCode.GET_BROKER_CONFIG)
        lines = {line.strip() for line in (resp.body or b"").decode("utf-8", "replace")
                 .splitlines()}
        flags = frozenset(k for k in _FLAG_KEYS if f"{k}=true" in lines)
    except Exception as exc:  # ACL without admin rights, an old broker...: one at a time
        log.info("GET_BROKER_CONFIG of %s: %s; half messages go one by one", addr, exc)
        flags = frozenset()
    _BROKER_FLAGS[addr] = (flags, now)
    return flags


async def transaction_batch_supported(instance: ClientInstance, addr: str) -> bool:
    """Whether the broker at ``addr`` takes a batch of half messages and a batched
    END_TRANSACTION: its GET_BROKER_CONFIG says ``transactionBatchEnable=true``."""
    return TRANSACTION_BATCH_KEY in await _broker_flags(instance, addr)


async def transaction_pack_supported(instance: ClientInstance, addr: str) -> bool:
    """Whether the broker at ``addr`` takes packed half messages (``send_packed_half``): its
    GET_BROKER_CONFIG says ``transactionPackEnable=true``."""
    return TRANSACTION_PACK_KEY in await _broker_flags(instance, addr)


@dataclass
class HalfRef:
    """Where a half message is stored: what END_TRANSACTION names."""

    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC (tranStateTableOffset)
    commitlog_offset: int
    msg_id: str  # its UNIQ_KEY (the transaction id)


async def send_half_batch(producer: AsyncProducer, topic: str, messages: Sequence[Message],
                          mq: Any, properties: Mapping[str, str] | None = None) -> list[HalfRef]:
    """Send ``messages`` as half messages of ``producer``'s group in one SEND_BATCH_MESSAGE
    (only to a broker where ``transaction_batch_supported``), ``properties`` added to each;
    where each was stored."""
    q0, offsets, ids = await send_half_run(producer, topic, messages, mq, properties)
    return [HalfRef(q0 + i, off, uid) for i, (off, uid) in enumerate(zip(offsets, ids))]


async def send_packed_half(producer: AsyncProducer, topic: str, messages: Sequence[Message],
                           mq: Any, properties: Mapping[str, str] | None = None) -> HalfRef:
    """Send ``messages`` as ONE half message of ``producer``'s group whose body is their batch
    (only to a broker where ``transaction_pack_supported``; ``properties`` go on the half
    message). Its transaction id is the last message's UNIQ_KEY; a COMMIT stores every
    message as a send of the batch would, a ROLLBACK none. Where it was stored."""
    body, ids = batch_body(topic, messages)
    props = {**(properties or {}), PROPERTY_TRANSACTION_PREPARED: "true",
             PROPERTY_PRODUCER_GROUP: producer.group,
             PROPERTY_TRANSACTION_PACKED: str(len(ids)),
             PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: ids[-1]}
    r = await producer.send(topic, body, properties=props, mq=mq,
                            sys_flag=TRANSACTION_PREPARED_TYPE)
    _, cl_offset = parse_message_id(r.offset_msg_id)
    return HalfRef(r.queue_offset, cl_offset, ids[-1])


async def send_half_run(producer: AsyncProducer, topic: str, messages: Sequence[Message],
                        mq: Any, properties: Mapping[str, str] | None = None
                        ) -> tuple[int, "array[int]", list[str]]:
    """``send_half_batch`` answered as a run: the first half's queue offset (the others follow
    it), the CommitLog offset of each (read off the offset msgIds at once) and their UNIQ_KEYs
    — no object per half."""
    group = producer.group
    extra = {PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: group,
             **(properties or {})}
    r = await producer.send_batch(topic, messages, mq=mq, sys_flag=TRANSACTION_PREPARED_TYPE,
                                  batch_properties={PROPERTY_TRANSACTION_PREPARED: "true",
                                                    PROPERTY_PRODUCER_GROUP: group},
                                  entry_properties=extra)
    offsets = r.offset_msg_id.split(",")
    ids = r.msg_ids
    if len(offsets) != len(messages) or len(ids) != len(messages):
        raise RuntimeError(f"a batch of {len(messages)} half messages was answered with "
                           f"{len(offsets)} message ids")
    if not set(map(len, offsets)) <= {32, 56}:  # IPv4 or IPv6 store host, then the offset
        raise ValueError(f"a batch of half messages was answered with a malformed message id: "
                         f"{next(o for o in offsets if len(o) not in (32, 56))!r}")
    try:
        cl = array("q", bytes.fromhex("".join(o[-16:] for o in offsets)))
    except ValueError as exc:
        raise ValueError(f"a batch of half messages was answered with a malformed message id: "
                         f"{exc}") from None
    if sys.byteorder == "little":
        cl.byteswap()  # (big-endian in the msgId)
    return r.queue_offset, cl, ids


async def end_transactions_at(instance: ClientInstance, addr: str, group: str,
                              halves: Sequence[HalfRef], commit: bool) -> None:
    """One batched END_TRANSACTION for ``halves`` on the broker at ``addr`` (only where
    ``transaction_batch_supported``); raises ``BrokerError`` when any entry failed."""
    import struct
    if not halves:
        return
    body = struct.pack(f">{2 * len(halves)}q", *[v for h in halves
                                                  for v in (h.queue_offset, h.commitlog_offset)])
    await end_packed_at(instance, addr, group, halves[0], len(halves), body, commit)


async def end_packed_at(instance: ClientInstance, addr: str, group: str, first: HalfRef,
                        count: int, pairs: bytes, commit: bool) -> None:
    """``end_transactions_at`` with its body ready: ``count`` (tranStateTableOffset,
    commitLogOffset) pairs as big-endian int64s; ``first`` is the first of them."""
    header = {"producerGroup": group, "tranStateTableOffset": first.queue_offset,
              "commitLogOffset": first.commitlog_offset,
              "commitOrRollback": TRANSACTION_COMMIT_TYPE if commit else TRANSACTION_ROLLBACK_TYPE,
              "fromTransactionCheck": False, "msgId": first.msg_id,
              "transactionId": first.msg_id, "batchEntries": count}
    await instance.invoke(addr, RequestCode.END_TRANSACTION, header, pairs)


class LocalTransactionState(enum.Enum):
    """RocketMQ's names, ``UNKNOW`` included."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"

    @property
    def sys_flag(self) -> int:
        """The ``commitOrRollback`` value of END_TRANSACTION."""
        return {"COMMIT_MESSAGE": TRANSACTION_COMMIT_TYPE,
                "ROLLBACK_MESSAGE": TRANSACTION_ROLLBACK_TYPE}.get(self.value, TRANSACTION_NOT_TYPE)


LocalTransaction = Callable[[Message, Any], Union[LocalTransactionState,
                                                   Awaitable[LocalTransactionState]]]
CheckListener = Callable[[MessageExt], Union[LocalTransactionState,
                                              Awaitable[LocalTransactionState]]]


@dataclass
class TransactionSendResult(SendResult):
    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW
    end_transaction_error: str | None = None  # why the broker refused the decision, if it did

    @property
    def transaction_id(self) -> str:
        return self.msg_id


def _state(value: Any) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    if isinstance(value, str) and value in LocalTransactionState.__members__:
        return LocalTransactionState[value]
    raise TypeError(f"a transaction callback must return a LocalTransactionState, not {value!r}")


class AsyncTransactionProducer:
    def __init__(self, group: str, namesrv: str, *, check_listener: CheckListener | None = None,
                 local_transaction: LocalTransaction | None = None,
                 heartbeat_interval_s: float = 30.0, timeout_s: float = 5.0, retries: int = 2,
                 instance: ClientInstance | None = None, credentials: Any = None) -> None:
        self.producer = AsyncProducer(group, namesrv, timeout_s=timeout_s, retries=retries,
                                      instance=instance, credentials=credentials)
        self.group = group
        self.instance = self.producer.instance
        self.check_listener = check_listener
        self.local_transaction = local_transaction
        self.heartbeat_interval_s = heartbeat_interval_s
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._heartbeat_task: asyncio.Task | None = None
        self._registered: set[str] = set()  # brokers that have had a heartbeat from us
        self.instance.on_broker_request.append(self._on_broker_request)

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> "AsyncTransactionProducer":
        await self.heartbeat()
        self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        return self

    async def brokers(self) -> set[str]:
        """Master addresses of every broker the name server knows, and of every cached route."""
        out: set[str] = set()
        for ns in self.instance.namesrv_addrs:
            try:
                resp = await self.instance.invoke(ns, RequestCode.GET_BROKER_CLUSTER_INFO)
            except (ConnectionError, TimeoutError, Exception) as exc:
                log.debug("cluster info from %s: %s", ns, exc)
                continue
            table = load_json_text(resp.body.decode("utf-8")).get("brokerAddrTable") or {}
            for bd in table.values():
                addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
                if "0" in addrs:
                    out.add(addrs["0"])
            break
        for r in list(self.instance._routes.values()):
            out.update(r.brokers.values())
        return out

    async def heartbeat(self) -> None:
        for addr in await self.brokers():
            await self._heartbeat_to(addr)

    async def _heartbeat_to(self, addr: str) -> None:
        body = json.dumps({"clientID": self.instance.client_id,
                           "producerDataSet": [{"groupName": self.group}],
                           "consumerDataSet": []}).encode()
        try:
            await self.instance.invoke(addr, RequestCode.HEART_BEAT, None, body)
            self._registered.add(addr)
        except (ConnectionError, TimeoutError, BrokerError) as exc:
            log.warning("heartbeat to %s failed: %s", addr, exc)

    async def _heartbeat_loop(self) -> None:
        while not await sleep_or(self._stop, self.heartbeat_interval_s):
            try:
                await self.heartbeat()
            except Exception:
                log.exception("producer heartbeat failed")

    async def shutdown(self) -> None:
        self._stop.set()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        for t in list(self._tasks):
            t.cancel()
        fields = {"clientID": self.instance.client_id, "producerGroup": self.group}
        for addr in await self.brokers():
            try:
                await self.instance.invoke(addr, RequestCode.UNREGISTER_CLIENT, fields,
                                           timeout=1.0)
            except Exception:
                pass
        await self.producer.shutdown()

    # -- sending ----------------------------------------------------------------------------------
    async def send_half(self, topic: str, body: bytes, *, tags: str | None = None,
                        keys: Sequence[str] | str | None = None,
                        properties: Mapping[str, str] | None = None,
                        queue_id: int | None = None, sharding_key: object = None,
                        flag: int = 0) -> tuple[SendResult, Message]:
        """Store the half message; the result and the message as the callback sees it."""
        props = dict(properties or {})
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)  # a transactional message is never delayed
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        r = await self.producer.send(topic, body, tags=tags, keys=keys, properties=props,
                                     queue_id=queue_id, sharding_key=sharding_key, flag=flag,
                                     sys_flag=TRANSACTION_PREPARED_TYPE)
        addr = await self.instance.broker_addr(r.message_queue)
        if addr not in self._registered:  # a broker that may ask us: make sure it knows us
            await self._heartbeat_to(addr)
        props = build_properties(tags, keys, props, uniq_key=r.msg_id)
        return r, Message(topic=topic, body=body, properties=props,
                          queue_id=r.message_queue.queue_id, flag=flag)

    async def end_transaction(self, r: SendResult, state: LocalTransactionState) -> str | None:
        """Tell the broker the outcome (nothing for UNKNOW); the broker's refusal, if any."""
        if state is LocalTransactionState.UNKNOW:
            return None
        _, commitlog_offset = parse_message_id(r.offset_msg_id)
        header = {"producerGroup": self.group, "tranStateTableOffset": r.queue_offset,
                  "commitLogOffset": commitlog_offset, "commitOrRollback": state.sys_flag,
                  "fromTransactionCheck": False, "msgId": r.msg_id, "transactionId": r.msg_id}
        addr = await self.instance.broker_addr(r.message_queue)
        try:
            await end_transaction_at(self.instance, addr, header)
        except Exception as exc:  # the broker's check asks again later
            log.warning("END_TRANSACTION %s of %s: %s", state.value, r.msg_id, exc)
            return str(exc)
        return None

    async def send_message_in_transaction(self, topic: str, body: bytes,
                                          local_transaction: LocalTransaction | None = None,
                                          arg: Any = None, **kwargs: Any) -> TransactionSendResult:
        fn = local_transaction or self.local_transaction
        if fn is None:
            raise ValueError("no local_transaction callback given")
        r, msg = await self.send_half(topic, body, **kwargs)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        if r.status == "SEND_OK":
            state = await _call(fn, msg, arg)
        err = await self.end_transaction(r, state)
        return TransactionSendResult(**vars(r), local_transaction_state=state,
                                     end_transaction_error=err)

    # -- checks from the broker -------------------------------------------------------------------
    def _on_broker_request(self, addr: str, cmd: RemotingCommand) -> None:
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        t = asyncio.get_running_loop().create_task(self._check(addr, cmd))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _check(self, addr: str, cmd: RemotingCommand) -> None:
        try:
            msgs = decode_messages(cmd.body)
        except Exception as exc:
            log.warning("undecodable CHECK_TRANSACTION_STATE from %s: %s", addr, exc)
            return
        if not msgs or self.check_listener is None:
            return
        msg = msgs[0]
        if msg.properties.get(PROPERTY_PRODUCER_GROUP, self.group) != self.group:
            return
        state = await _call(self.check_listener, msg)
        if state is LocalTransactionState.UNKNOW:
            return
        header = {"producerGroup": self.group,
                  "tranStateTableOffset": cmd.get_int("tranStateTableOffset", 0),
                  "commitLogOffset": cmd.get_int("commitLogOffset", 0),
                  "commitOrRollback": state.sys_flag, "fromTransactionCheck": True,
                  "msgId": msg.uniq_key or cmd.get_str("msgId") or "",
                  "transactionId": cmd.get_str("transactionId") or msg.uniq_key or ""}
        try:
            await self.instance.pool.oneway(addr, RemotingCommand.request(
                RequestCode.END_TRANSACTION, header, oneway=True))
        except Exception as exc:
            log.warning("END_TRANSACTION after a check, to %s: %s", addr, exc)


async def _call(fn: Callable[..., Any], *args: Any) -> LocalTransactionState:
    """Run a user callback: coroutine functions on the loop, plain ones on a worker thread; an
    exception counts as UNKNOW (the broker's check settles it later)."""
    try:
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args)
        else:
            value = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
            if inspect.isawaitable(value):
                value = await value
        return _state(value)
    except Exception:
        log.exception("transaction callback %r failed: state UNKNOW", fn)
        return LocalTransactionState.UNKNOW


class TransactionProducer:
    """Blocking facade of ``AsyncTransactionProducer``: the local-transaction callback runs in
    the calling thread, the check listener on a worker thread."""

    def __init__(self, group: str, namesrv: str, **kwargs: Any) -> None:
        self._lt = LoopThread.shared()
        self._impl: AsyncTransactionProducer = self._lt.run(_make(group, namesrv, **kwargs))

    @property
    def group(self) -> str:
        return self._impl.group

    def start(self) -> "TransactionProducer":
        self._lt.run(self._impl.start())
        return self

    def send_message_in_transaction(self, topic: str, body: bytes,
                                    local_transaction: LocalTransaction | None = None,
                                    arg: Any = None, **kwargs: Any) -> TransactionSendResult:
        fn = local_transaction or self._impl.local_transaction
        if fn is None:
            raise ValueError("no local_transaction callback given")
        r, msg = self._lt.run(self._impl.send_half(topic, body, **kwargs))
        state = LocalTransactionState.ROLLBACK_MESSAGE
        if r.status == "SEND_OK":
            try:
                state = _state(fn(msg, arg))
            except Exception:
                log.exception("local transaction %r failed: state UNKNOW", fn)
                state = LocalTransactionState.UNKNOW
        err = self._lt.run(self._impl.end_transaction(r, state))
        return TransactionSendResult(**vars(r), local_transaction_state=state,
                                     end_transaction_error=err)

    def shutdown(self) -> None:
        self._lt.run(self._impl.shutdown())

    def __enter__(self) -> "TransactionProducer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


async def _make(group: str, namesrv: str, **kwargs: Any) -> AsyncTransactionProducer:
    return AsyncTransactionProducer(group, namesrv, **kwargs)
