"""The send rule: what a SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320)
becomes, decided in one place.

Theory of operation: ``plan_send(code, fields, body, peer, rules, topics)`` reads the request
header once (V2's single-letter names expanded, integers parsed as RocketMQ's header decoder
does) and answers with one of three typed plans:

* ``Refused(code, remark)`` — the answer is known without the store: a system topic no client may
  send to, a topic that does not exist or is not writable, a queue id past the topic's write
  queues, a header integer that is not one, a batch to a retry topic, a transactional message
  while ``rejectTransactionMessage`` is set.
* ``Put(record)`` — a plain message: no batch, delay level, timer property or transaction, a
  topic whose name the store takes, not bound for a retry topic. Its CommitLog record is encoded
  here (the CLUSTER property, a ``UNIQ_KEY`` when missing, born host = the client, born time =
  the header's or now, store host = the broker's), so the store only appends it.
* ``Whole(...)`` — everything else goes to the store's message put path (which applies delay
  levels, timer wheels and batch encoding): a batch (``transactional`` when its header says
  PREPARED: a batch of half messages, see ``processors.send``), a delayed, timer or
  transactional message, a
  client-side retry at its limit (rerouted to ``%DLQ%``), a record the encoder refused (the put
  path then gives the answer).

``topics`` is the topic lookup (``send_topic`` over the broker's topic table, which may
auto-create). A worker process has no topic table: it plans with ``topics=None``, a plain send
becomes a ``Put`` whose topic and queue the writer checks with ``check_put_topic`` — the same
checks — and any other plan goes to the writer whole. Every route (the send processor, the
one-process fast path, the worker processes) calls ``plan_send``; ``send_answer_header`` builds
the success header and ``put_failure_remark`` the failure remark of each of them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ..format.message import (PROPERTY_CLUSTER, PROPERTY_DELAY_TIME_LEVEL,
                              PROPERTY_TRANSACTION_PREPARED,
                              PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, EncodedMessage, Message,
                              create_uniq_key, encode_message, string_to_properties)
from ..format.record import STOREHOSTADDRESS_V6_FLAG, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE
from ..remoting.codes import PERM_WRITE, RequestCode, ResponseCode
from ..remoting.header import send_header_v1
from ..store.put_path import check_topic
from ..store.results import PutStatus
from .state.topic_validator import is_not_allowed_send_topic, send_forbidden_remark
from .config import BrokerConfig
from .state.topics import DLQ_PREFIX, RETRY_PREFIX, TopicConfig, TopicConfigManager, ensure_topic

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)
BATCH_CODE = RequestCode.SEND_BATCH_MESSAGE


@dataclass(frozen=True)
class SendRules:
    """What deciding a send needs to know of the broker. A worker process gets its copy at
    start (JSON; the writer restarts workers on a change it cannot pass on)."""
    cluster_name: str
    store_host: str
    generate_uniq_key: bool
    max_message_size: int
    fast_sends: bool  # False on a slave, and for workers with ACL on: every frame to the writer
    max_reconsume_times: int = 16
    reject_transaction_message: bool = False

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(slots=True)
class Refused:
    """Why a message cannot be sent: the response code and remark."""
    code: int
    remark: str


@dataclass(slots=True)
class BadHeader(Refused):
    """A header field that is not what it must be (answered SYSTEM_ERROR, as every request
    whose header does not decode: the send processor raises it as ``ValueError``)."""


@dataclass(slots=True)
class Put:
    """A plain message, its CommitLog record encoded (``record``); ``default_queue_nums``,
    ``body_len`` and ``props_off`` (where the properties start in the record) travel with it
    to a writer that checks the topic later."""
    record: EncodedMessage
    body_len: int
    default_queue_nums: int
    props_off: int

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def queue_id(self) -> int:
        return self.record.queue_id


@dataclass(slots=True)
class Whole:
    """A send for the store's message put path: ``message`` (its topic and queue already
    rerouted to ``%DLQ%`` when ``dlq``), or the batch's common fields when ``batch`` (the body
    holds the entries)."""
    message: Message
    batch: bool = False
    dlq: bool = False  # the topic is the dead-letter topic: created (1 queue) before the put
    transactional: bool = False  # stored as a half message
    why: str = ""  # what keeps it off the record route (for logs and tests)
    # the queueId the answer names: RocketMQ answers the queue the request named, also when the
    # send went to the dead-letter topic's queue 0 instead (None: the message's own queue)
    answer_queue_id: int | None = None

    @property
    def answered_queue_id(self) -> int:
        return self.message.queue_id if self.answer_queue_id is None else self.answer_queue_id


Plan = Put | Whole | Refused
TopicLookup = Callable[[str, "int | None"], "TopicConfig | Refused"]


class _BadHeader(ValueError):
    pass


def header_int(h: Mapping[str, str], name: str, default: int) -> int:
    """A header integer as RocketMQ's decoder reads it: absent, empty or "null" is the default,
    "true"/"false" are 1/0; anything else that is not an integer is refused (``ValueError``)."""
    v = h.get(name)
    if v is None or v == "" or v == "null":
        return default
    try:
        return int(v)
    except ValueError:
        if v.lower() in ("true", "false"):
            return int(v.lower() == "true")
        raise _BadHeader(f"the {name} field must be an integer, not {v!r}") from None


def send_fields(fields: Mapping[str, str]) -> Mapping[str, str]:
    """The header with V1 field names (310 and 320 use SendMessageRequestHeaderV2's letters)."""
    if "topic" in fields:
        return fields
    return send_header_v1(fields if isinstance(fields, dict) else dict(fields))


def is_batch(code: int, h: Mapping[str, str]) -> bool:
    return code == BATCH_CODE or str(h.get("batch", "")).lower() in ("true", "1")


def send_topic(topics: TopicConfigManager, config: BrokerConfig, topic: str,
               queue_nums: int | None = None) -> TopicConfig | Refused:
    """The topic a message is sent to, with every check a send makes (RocketMQ's
    ``AbstractSendMessageProcessor.msgCheck``): not a system topic no client may send to,
    existing or auto-created, writable. Send, send-reply and the gRPC SendMessage ask here."""
    if is_not_allowed_send_topic(topic):
        return Refused(ResponseCode.NO_PERMISSION, send_forbidden_remark(topic))
    try:
        tc = ensure_topic(topics, config, topic, queue_nums)
    except ValueError as exc:
        return Refused(ResponseCode.SYSTEM_ERROR, str(exc))
    if tc is None:
        return Refused(ResponseCode.TOPIC_NOT_EXIST,
                       f"topic[{topic}] not exist, apply first please!")
    if not tc.perm & PERM_WRITE:
        return Refused(ResponseCode.NO_PERMISSION,
                       f"the topic[{topic}] sending message is forbidden")
    return tc


def pick_queue_id(tc: TopicConfig, topic: str, queue_id: int) -> int | str:
    """The queue a send goes to, as RocketMQ's send processors pick it: a negative id means any
    (by the clock), an id past the topic's write queues is refused (the remark is returned)."""
    if queue_id < 0:
        return int(time.time() * 1000) % tc.write_queue_nums
    if queue_id >= tc.write_queue_nums:
        return (f"request queueId[{queue_id}] is illegal, topic {topic} "
                f"has {tc.write_queue_nums} write queues")
    return queue_id


def check_put_topic(topics: TopicLookup, put_topic: str, queue_id: int,
                    default_queue_nums: int) -> bool:
    """A worker's ``Put`` checked on the writer: the same topic checks as ``plan_send``'s
    (auto-creation included); False when the send must be handled whole."""
    tc = topics(put_topic, default_queue_nums or None)
    return not isinstance(tc, Refused) and 0 <= queue_id < tc.write_queue_nums


def plan_send(code: int, fields: Mapping[str, str], body: bytes, peer: str, rules: SendRules,
              topics: TopicLookup | None = None, now_ms: int | None = None,
              uniq_key: Callable[[], str] = create_uniq_key) -> Plan:
    """What a send request becomes (see the module text). Raises nothing for any header.
    ``now_ms`` is the born time of a header without one (None: the clock); ``uniq_key`` makes
    the UNIQ_KEY of a message without one (tests pass a deterministic one)."""
    h = send_fields(fields)
    batch = is_batch(code, h)
    topic = h.get("topic") or ""
    try:
        dq = header_int(h, "defaultTopicQueueNums", 0)
        if topics is not None:
            tc = topics(topic, dq or None)
            if isinstance(tc, Refused):
                return tc
            picked = pick_queue_id(tc, topic, header_int(h, "queueId", 0))
            if isinstance(picked, str):
                return Refused(ResponseCode.SYSTEM_ERROR, picked)
            qid = picked
        else:
            qid = header_int(h, "queueId", 0)
        flag = header_int(h, "flag", 0)
        sys_flag = header_int(h, "sysFlag", 0)
        born = header_int(h, "bornTimestamp", 0) or (
            now_ms if now_ms is not None else int(time.time() * 1000))
        reconsume = header_int(h, "reconsumeTimes", 0)
        raw_props = h.get("properties") or ""
        props = string_to_properties(raw_props)
        dlq = False
        asked_qid = None
        if topic.startswith(RETRY_PREFIX):
            max_times = header_int(h, "maxReconsumeTimes", rules.max_reconsume_times)
            if reconsume >= max_times:  # a client-side retry at the limit → DLQ
                asked_qid = qid
                topic, qid, dlq = DLQ_PREFIX + topic[len(RETRY_PREFIX):], 0, True
    except _BadHeader as exc:
        if topics is None:  # a worker: the writer answers the malformed header
            return Whole(Message(topic=topic), why="malformed header")
        return BadHeader(ResponseCode.SYSTEM_ERROR, str(exc))
    msg = Message(topic=topic, body=body, properties=props, queue_id=qid, flag=flag,
                  sys_flag=sys_flag, born_timestamp=born, born_host=peer,
                  reconsume_times=reconsume)
    if batch:
        if topic.startswith(RETRY_PREFIX):
            return Refused(ResponseCode.MESSAGE_ILLEGAL,
                           "batch request does not support retry group topic")
        if _transactional(props, sys_flag, reconsume):  # a batch of half messages: ours only
            if rules.reject_transaction_message and topics is not None:
                return Refused(ResponseCode.NO_PERMISSION,
                               "sending transaction message is forbidden")
            return Whole(msg, batch=True, dlq=dlq, transactional=True, why="transaction batch",
                         answer_queue_id=asked_qid)
        return Whole(msg, batch=True, dlq=dlq, why="batch", answer_queue_id=asked_qid)
    props[PROPERTY_CLUSTER] = rules.cluster_name  # as RocketMQ: request-reply needs it
    if _transactional(props, sys_flag, reconsume):
        if rules.reject_transaction_message and topics is not None:
            return Refused(ResponseCode.NO_PERMISSION, "sending transaction message is forbidden")
        return Whole(msg, dlq=dlq, transactional=True, why="transaction",
                     answer_queue_id=asked_qid)
    why = _not_plain(topic, qid, sys_flag, dq, raw_props, props) if not dlq else "dlq"
    if why:
        return Whole(msg, dlq=dlq, why=why, answer_queue_id=asked_qid)
    if rules.generate_uniq_key and PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key()
    try:
        enc = encode_message(msg, props, born_timestamp=born, born_host=peer,
                             store_host=rules.store_host, max_body_size=rules.max_message_size)
    except (ValueError, TypeError):  # the put path gives the answer
        return Whole(msg, why="record refused")
    host = 20 if enc.sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    # after the store time: store host, reconsume times (4), prepared offset (8), body length
    # (4), body, topic length (1), topic, properties length (2), properties
    props_off = enc.store_ts_pos + 8 + host + 16 + len(body) + 1 + len(topic.encode()) + 2
    return Put(enc, len(body), dq, props_off)


def _transactional(props: Mapping[str, str], sys_flag: int, reconsume: int) -> bool:
    """A half message to be: ``TRAN_MSG`` true (Java's ``Boolean.parseBoolean``) or PREPARED,
    except a delayed retry (clients before 4.6.1 sent those back with the property kept)."""
    if reconsume > 0 and props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return False
    return props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true" or \
        sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE


def _not_plain(topic: str, qid: int, sys_flag: int, dq: int, raw_props: str,
               props: Mapping[str, str]) -> str:
    """Why a single message is not put as a record ("" when it is)."""
    if topic.startswith("%") or check_topic(topic) is not None:
        return "topic"
    if qid < 0:
        return "queue picked by the writer"
    if sys_flag & TRANSACTION_MASK:
        return "transaction type"
    if not -32768 <= dq <= 32767:
        return "defaultTopicQueueNums"
    if "TIMER_" in raw_props and any(k.startswith("TIMER_") for k in props):
        return "timer"
    if props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return "delay"
    return ""


# -- the answers --------------------------------------------------------------------------------
_PUT_CODES = {
    "PUT_OK": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT,
    "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE,
    "SERVICE_NOT_AVAILABLE": ResponseCode.SERVICE_NOT_AVAILABLE,
    "CREATE_MAPPED_FILE_FAILED": ResponseCode.SYSTEM_ERROR,
    "MESSAGE_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL,
    "PROPERTIES_SIZE_EXCEEDED": ResponseCode.MESSAGE_ILLEGAL,
    "OS_PAGE_CACHE_BUSY": ResponseCode.SYSTEM_BUSY,
    "UNKNOWN_ERROR": ResponseCode.SYSTEM_ERROR,
    "WHEEL_TIMER_MSG_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL,  # RocketMQ 5's answers
    "WHEEL_TIMER_FLOW_CONTROL": ResponseCode.SYSTEM_ERROR,
    "WHEEL_TIMER_NOT_ENABLE": ResponseCode.SYSTEM_ERROR,
    "IN_SYNC_REPLICAS_NOT_ENOUGH": ResponseCode.SYSTEM_ERROR,  # RocketMQ 5's answer
}


def put_code(status: PutStatus) -> int:
    """The response code of a put's status."""
    return _PUT_CODES.get(status.name, ResponseCode.SYSTEM_ERROR)


def status_ok(code: int) -> bool:
    # RocketMQ answers FLUSH_*_TIMEOUT / SLAVE_NOT_AVAILABLE with the result: the message is stored
    return code in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                    ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE)


def send_answer_header(msg_id: str, queue_id: int, queue_offset: int,
                       recall_handle: str | None = None,
                       transaction_id: str | None = None) -> dict[str, object]:
    """The header of a stored send's answer (msgId comma-joined for a batch). RocketMQ 5 adds
    transactionId, the message's uniq key: its proxy ends a transaction by it."""
    return {"msgId": msg_id, "queueId": queue_id, "queueOffset": queue_offset,
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "recallHandle": recall_handle,
            "transactionId": transaction_id}


def put_failure_remark(status: PutStatus, error: str | None, batch: bool = False) -> str:
    """The remark of a send the store did not take."""
    if batch:
        return f"put messages failed: {status.name}"
    if status.name.startswith("WHEEL_TIMER"):  # RocketMQ 5's remark as it is
        return error or status.name
    if status.name == "IN_SYNC_REPLICAS_NOT_ENOUGH":
        return "in-sync replicas not enough"
    return f"put message failed: {status.name} {error or ''}"


def error_remark(exc: BaseException) -> str:
    """The remark of a send that failed with an unexpected error (as the server answers one)."""
    return f"{type(exc).__name__}: {exc}"
