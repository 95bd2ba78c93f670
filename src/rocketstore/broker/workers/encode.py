"""A worker's half of a plain send: the header read, the rules checked, the record encoded.

``plain_send(cmd, peer, settings)`` returns the ``link.Put`` a SEND_MESSAGE (10) or
SEND_MESSAGE_V2 (310) becomes, or None when the send is not plain and the whole frame goes to
the writer instead, to be answered by ``processors.send`` exactly as in one process. Not plain:
a batch (320 or ``batch=true``), ACL on (the writer checks every request), a slave, a negative
queue id, a topic outside ``check_topic``'s rule or starting with ``%`` (retry and dead-letter
routing), a delay level, timer properties, a transactional message, and anything
``encode_message`` refuses (too large, bad properties) — the writer then gives the error
answer. What is done here is what ``processors.send`` and the store's put path do to such a
message: the CLUSTER property, a UNIQ_KEY when missing (``generateUniqKey``), born host = the
client's address, born time = the header's or now, store host = the broker's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...format.message import (PROPERTY_CLUSTER, PROPERTY_DELAY_TIME_LEVEL,
                               PROPERTY_TRANSACTION_PREPARED,
                               PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, STOREHOSTADDRESS_V6_FLAG,
                               TRANSACTION_MASK, Message,
                               create_uniq_key, encode_message, string_to_properties)
from ...remoting.codes import RequestCode
from ...remoting.command import RemotingCommand
from ...remoting.header import send_header_v1
from ...store.put_path import check_topic
from .link import Put

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2)


@dataclass(frozen=True)
class Settings:
    """What a worker knows of the broker (fixed for its life; the writer restarts workers on a
    change it cannot pass on)."""
    cluster_name: str
    store_host: str
    generate_uniq_key: bool
    max_message_size: int
    fast_sends: bool  # False on a slave, and for workers with ACL on: every frame to the writer

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def plain_send(cmd: RemotingCommand, peer: str, seq: int, conn: int,
               s: Settings) -> Put | None:
    if not s.fast_sends or cmd.code not in SEND_CODES or cmd.is_response:
        return None
    f = cmd.ext_fields
    h = f if "topic" in f else send_header_v1(f)
    if str(h.get("batch", "")).lower() in ("true", "1"):
        return None
    topic = h.get("topic") or ""
    if topic.startswith("%") or check_topic(topic) is not None:
        return None
    get = h.get
    try:
        qid = int(get("queueId") or 0)
        flag = int(get("flag") or 0)
        sys_flag = int(get("sysFlag") or 0)
        born = int(get("bornTimestamp") or 0) or int(time.time() * 1000)
        reconsume = int(get("reconsumeTimes") or 0)
        dq = int(get("defaultTopicQueueNums") or 0)
    except ValueError:
        return None  # the writer answers the malformed header
    if qid < 0 or sys_flag & TRANSACTION_MASK or not -32768 <= dq <= 32767:
        return None
    raw = get("properties") or ""
    props = string_to_properties(raw)
    if "TIMER_" in raw and any(k.startswith("TIMER_") for k in props):
        return None
    if props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0") or \
            props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true":
        return None
    props[PROPERTY_CLUSTER] = s.cluster_name
    if s.generate_uniq_key and PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_key()
    body = cmd.body or b""
    msg = Message(topic=topic, body=body, properties=props, queue_id=qid, flag=flag,
                  sys_flag=sys_flag, reconsume_times=reconsume)
    try:
        enc = encode_message(msg, props, born_timestamp=born, born_host=peer,
                             store_host=s.store_host, max_body_size=s.max_message_size)
    except (ValueError, TypeError):
        return None
    data = enc.data
    host = 20 if enc.sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    tlen = len(topic.encode())
    # after the store time: store host, reconsume times (4), prepared offset (8), body length
    # (4), body, topic length (1), topic, properties length (2), properties
    props_off = enc.store_ts_pos + 8 + host + 16 + len(body) + 1 + tlen + 2
    return Put(seq, conn, qid, enc.sys_flag, enc.store_ts_pos, len(body), dq, props_off, topic,
               data)


def send_response(cmd: RemotingCommand, code: int, queue_id: int, queue_offset: int, msg_id: str,
                  remark: str) -> RemotingCommand:
    """The answer to a plain send the fast path put: the send processor's header on success
    (msgId, queueId, queueOffset), else the code and why."""
    if msg_id:
        return cmd.response(code, {"msgId": msg_id, "queueId": queue_id,
                                   "queueOffset": queue_offset, "MSG_REGION": "DefaultRegion",
                                   "TRACE_ON": "true"})
    return cmd.response(code, remark=remark or None)
