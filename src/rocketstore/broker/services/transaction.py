"""Transactional messages as RocketMQ 4.9 keeps them: half and op topics, END_TRANSACTION (37)
and the check service that asks producers about undecided ones (CHECK_TRANSACTION_STATE, 39).

Records (all ordinary CommitLog records; nothing here is a file of its own)::

    RMQ_SYS_TRANS_HALF_TOPIC q0     a prepared message: sysFlag's transaction bits reset to
                                    NOT_TYPE, REAL_TOPIC / REAL_QID naming where it goes on commit
    RMQ_SYS_TRANS_OP_HALF_TOPIC q0  one record per decided half message: TAGS "d", body = the
                                    half message's queue offset in ASCII; KEYS = the transaction
                                    id (the half message's UNIQ_KEY: our addition, see below);
                                    a batched END_TRANSACTION writes RocketMQ 5's merged form,
                                    body "o1,o2,...," (up to OP_MERGE), KEYS every txid
    <REAL_TOPIC> q<REAL_QID>        the committed copy: sysFlag COMMIT_TYPE,
                                    preparedTransactionOffset = the half record's CommitLog offset
    TRANS_CHECK_MAX_TIME_TOPIC q0   half messages given up after transactionCheckMax checks
    consumerOffset.json             "RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS" and
                                    "RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS": how far the
                                    check service has settled each queue

Theory of operation (RocketMQ's ``TransactionalMessageBridge``, ``EndTransactionProcessor``,
``TransactionalMessageServiceImpl``): a send whose ``TRAN_MSG`` property is true (or whose
sysFlag says PREPARED) is stored as a half message, which no consumer sees. END_TRANSACTION
names the half record by CommitLog offset; COMMIT puts the committed copy on the real topic and
then writes the op record, ROLLBACK writes only the op record. The check service walks the half
queue from its settled offset: a half message with an op record is done; one younger than
``transactionTimeOut`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) stops the walk until the next
pass; an older one is written again at the end of the half queue with ``TRANSACTION_CHECK_TIMES``
+ 1 and the producer group (``PGROUP``) is asked about the new copy over one live connection.
After ``transactionCheckMax`` checks it goes to TRANS_CHECK_MAX_TIME_TOPIC, as 4.9.7 does. The
settled offsets only move past records that are done or copied forward, so a restart (even a
SIGKILL) loses no undecided half message; at worst a producer is asked twice.

Batches (rocketstore's own, ``transactionBatchEnable``; RocketMQ refuses a prepared batch): a
SEND_BATCH_MESSAGE whose header and messages are all prepared is stored as one half message per
entry, in one append (``processors.send``), and a batched END_TRANSACTION
(``end_transactions``) decides many half records with the same checks and the same
exactly-once rule as one by one, putting their committed copies in one append and their op
records in another. Check-back sees only single half messages either way. The half records of
the last ``RECENT_MAX`` batched halves are kept from their put (``remember_halves``); older ones
are read back from the CommitLog by offset (``half_from_record``: a few unpacks, not a decode).

Packed half messages (rocketstore's own, ``transactionPackEnable``): a prepared send whose
``RS_TXN_PACKED`` property counts the entries of its body, a batch in SEND_BATCH_MESSAGE's
encoding. It is stored as ONE half record; a COMMIT stores its entries on the real topic and
queue in one append, each as a plain batch send would store it (its own body, flag and
properties; sysFlag COMMIT, preparedTransactionOffset the half record's offset), a ROLLBACK
none. Its prepare checks every entry (``packed_entries``): the count, a UNIQ_KEY each, none
twice, the last one the half's own — so the transaction id is the last row's UNIQ_KEY, and
the real topic holds that key exactly when the whole batch was committed (an append keeps a
prefix of its records) — and none prepared, delayed, timed or with an empty property. Once
the half record is stored its committed records are encoded (``remember_packed``, the last
``PACKED_KEPT_MAX`` rows' kept), so the commit, which the committer waits for, only appends.
One decision per batch, one op record per half record. A half record stored before this
broker started may have had a commit cut short by a crash in the middle of its append: the
commit then looks its rows up by UNIQ_KEY (a binary search over the index, ``_stored_prefix``)
and stores only those missing.

Exactly once, where RocketMQ can commit twice: every half copy of one transaction shares its
UNIQ_KEY. Before committing, the service asks whether that transaction was already decided —
in memory for decisions made since start (the last ``MAX_REMEMBERED``; the keys of older ones
in ``ForgottenKeys``' Bloom filters, so a key not there needs no lookup), otherwise through the
index: a COMMIT_TYPE record with
that key on the real topic, or an op record with that key (so a late or repeated COMMIT, a
check answer for an older copy, or a crash between the committed copy and its op record never
yields a second delivery, and a rollback is never overturned). RocketMQ's own op records carry
no key; for those, the op records not yet settled are read once into memory. On start, lookups
wait until the reput has indexed what was in the CommitLog at start.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any, Callable

import numpy as np

from ...format.message import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY
from ...format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_KEYS, PROPERTY_PRODUCER_GROUP,
                               PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_TAGS,
                               PROPERTY_TRANSACTION_PACKED, PROPERTY_TRANSACTION_PREPARED,
                               PROPERTY_WAIT_STORE_MSG_OK,
                               TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE,
                               TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE,
                               EncodedMessage, Message, MessageExt, encode_batch, format_host,
                               record_bytes, string_to_properties)
from ...format.record import (BODY_POS, BORNHOST_POS, BORNHOST_V6_FLAG, HEAD,
                              MESSAGE_MAGIC_CODE, STOREHOSTADDRESS_V6_FLAG)
from ...format.timer_layout import TIMER_PROPERTIES
from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.message_batch import BatchEntry, decode_batch
from ..state.topic_validator import (TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC,
                                     TRANS_OP_HALF_TOPIC)

log = logging.getLogger(__name__)

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = TRANS_OP_HALF_TOPIC
CHECK_MAX_TIME_TOPIC = TRANS_CHECK_MAX_TIME_TOPIC
SYS_GROUP = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: owner of the settled offsets
REMOVE_TAG = "d"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
MAX_PROCESS_TIME_MS = 60_000  # one queue's share of a check pass
OP_BATCH = 32
MAX_REMEMBERED = 100_000  # decisions kept in memory (older ones are found through the index)
_STATE_SHIFT = 4  # a remembered decision: its state in the low bits (TRANSACTION_*_TYPE < 16)
_STATE_BITS = (1 << _STATE_SHIFT) - 1
RECENT_MAX = 65_536  # half records of batches kept for a batched END_TRANSACTION
PACKED_KEPT_MAX = 65_536  # rows of packed half messages whose committed records are kept encoded
OP_MERGE = 256  # half offsets per op record of a batched END_TRANSACTION (KEYS stay < 32 KiB)
_STORED = ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
# a batched END_TRANSACTION's answer for an entry that went well: one object, so callers find
# the failures among thousands of entries by identity
_ENDED: tuple[int, str | None] = (ResponseCode.SUCCESS, None)
_STATE_NAMES = {TRANSACTION_COMMIT_TYPE: "COMMIT", TRANSACTION_ROLLBACK_TYPE: "ROLLBACK"}


@dataclass
class TransactionConfig:
    """BrokerConfig's transaction keys (ms) plus the store's ``fileReservedTime`` (hours)."""

    timeout_ms: int = 6_000  # transactionTimeOut
    check_interval_ms: int = 60_000  # transactionCheckInterval
    check_max: int = 15  # transactionCheckMax
    file_reserved_time_h: int = 72


# ---- pure record transformations ------------------------------------------------------------
def is_transactional(msg: Message) -> bool:
    """A half message to be: ``TRAN_MSG`` true (Java's ``Boolean.parseBoolean``) or PREPARED,
    except a delayed retry (clients before 4.6.1 sent those back with the property kept)."""
    props = msg.properties or {}
    if msg.reconsume_times > 0 and props.get(PROPERTY_DELAY_TIME_LEVEL, "0") not in ("", "0"):
        return False
    return props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true" or \
        msg.sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE


def to_half(msg: Message) -> Message:
    """``parseHalfMessageInner``: the record stored for a prepared send. A delay level is
    dropped (RocketMQ's clients clear it; the committed message is delivered at once)."""
    props = msg.all_properties()
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    return Message(topic=HALF_TOPIC, body=msg.body, properties=props, queue_id=0, flag=msg.flag,
                   sys_flag=msg.sys_flag & ~TRANSACTION_MASK, born_timestamp=msg.born_timestamp,
                   born_host=msg.born_host, store_host=msg.store_host,
                   reconsume_times=msg.reconsume_times)


def committed_message(half: MessageExt) -> Message:
    """``endMessageTransaction``: the copy delivered on the real topic, with the UNIQ_KEY of
    the half message. RocketMQ 4.9.7 clears REAL_TOPIC, REAL_QID and TRAN_MSG only after it has
    serialised the properties, so its committed records still carry them (and a consumed
    message re-sent as is becomes a half message again); we store what it means to store."""
    props = dict(half.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC)
    qid = int(props.pop(PROPERTY_REAL_QUEUE_ID))
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    return Message(topic=topic, body=half.body, properties=props, queue_id=qid, flag=half.flag,
                   sys_flag=(half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
                   born_timestamp=half.born_timestamp, born_host=half.born_host,
                   store_host=half.store_host, reconsume_times=half.reconsume_times,
                   prepared_transaction_offset=half.commitlog_offset)


def packed_entries(msg: Message | MessageExt, max_bytes: int | None = None) -> list[BatchEntry]:
    """The entries of a packed half message (``RS_TXN_PACKED``, ``transactionPackEnable``),
    checked as its prepare checks them; ``ValueError`` says what is wrong. As many as the
    property says, each with a UNIQ_KEY of its own, none twice, the last one the half
    message's own (the transaction id: a committed transaction is found by its last row),
    none prepared, delayed or timed (a committed half is delivered at once)."""
    props = msg.properties or {}
    try:
        count = int(props.get(PROPERTY_TRANSACTION_PACKED, ""))
    except ValueError:
        raise ValueError(f"{PROPERTY_TRANSACTION_PACKED} must be an entry count, not "
                         f"{props.get(PROPERTY_TRANSACTION_PACKED)!r}") from None
    entries = decode_batch(bytes(msg.body), max_bytes=max_bytes)
    if count <= 0 or len(entries) != count:
        raise ValueError(f"a packed half message of {len(entries)} entries says {count}")
    keys = [e.properties.get(PROPERTY_UNIQ_KEY) for e in entries]
    if None in keys or "" in keys:
        raise ValueError(f"packed entry {keys.index(None if None in keys else '')} has no "
                         f"{PROPERTY_UNIQ_KEY}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"a packed half message names a {PROPERTY_UNIQ_KEY} twice")
    if keys[-1] != props.get(PROPERTY_UNIQ_KEY):
        raise ValueError(f"a packed half message's {PROPERTY_UNIQ_KEY} must be its last "
                         f"entry's")
    refused = {PROPERTY_TRANSACTION_PREPARED, PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTIES}
    for i, e in enumerate(entries):
        if not refused.isdisjoint(e.properties):
            name = sorted(refused.intersection(e.properties))[0]
            raise ValueError(f"packed entry {i} carries {name}: an entry is delivered as it is "
                             f"on commit")
        if "" in e.properties.values():  # (what the record encoder refuses)
            raise ValueError(f"packed entry {i} has a property without a value")
    return entries


def packed_copies(half: Message | MessageExt, entries: list[BatchEntry], commitlog_offset: int,
                  *, now: int, host: str, max_body_size: int) -> list[EncodedMessage]:
    """The committed records of a packed half message (stored at ``commitlog_offset``): each
    entry on the real topic and queue with its own body, flag and properties, sysFlag COMMIT,
    preparedTransactionOffset the half's offset, born timestamp and hosts the half's — one
    ``encode_batch``. Raises what it raises (``ValueError`` and kin)."""
    props = half.properties or {}
    topic, qid = props[PROPERTY_REAL_TOPIC], int(props[PROPERTY_REAL_QUEUE_ID])
    sf = (half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    bt, bh, sh = half.born_timestamp or now, half.born_host or host, half.store_host or host
    rt, pto = half.reconsume_times, commitlog_offset
    msgs = [Message(topic, e.body, None, None, e.properties, qid, e.flag, sf, bt, bh, sh, rt, pto)
            for e in entries]
    return encode_batch(msgs, now=now, default_host=host, max_body_size=max_body_size,
                        generate_uniq_key=False)[0]


class KeptHalf:
    """A half record of a stored batch as a batched END_TRANSACTION reads it (the fields of
    ``MessageExt`` it uses): the message put, its properties as stored and where it went —
    built per record when the batch is stored, so kept light (slots, no dataclass)."""

    __slots__ = ("properties", "body", "queue_id", "queue_offset", "commitlog_offset", "flag",
                 "sys_flag", "born_timestamp", "born_host", "store_host", "reconsume_times",
                 "uniq_key")
    topic = HALF_TOPIC

    def __init__(self, msg: Message, properties: dict[str, str], queue_offset: int,
                 commitlog_offset: int, host: str) -> None:
        self.properties = properties
        self.body = msg.body if type(msg.body) is bytes else bytes(msg.body)
        self.queue_id, self.queue_offset = msg.queue_id, queue_offset
        self.commitlog_offset = commitlog_offset
        self.flag, self.sys_flag, self.born_timestamp = msg.flag, msg.sys_flag, msg.born_timestamp
        self.born_host = msg.born_host or host
        self.store_host = msg.store_host or host
        self.reconsume_times = msg.reconsume_times
        self.uniq_key = properties[PROPERTY_UNIQ_KEY]


# a half record's fields from BORNHOST_POS to the body when both hosts are IPv4 (the usual
# case, read in one unpack): born host and port, store timestamp, store host and port,
# reconsume times, prepared transaction offset, body length
_V4_FIELDS = struct.Struct(">4si q 4si iqi")
assert BORNHOST_POS + _V4_FIELDS.size == BODY_POS
_H16 = struct.Struct(">h")
_HALF_TOPIC_BYTES = HALF_TOPIC.encode()
NOT_A_HALF = "not a half record"


def half_from_record(rec: memoryview) -> KeptHalf | str | None:
    """The ``KeptHalf`` of a stored record (a batched END_TRANSACTION's half that is no longer
    kept from its put): read in a few unpacks instead of a full decode. ``NOT_A_HALF`` for a
    record of another topic; None for anything unusual (IPv6 hosts, the v2 layout, no
    UNIQ_KEY, lengths that do not add up), which ``decode_message`` then reads."""
    try:
        (size, magic, _, queue_id, flag, queue_offset, phys, sys_flag,
         born_ts) = HEAD.unpack_from(rec, 0)
        if magic != MESSAGE_MAGIC_CODE or sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
            return None
        born_addr, born_port, _, store_addr, store_port, times, _, body_len = \
            _V4_FIELDS.unpack_from(rec, BORNHOST_POS)
        tl_pos = BODY_POS + body_len
        if body_len < 0 or tl_pos + 3 > size:
            return None
        topic_len = rec[tl_pos]
        p = tl_pos + 1 + topic_len
        if rec[tl_pos + 1:p] != _HALF_TOPIC_BYTES:
            return NOT_A_HALF
        props_len = _H16.unpack_from(rec, p)[0]
        if p + 2 + props_len != size:
            return None
        props = string_to_properties(bytes(rec[p + 2:p + 2 + props_len]).decode("utf-8",
                                                                                "replace"))
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if not uniq:
            return None
    except (struct.error, IndexError, ValueError):
        return None
    h = KeptHalf.__new__(KeptHalf)
    h.properties, h.body, h.uniq_key = props, bytes(rec[BODY_POS:tl_pos]), uniq
    h.queue_id, h.queue_offset, h.commitlog_offset = queue_id, queue_offset, phys
    h.flag, h.sys_flag, h.born_timestamp = flag, sys_flag, born_ts
    h.born_host, h.store_host = format_host(born_addr, born_port), format_host(store_addr,
                                                                               store_port)
    h.reconsume_times = times
    return h


def renewed_half(half: MessageExt, props: dict[str, str]) -> Message:
    """``renewHalfMessageInner``: the same half message again, at the end of its queue."""
    return Message(topic=half.topic, body=half.body, properties=props, queue_id=half.queue_id,
                   flag=half.flag, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
                   born_host=half.born_host, store_host=half.store_host,
                   reconsume_times=half.reconsume_times)


def op_message(half: MessageExt) -> Message:
    """``addRemoveTagInTransactionOp``: "this half record is decided"."""
    props = {PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT_STORE_MSG_OK: "false"}
    if half.uniq_key:
        props[PROPERTY_KEYS] = half.uniq_key
    return Message(topic=OP_TOPIC, body=str(half.queue_offset).encode(), properties=props,
                   queue_id=half.queue_id, born_timestamp=int(time.time() * 1000))


def discard_message(half: MessageExt) -> Message:
    """``DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner``."""
    return Message(topic=CHECK_MAX_TIME_TOPIC, body=half.body, properties=dict(half.properties),
                   queue_id=0, flag=half.flag, sys_flag=half.sys_flag,
                   born_timestamp=half.born_timestamp, born_host=half.born_host,
                   store_host=half.store_host, reconsume_times=half.reconsume_times)


def check_request(half: MessageExt) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (oneway) about ``half``; the body is the message as the producer
    sent it (real topic and queue), encoded like a stored record (``MessageDecoder.encode``)."""
    uniq = half.uniq_key
    header = {"tranStateTableOffset": half.queue_offset, "commitLogOffset": half.commitlog_offset,
              "msgId": uniq, "transactionId": uniq, "offsetMsgId": half.msg_id}
    real = replace(half, topic=half.properties.get(PROPERTY_REAL_TOPIC, half.topic),
                   queue_id=int(half.properties.get(PROPERTY_REAL_QUEUE_ID, half.queue_id)))
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header,
                                   record_bytes(real), oneway=True, language="JAVA")


@dataclass
class EndTransactionRequest:
    """EndTransactionRequestHeader."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str = ""

    @classmethod
    def from_command(cls, cmd: RemotingCommand) -> "EndTransactionRequest":
        return cls(cmd.require_str("producerGroup"), cmd.require_int("tranStateTableOffset"),
                   cmd.require_int("commitLogOffset"), cmd.require_int("commitOrRollback"),
                   cmd.get_bool("fromTransactionCheck"), cmd.get_str("msgId") or "",
                   cmd.get_str("transactionId") or "")


@dataclass
class CheckRequest:
    group: str
    command: RemotingCommand


def op_offsets(m: MessageExt) -> list[int]:
    """The half queue offsets an op record names: one (RocketMQ 4.9: "12") or many (RocketMQ 5
    and our batched END_TRANSACTION: "12,13,14,"); none for anything else."""
    if m.tags != REMOVE_TAG:
        return []
    try:
        return [int(p) for p in m.body.decode("ascii").split(",") if p]
    except (UnicodeDecodeError, ValueError):
        return []


class _OpScan:
    """The op queue read from its settled offset: which half offsets are decided, and which op
    records are done with (their half record lies before the settled half offset)."""

    def __init__(self, store: Any, queue_id: int, op_offset: int, half_offset: int) -> None:
        self.store, self.queue_id, self.half_offset = store, queue_id, half_offset
        self.base = self.next = op_offset
        self.removed: dict[int, list[int]] = {}
        self.seen: set[int] = set()  # every half offset an op record read so far names
        self.done: list[int] = []
        self.pending: dict[int, int] = {}  # op record -> how many of its halves are unsettled
        self.exhausted = False
        self.fill()

    def fill(self) -> None:
        g = self.store.get_message(SYS_GROUP, OP_TOPIC, self.queue_id, self.next, OP_BATCH, None)
        msgs = g.messages or []
        if not msgs:
            if g.next_begin_offset > self.next and not self.done and not self.removed:
                self.base = self.next = g.next_begin_offset  # below the queue's min offset
                return self.fill()
            self.exhausted = True
            return
        for m in msgs:
            offs = op_offsets(m)
            self.seen.update(offs)
            live = [o for o in offs if o >= self.half_offset]
            if not live:  # settled already, or not an op record
                self.done.append(m.queue_offset)
                continue
            self.pending[m.queue_offset] = len(live)
            for o in live:
                self.removed.setdefault(o, []).append(m.queue_offset)
        self.next = max(self.next, g.next_begin_offset, msgs[-1].queue_offset + 1)

    def pop(self, half_off: int) -> bool:
        ops = self.removed.pop(half_off, None)
        if ops is None:
            return False
        for q in ops:  # an op record is done once every half it names is
            left = self.pending.get(q, 1) - 1
            if left <= 0:
                self.pending.pop(q, None)
                self.done.append(q)
            else:
                self.pending[q] = left
        return True

    def find(self, half_off: int) -> bool:
        """Read the rest of the op queue until ``half_off`` turns up."""
        while half_off not in self.seen and not self.exhausted:
            self.fill()
        return self.pop(half_off) or half_off in self.seen

    def settled_offset(self) -> int:
        off = self.base
        for o in sorted(set(self.done)):
            if o == off:
                off += 1
            elif o > off:
                break
        return off


class ForgottenKeys:
    """The UNIQ_KEYs of decisions forgotten past ``MAX_REMEMBERED``, as Bloom filters (numpy):
    a key they do not hold was certainly not among them, so a half stored after the start
    whose key is neither remembered nor here is undecided without an index lookup; a key they
    may hold (a false positive about 0.2% of the time) is looked up. Each generation takes
    ``capacity`` keys in ``2 ** bits`` bits (2 MiB for a million); past ``generations`` the
    oldest is dropped and ``add`` returns the newest CommitLog end its decisions were made at
    (the service's ``_fresh_from`` moves there, as it did per forgotten decision before)."""

    HASHES = 4

    def __init__(self, capacity: int = 1 << 20, generations: int = 4, bits: int = 24) -> None:
        self.capacity, self.generations = capacity, generations
        self.mask = np.uint64((1 << bits) - 1)
        self._bytes = 1 << (bits - 3)
        self._gens: list[list[Any]] = []  # [bit array, keys added, newest mark] per generation
        self.count = 0  # keys in the live generations

    def _positions(self, keys: list[str]) -> np.ndarray:
        """``HASHES`` bit positions per key (double hashing of Python's 64-bit ``hash``)."""
        h = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)).view(np.uint64)
        h1 = h & self.mask
        h2 = (h >> np.uint64(40)) | np.uint64(1)
        return (h1[None, :] + np.arange(self.HASHES, dtype=np.uint64)[:, None] * h2[None, :]) \
            & self.mask

    def add(self, keys: list[str], mark: int) -> int | None:
        """Hold ``keys`` (forgotten at CommitLog end ``mark`` or before). Returns the mark up
        to which decisions are now forgotten for good (a generation dropped), else None."""
        dropped = None
        i = 0
        while i < len(keys):
            if not self._gens or self._gens[-1][1] >= self.capacity:
                self._gens.append([np.zeros(self._bytes, dtype=np.uint8), 0, 0])
                if len(self._gens) > self.generations:
                    old = self._gens.pop(0)
                    self.count -= old[1]
                    dropped = max(dropped or 0, old[2])
            gen = self._gens[-1]
            part = keys[i:i + self.capacity - gen[1]]
            pos = self._positions(part).ravel()
            np.bitwise_or.at(gen[0], (pos >> np.uint64(3)).astype(np.intp),
                             (np.uint8(1) << (pos & np.uint64(7)).astype(np.uint8)))
            gen[1] += len(part)
            gen[2] = max(gen[2], mark)
            self.count += len(part)
            i += len(part)
        return dropped

    def may_hold(self, keys: list[str]) -> np.ndarray:
        """Per key: whether it may be a forgotten one (False: certainly not)."""
        out = np.zeros(len(keys), dtype=bool)
        if not self._gens or not keys:
            return out
        pos = self._positions(keys)
        byte, bit = (pos >> np.uint64(3)).astype(np.intp), (pos & np.uint64(7)).astype(np.uint8)
        for bits, _, _ in self._gens:
            out |= ((bits[byte] >> bit) & 1).all(axis=0)
        return out


class TransactionalMessageService:
    """Half messages, END_TRANSACTION and one check pass, over the store API (blocking calls;
    the broker runs them on its executor)."""

    def __init__(self, store: Any, topics: Any, offsets: Any, put: Callable[[Message], Any],
                 config: TransactionConfig) -> None:
        self.store, self.topics, self.offsets, self.put = store, topics, offsets, put
        self.config = config
        self._locks = [threading.Lock() for _ in range(64)]
        # txid -> its decision (COMMIT/ROLLBACK/NOT, the low 4 bits) and the CommitLog's end
        # when it was made (the rest), oldest first
        self._decided: OrderedDict[str, int] = OrderedDict()
        self._decided_lock = threading.Lock()
        # a half record stored from here on has every decision made after it in memory or
        # in ``_forgotten`` (which says "maybe" for those, and the index answers): at start the
        # CommitLog's end; when ``_forgotten`` drops its oldest generation, the CommitLog's end
        # when the newest of those decisions was made (older halves: ask the index)
        self._fresh_from = store.get_max_phy_offset()
        self._start_phy = self._fresh_from
        self._forgotten = ForgottenKeys()  # (``_decided_lock``)
        self._caught_up = False
        self._op_offsets: set[tuple[int, int]] | None = None  # half records with an op record,
        # from the settled op offsets on (loaded on first use, pruned as the check settles)
        # half records of recent batches as stored (CommitLog offset -> record): a batched
        # END_TRANSACTION takes them from here instead of reading and decoding each again
        self._recent: OrderedDict[int, KeptHalf] = OrderedDict()
        self._recent_lock = threading.Lock()
        # the committed records of recent packed half records, encoded once the half record
        # was stored (CommitLog offset -> records; ``_packed_rows`` of them in all): the
        # commit, which the committer waits for, only appends them
        self._packed: OrderedDict[int, list[EncodedMessage]] = OrderedDict()
        self._packed_rows = 0

    def promoted(self) -> None:
        """This store's broker became the master (controller mode): what the slave stored came
        by replication, decisions included, which this service never saw. From here on it is
        treated as a restart's store: halves stored before now are looked up in the index."""
        with self._decided_lock:
            self._fresh_from = self._start_phy = self.store.get_max_phy_offset()
            self._caught_up = False
            self._op_offsets = None

    # -- prepare ----------------------------------------------------------------------------------
    def half_message(self, msg: Message) -> Message:
        """The half record for a prepared send (creates the system topics on first use)."""
        self._system_topics()
        return to_half(msg)

    def packed_half(self, msg: Message, max_bytes: int | None = None
                    ) -> tuple[Message, list[BatchEntry]]:
        """The half record for a prepared send that packs a batch (``RS_TXN_PACKED``) and its
        entries, checked (``packed_entries``: ``ValueError``)."""
        entries = packed_entries(msg, max_bytes)
        return self.half_message(msg), entries

    def remember_packed(self, half: Message, result: Any, entries: list[BatchEntry]) -> None:
        """A stored packed half record (``half`` as put, ``result`` its put's): its committed
        records, encoded now — beside the sends, not in the commit the committer waits for —
        and kept while fewer than ``PACKED_KEPT_MAX`` rows are kept."""
        mid = getattr(result, "msg_id", None) or ""
        if len(mid) not in (32, 56):
            return
        offset = int(mid[-16:], 16)  # an offset msgId ends with the CommitLog offset
        cfg = self.store.cfg
        try:
            recs = packed_copies(half, entries, offset, now=int(time.time() * 1000),
                                 host=cfg.store_host, max_body_size=cfg.max_message_size)
        except (KeyError, ValueError, TypeError, struct.error):
            return  # the commit encodes it again and answers why it cannot be stored
        with self._recent_lock:
            self._packed[offset] = recs
            self._packed_rows += len(recs)
            while self._packed_rows > PACKED_KEPT_MAX and self._packed:
                self._packed_rows -= len(self._packed.popitem(last=False)[1])

    def _committed_records(self, half: MessageExt, now: int) -> list[EncodedMessage]:
        """The records a COMMIT of ``half`` stores: its committed copy, or for a packed half
        record its entries — less those already stored when the half record is older than
        this broker's start (a crash in the middle of an earlier commit's append, which
        keeps a prefix of it). Raises ``ValueError`` and kin for what cannot be stored."""
        from ...format.message import encode_committed
        cfg = self.store.cfg
        if PROPERTY_TRANSACTION_PACKED not in half.properties:
            rec = encode_committed([half], now=now, host=cfg.store_host,
                                   max_body_size=cfg.max_message_size)[0]
            if isinstance(rec, Exception):
                raise rec
            return [rec]
        with self._recent_lock:  # encoded when it was stored (a check's copy is not kept)
            recs = self._packed.pop(half.commitlog_offset, None)
            if recs is not None:
                self._packed_rows -= len(recs)
                return recs
        entries = packed_entries(half, cfg.max_message_size)
        if half.commitlog_offset < self._start_phy and not self.store_index_off():
            entries = entries[self._stored_prefix(half.properties[PROPERTY_REAL_TOPIC],
                                                  entries):]
        return packed_copies(half, entries, half.commitlog_offset, now=now, host=cfg.store_host,
                             max_body_size=cfg.max_message_size) if entries else []

    def _stored_prefix(self, topic: str, entries: list[BatchEntry]) -> int:
        """How many of a packed half's entries the real topic holds committed already (an
        append keeps a prefix of its records: a binary search by UNIQ_KEY over the index)."""
        self._await_startup_dispatch()

        def stored(i: int) -> bool:
            key = entries[i].properties[PROPERTY_UNIQ_KEY]
            return any(m.uniq_key == key and m.sys_flag & TRANSACTION_MASK ==
                       TRANSACTION_COMMIT_TYPE for m in self._query(topic, key))
        if not stored(0):
            return 0
        lo, hi = 1, len(entries)  # entries[:lo] stored; entries[hi:] not (the last: decision)
        while lo < hi:
            mid = (lo + hi) // 2
            if stored(mid):
                lo = mid + 1
            else:
                hi = mid
        log.warning("packed half message %s: %d of %d entries were committed before a restart; "
                    "the rest are committed now", entries[-1].properties[PROPERTY_UNIQ_KEY],
                    lo, len(entries))
        return lo

    def half_batch(self, base: Message, entries: list[tuple[bytes, dict[str, str], int]]
                   ) -> list[Message]:
        """``half_message`` of each entry (body, properties, flag) of a prepared batch whose
        other fields ``base`` gives: the same records, built once per entry instead of as a
        message and then its half (``properties`` dicts are taken over)."""
        self._system_topics()
        sys_flag = base.sys_flag & ~TRANSACTION_MASK
        extra: dict[str, str] = {}
        if base.tags:
            extra[PROPERTY_TAGS] = base.tags
        if base.keys:
            keys = base.keys if isinstance(base.keys, str) else " ".join(base.keys)
            if keys:
                extra[PROPERTY_KEYS] = keys
        extra[PROPERTY_REAL_TOPIC] = base.topic
        extra[PROPERTY_REAL_QUEUE_ID] = str(base.queue_id)
        born_ts, born_host, store_host = base.born_timestamp, base.born_host, base.store_host
        times = base.reconsume_times
        out = []
        for body, props, flag in entries:
            props.update(extra)
            props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
            out.append(Message(HALF_TOPIC, body, None, None, props, 0, flag, sys_flag, born_ts,
                               born_host, store_host, times))
        return out

    def _system_topics(self) -> None:
        for topic in (HALF_TOPIC, OP_TOPIC):
            if self.topics.get(topic) is None:
                self.topics.create(topic, 1)

    def remember_halves(self, halves: list[Message], result: Any) -> None:
        """A stored batch of half records (``halves`` as put, ``result`` the put's), kept for
        ``end_transactions``: the record each would read back, for those that carried their
        UNIQ_KEY and born timestamp (as every send does). A half record's properties dict is
        shared with the message put (``half_message`` made it; nothing changes it after)."""
        ids = result.msg_ids or []
        if len(ids) != len(halves):
            return
        host = self.store.cfg.store_host
        q0 = result.queue_offset
        kept = []
        for i, (m, mid) in enumerate(zip(halves, ids)):
            props = m.properties if not (m.tags or m.keys) else m.all_properties()
            if props is None or PROPERTY_UNIQ_KEY not in props or m.born_timestamp is None:
                continue  # the store fills these in: only a read shows them
            off = int(mid[-16:], 16)  # an offset msgId ends with the CommitLog offset
            kept.append((off, KeptHalf(m, props, q0 + i, off, host)))
        with self._recent_lock:
            self._recent.update(kept)
            while len(self._recent) > RECENT_MAX:
                self._recent.popitem(last=False)

    # -- END_TRANSACTION ------------------------------------------------------------------------
    def end_transaction(self, req: EndTransactionRequest) -> tuple[int, str | None] | None:
        """Commit or roll back one half message; (response code, remark), or None when the
        producer only reported UNKNOW (RocketMQ sends no answer then)."""
        if req.commit_or_rollback not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            if req.commit_or_rollback != TRANSACTION_NOT_TYPE:
                log.warning("END_TRANSACTION with commitOrRollback=%s from group %s ignored",
                            req.commit_or_rollback, req.producer_group)
            return None
        half = self._look(req.commit_log_offset)
        if half is None or half.topic != HALF_TOPIC:
            return ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
        if half.properties.get(PROPERTY_PRODUCER_GROUP) != req.producer_group:
            return ResponseCode.SYSTEM_ERROR, "The producer group wrong"
        if half.queue_offset != req.tran_state_table_offset:
            return ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
        with self._lock_for(half):
            return self._decide(half, req.commit_or_rollback)

    def end_transactions(self, group: str, entries: list[tuple[int, int]], state: int
                         ) -> list[tuple[int, str | None]]:
        """END_TRANSACTION of many half messages at once (rocketstore's batched form, see
        ``processors.transaction``): ``entries`` are (tranStateTableOffset, commitLogOffset)
        pairs, all ended with ``state``. Each is checked and decided as ``end_transaction``
        would, but the committed copies go in with one append and the op records with
        another. A (response code, remark) per entry."""
        if state not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return [(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {state} cannot be batched")
                    for _ in entries]
        out: list[tuple[int, str | None]] = [_ENDED] * len(entries)
        halves: list[MessageExt] = []
        where: list[int] = []  # the entry of each of ``halves``
        with self._recent_lock:
            pop = self._recent.pop
            recent = [pop(c, None) for _, c in entries]
        if None in recent:  # read back from the CommitLog (a write larger than RECENT_MAX)
            self._read_back(entries, recent)
        for i, ((queue_offset, cl_offset), half) in enumerate(zip(entries, recent)):
            if half is NOT_A_HALF:
                out[i] = ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
                continue
            if half is None:  # (a kept half record is one of the half topic's)
                half = self._look(cl_offset)
                if half is None or half.topic != HALF_TOPIC:
                    out[i] = ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"
                    continue
            if half.properties.get(PROPERTY_PRODUCER_GROUP) != group:
                out[i] = ResponseCode.SYSTEM_ERROR, "The producer group wrong"
            elif half.queue_offset != queue_offset:
                out[i] = ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
            else:
                halves.append(half)
                where.append(i)
        n_locks = len(self._locks)
        if len(halves) >= n_locks:  # (a batch of 512 names every stripe anyway)
            picked = list(range(n_locks))
        else:
            picked = sorted({hash(h.uniq_key or h.commitlog_offset) % n_locks for h in halves})
        for k in picked:  # in one order: no two batches wait for each other
            self._locks[k].acquire()
        try:
            self._decide_many(halves, where, state, out)
        finally:
            for k in reversed(picked):
                self._locks[k].release()
        return out

    def _decide_many(self, halves: list[MessageExt], where: list[int], state: int,
                     out: list[tuple[int, str | None]]) -> None:
        """``_decide`` for many halves (their locks held; ``where``: the answer of each in
        ``out``): two appends instead of 2N puts. The usual batch — every half undecided, no
        transaction twice — is seen at once (set operations) and skips the per-half loop."""
        from ...format.message import EncodedMessage, encode_committed
        cfg = self.store.cfg
        keys = [h.uniq_key for h in halves]
        priors = self._decisions(halves, keys)
        if priors.count(None) == len(priors) and len(set(keys)) == len(keys):
            todo, todo_where = halves, where
        else:
            todo, todo_where = [], []
            seen: set[str] = set()
            for i, half, uniq, prior in zip(where, halves, keys, priors):
                if prior is None and uniq in seen:
                    prior = state  # the same transaction twice in one batch: decided by the first
                if prior is not None:
                    if prior not in (state, TRANSACTION_NOT_TYPE):
                        done = "committed" if prior == TRANSACTION_COMMIT_TYPE else "rolled back"
                        out[i] = (ResponseCode.SYSTEM_ERROR,
                                  f"transaction {uniq} was already {done}")
                    continue
                if uniq:
                    seen.add(uniq)
                todo.append(half)
                todo_where.append(i)
        ok = _ENDED
        if state == TRANSACTION_COMMIT_TYPE and todo:
            now = int(time.time() * 1000)
            if any(PROPERTY_TRANSACTION_PACKED in h.properties for h in todo):
                recs, rec_where, rec_halves = self._records_of(todo, todo_where, out, now)
            else:
                copies = encode_committed(todo, now=now, host=cfg.store_host,
                                          max_body_size=cfg.max_message_size)
                if set(map(type, copies)) == {EncodedMessage}:
                    recs, rec_where, rec_halves = copies, todo_where, todo
                else:
                    recs, rec_where, rec_halves = [], [], []
                    for i, half, rec in zip(todo_where, todo, copies):
                        if type(rec) is EncodedMessage:
                            recs.append(rec)
                            rec_where.append(i)
                            rec_halves.append(half)
                        else:
                            out[i] = (ResponseCode.MESSAGE_ILLEGAL,
                                      f"commit of {half.uniq_key} failed: {rec}")
            results = self.store.append(recs, detail=False) if recs else []
            # (detail=False: a few shared results; the usual answer is one stored result)
            if not results or results.count(results[0]) != len(results) \
                    or results[0].status.name not in _STORED:
                for i, half, r in zip(rec_where, rec_halves, results):
                    if r.status.name not in _STORED:
                        code = (ResponseCode.MESSAGE_ILLEGAL if r.status.name in (
                            "MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED")
                            else ResponseCode.SYSTEM_ERROR)
                        out[i] = code, (f"commit of {half.uniq_key} failed: {r.status.name} "
                                        f"{r.error or ''}")
        if out.count(ok) == len(out):  # (one shared object: an identity scan in C)
            self._remember_many(todo, state)
            ended = halves
        else:
            self._remember_many([h for i, h in zip(todo_where, todo) if out[i] is ok], state)
            ended = [h for i, h in zip(where, halves) if out[i] is ok]
        # a committed transaction is found by its committed copy's UNIQ_KEY: its op records
        # need not name it in KEYS (a rolled back one has no copy: its op records do)
        self._write_ops(ended, name_keys=state != TRANSACTION_COMMIT_TYPE)
        if state != TRANSACTION_COMMIT_TYPE and self._packed:
            self._drop_packed(ended)

    def _records_of(self, todo: list[MessageExt], todo_where: list[int],
                    out: list[tuple[int, str | None]], now: int
                    ) -> tuple[list[EncodedMessage], list[int], list[MessageExt]]:
        """``_committed_records`` of each half (packed ones among them): the records, and the
        answer slot and half of each record; a half that cannot be committed is answered in
        ``out`` instead."""
        recs: list[EncodedMessage] = []
        rec_where: list[int] = []
        rec_halves: list[MessageExt] = []
        for i, half in zip(todo_where, todo):
            try:
                mine = self._committed_records(half, now)
            except (KeyError, ValueError, TypeError, struct.error) as exc:
                out[i] = (ResponseCode.MESSAGE_ILLEGAL, f"commit of {half.uniq_key} failed: {exc}")
                continue
            recs += mine
            rec_where += [i] * len(mine)
            rec_halves += [half] * len(mine)
        return recs, rec_where, rec_halves

    def _write_ops(self, halves: list[MessageExt], name_keys: bool = True) -> None:
        """``_write_op_once`` for many half records: their op records in one append
        (``name_keys``: KEYS lists their transaction ids)."""
        from ...format.message import encode_message
        known = self._known_ops()
        cfg = self.store.cfg
        qids = {h.queue_id for h in halves}
        by_queue = {qids.pop(): halves} if len(qids) == 1 else {}
        for h in halves if qids else ():
            by_queue.setdefault(h.queue_id, []).append(h)
        groups: list[tuple[int, list[int], list[str]]] = []  # (queue, half offsets, txids)
        for qid in sorted(by_queue):
            mine = by_queue[qid]
            floor = self.offsets.query(SYS_GROUP, HALF_TOPIC, qid)
            offs = [h.queue_offset for h in mine]
            txids = [h.uniq_key or "" for h in mine] if name_keys else []
            if not (offs and min(offs) >= floor and len(set(offs)) == len(offs)
                    and known.isdisjoint(zip(repeat(qid), offs))):
                # some named twice, settled by the check or with an op record already
                picked: dict[int, str] = {}
                for k, o in enumerate(offs):
                    if o >= floor and (qid, o) not in known and o not in picked:
                        picked[o] = txids[k] if name_keys else ""
                offs = list(picked)
                txids = list(picked.values()) if name_keys else []
            groups += [(qid, offs[i:i + OP_MERGE], txids[i:i + OP_MERGE])
                       for i in range(0, len(offs), OP_MERGE)]
        recs = []
        now = int(time.time() * 1000)
        for qid, offs, txids in groups:  # RocketMQ 5's merged op record: "o1,o2,...,"
            props = {PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT_STORE_MSG_OK: "false"}
            named = " ".join(t for t in txids if t)  # KEYS: the transaction ids
            if named:
                props[PROPERTY_KEYS] = named
            m = Message(topic=OP_TOPIC, body=(",".join(map(str, offs)) + ",").encode(),
                        properties=props, queue_id=qid, born_timestamp=now)
            recs.append(encode_message(m, m.all_properties(), born_timestamp=now,
                                       born_host=cfg.store_host, store_host=cfg.store_host,
                                       max_body_size=cfg.max_message_size))
        if not recs:
            return
        for (qid, offs, _), r in zip(groups, self.store.append(recs)):
            if r.status.name in _STORED:
                known.update(zip(repeat(qid), offs))
            else:  # the check service asks again; the decision answers it
                log.error("op record for %d half offsets from %d not written: %s", len(offs),
                          offs[0], r.status.name)

    def _decide(self, half: MessageExt, state: int) -> tuple[int, str | None]:
        prior = self.decision(half)
        if prior is not None:
            self._write_op_once(half)
            if prior in (state, TRANSACTION_NOT_TYPE):
                return ResponseCode.SUCCESS, None
            return (ResponseCode.SYSTEM_ERROR, f"transaction {half.uniq_key} was already "
                    f"{'committed' if prior == TRANSACTION_COMMIT_TYPE else 'rolled back'}")
        if state == TRANSACTION_COMMIT_TYPE:
            if PROPERTY_TRANSACTION_PACKED in half.properties:  # its entries, in one append
                try:
                    recs = self._committed_records(half, int(time.time() * 1000))
                except (KeyError, ValueError, TypeError, struct.error) as exc:
                    return ResponseCode.MESSAGE_ILLEGAL, f"commit of {half.uniq_key} failed: {exc}"
                results = self.store.append(recs, detail=False) if recs else []
                r = next((r for r in results if r.status.name not in _STORED), None)
            else:
                r = self.put(committed_message(half))
                r = None if r.status.name in _STORED else r
            if r is not None:
                code = ResponseCode.MESSAGE_ILLEGAL if r.status.name in (
                    "MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED") else ResponseCode.SYSTEM_ERROR
                return code, f"commit of {half.uniq_key} failed: {r.status.name} {r.error or ''}"
        elif self._packed:
            self._drop_packed([half])
        self._remember(half, state)
        self._write_op_once(half)
        return ResponseCode.SUCCESS, None

    def _drop_packed(self, halves: list[MessageExt]) -> None:
        """Rolled back: the committed records kept for these half records are not needed."""
        with self._recent_lock:
            for h in halves:
                recs = self._packed.pop(h.commitlog_offset, None)
                if recs is not None:
                    self._packed_rows -= len(recs)

    # -- what was decided -----------------------------------------------------------------------
    def _decisions(self, halves: list[MessageExt], keys: list[str | None]
                   ) -> list[int | None]:
        """``decision`` of each half (``keys``: their UNIQ_KEYs): those decided or stored since
        start answered from memory under one lock, the others one by one."""
        out: list[int | None] = [None] * len(halves)
        if not halves:
            return out
        slow = []
        with self._decided_lock:
            decided, fresh_from = self._decided, self._fresh_from
            forgotten = self._forgotten
            maybe = forgotten.may_hold(keys) if forgotten.count else None
            if all(keys) and decided.keys().isdisjoint(keys) and \
                    min(h.commitlog_offset for h in halves) >= fresh_from and \
                    (maybe is None or not maybe.any()):
                return out  # stored since start, none decided or forgotten: undecided
            for k, (half, txid) in enumerate(zip(halves, keys)):
                if txid:
                    d = decided.get(txid)
                    if d is not None:
                        out[k] = d & _STATE_BITS
                        continue
                    if half.commitlog_offset >= fresh_from and (maybe is None or not maybe[k]):
                        continue  # as in ``decision``: undecided
                slow.append(k)
        for k in slow:
            out[k] = self.decision(halves[k])
        return out

    def decision(self, half: MessageExt) -> int | None:
        """How the transaction of ``half`` (any copy of it) was decided: COMMIT_TYPE,
        ROLLBACK_TYPE, NOT_TYPE (decided, outcome unknown), or None (undecided)."""
        txid = half.uniq_key or ""
        if txid:
            with self._decided_lock:
                d = self._decided.get(txid)
                if d is not None:
                    return d & _STATE_BITS
                # every decision made after this half record was stored was made here and is
                # still in memory: no index lookup needed for it (a transaction decided
                # before its half record was stored — a client that sent it again — is
                # answered as undecided, as it is for decisions before start)
                if half.commitlog_offset >= self._fresh_from and not (
                        self._forgotten.count and self._forgotten.may_hold([txid])[0]):
                    return None
        commits: list[MessageExt] = []
        ops: list[MessageExt] = []
        if txid and not self.store_index_off():
            self._await_startup_dispatch()
            real = half.properties.get(PROPERTY_REAL_TOPIC, "")
            commits = [m for m in self._query(real, txid) if m.uniq_key == txid
                       and m.sys_flag & TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE]
            ops = [m for m in self._query(OP_TOPIC, txid) if txid in m.keys]
        known = self._known_ops()
        for m in ops:
            known.update((m.queue_id, o) for o in op_offsets(m))
        if commits or ops:
            state = TRANSACTION_COMMIT_TYPE if commits else TRANSACTION_ROLLBACK_TYPE
        elif (half.queue_id, half.queue_offset) in known:
            state = TRANSACTION_NOT_TYPE
        else:
            return None
        self._remember(half, state)
        return state

    def _known_ops(self) -> set[tuple[int, int]]:
        """(half queue, half offset) of every op record from the settled op offsets on."""
        if self._op_offsets is None:
            known: set[tuple[int, int]] = set()
            tc = self.topics.get(HALF_TOPIC)
            for qid in range(tc.read_queue_nums if tc else 1):
                scan = _OpScan(self.store, qid, self._settled(OP_TOPIC, qid), 0)
                while not scan.exhausted:
                    scan.fill()
                known.update((qid, o) for o in scan.seen)
            self._op_offsets = known
        return self._op_offsets

    def store_index_off(self) -> bool:
        return getattr(getattr(self.store, "cfg", None), "message_index_enable", True) is False

    def _query(self, topic: str, key: str) -> list[MessageExt]:
        if not topic:
            return []
        return list(self.store.query_message(topic, key, 64).messages)

    def _remember(self, half: MessageExt, state: int) -> None:
        if not half.uniq_key:
            return
        mark = state | self.store.get_max_phy_offset() << _STATE_SHIFT
        with self._decided_lock:
            self._decided.setdefault(half.uniq_key, mark)
            self._forget_oldest()

    def _remember_many(self, halves: list[MessageExt], state: int) -> None:
        mark = state | self.store.get_max_phy_offset() << _STATE_SHIFT
        with self._decided_lock:
            keep = self._decided.setdefault
            for half in halves:
                uniq = half.uniq_key
                if uniq:
                    keep(uniq, mark)
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """Past ``MAX_REMEMBERED`` decisions, forget the oldest (``_decided_lock`` held): their
        keys go to ``_forgotten``, and ``_fresh_from`` moves only when it drops a generation."""
        decided = self._decided
        extra = len(decided) - MAX_REMEMBERED
        if extra <= 0:
            return
        keys, mark = [], 0
        for _ in range(extra):
            key, m = decided.popitem(last=False)
            keys.append(key)
            mark = max(mark, m >> _STATE_SHIFT)
        dropped = self._forgotten.add(keys, mark)
        if dropped is not None:
            self._fresh_from = max(self._fresh_from, dropped)

    def _write_op_once(self, half: MessageExt) -> None:
        """The op record of this half record, unless it has one or the check settled past it."""
        key = (half.queue_id, half.queue_offset)
        known = self._known_ops()
        if key in known or half.queue_offset < self.offsets.query(SYS_GROUP, HALF_TOPIC,
                                                                  half.queue_id):
            return
        r = self.put(op_message(half))
        if r.status.name in _STORED:
            known.add(key)
        else:  # the check service asks again; the decision above answers it
            log.error("op record for %s (half offset %d) not written: %s", half.uniq_key,
                      half.queue_offset, r.status.name)

    def _await_startup_dispatch(self, timeout_s: float = 30.0) -> None:
        """Index lookups see what the CommitLog held at start once the reput got that far."""
        if self._caught_up:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.store.get_max_phy_offset() - self.store.dispatch_behind_bytes() >= self._start_phy:
                break
            time.sleep(0.01)
        self._caught_up = True

    def _read_back(self, entries: list[tuple[int, int]], halves: list[Any]) -> None:
        """Fill the gaps of ``halves`` (None: not kept) from the CommitLog with
        ``half_from_record``; what it cannot read stays None (``_look`` decodes it)."""
        records_at = getattr(self.store, "records_at", None)
        if records_at is None:
            return
        missing = [i for i, h in enumerate(halves) if h is None]
        for i, rec in zip(missing, records_at([entries[i][1] for i in missing])):
            if rec is not None:
                halves[i] = half_from_record(rec)

    def _look(self, offset: int) -> MessageExt | None:
        try:
            return self.store.look_message_by_offset(offset)
        except Exception:  # an offset that is not a record boundary
            return None

    def _lock_for(self, half: MessageExt) -> threading.Lock:
        return self._locks[hash(half.uniq_key or half.commitlog_offset) % len(self._locks)]

    # -- the check pass -------------------------------------------------------------------------
    def check(self, now_ms: Callable[[], int] | None = None) -> list[CheckRequest]:
        """One pass over every half queue: settle what was decided, copy forward and return the
        check requests for what is old enough to ask about (blocking)."""
        clock = now_ms or (lambda: int(time.time() * 1000))
        tc = self.topics.get(HALF_TOPIC)
        if tc is None:  # half records without a topic config (say, a store from elsewhere)
            if self.store.get_max_offset_in_queue(HALF_TOPIC, 0) <= 0:
                return []
            tc = self.topics.create(HALF_TOPIC, 1)
        out: list[CheckRequest] = []
        for qid in range(tc.read_queue_nums):
            out += self._check_queue(qid, clock)
        return out

    def _settled(self, topic: str, qid: int) -> int:
        off = self.offsets.query(SYS_GROUP, topic, qid)
        return off if off >= 0 else self.store.get_min_offset_in_queue(topic, qid)

    def _check_queue(self, qid: int, clock: Callable[[], int]) -> list[CheckRequest]:
        start = clock()
        half_off, op_off = self._settled(HALF_TOPIC, qid), self._settled(OP_TOPIC, qid)
        ops = _OpScan(self.store, qid, op_off, half_off)
        out: list[CheckRequest] = []
        end = self.store.get_max_offset_in_queue(HALF_TOPIC, qid)  # copies made now wait
        i, nulls = half_off, 0
        while i < end and clock() - start <= MAX_PROCESS_TIME_MS:
            if ops.pop(i):
                i += 1
                continue
            g = self.store.get_message(SYS_GROUP, HALF_TOPIC, qid, i, 1, None)
            if not g.messages:
                nulls += 1
                if nulls > 1 or g.status.name in ("NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE") \
                        or g.next_begin_offset <= i:
                    break
                i = g.next_begin_offset  # a hole (expired file): go on from the next record
                continue
            step = self._check_one(g.messages[0], i, start, clock, ops, out)
            if step is None:
                break
            i += step
        if i != half_off:
            self.offsets.commit(SYS_GROUP, HALF_TOPIC, qid, i)
            if self._op_offsets is not None:  # settled: no END_TRANSACTION names these again
                self._op_offsets = {k for k in self._op_offsets if k[0] != qid or k[1] >= i}
        new_op = ops.settled_offset()
        if new_op != op_off:
            self.offsets.commit(SYS_GROUP, OP_TOPIC, qid, new_op)
        return out

    def _check_one(self, m: MessageExt, i: int, start: int, clock: Callable[[], int],
                   ops: _OpScan, out: list[CheckRequest]) -> int | None:
        """1 when the half record at ``i`` is settled, None to stop the pass here."""
        cfg = self.config
        props = dict(m.properties)
        times = _to_int(props.get(PROPERTY_TRANSACTION_CHECK_TIMES))
        now = clock()
        if (times is not None and times >= cfg.check_max) or \
                now - m.born_timestamp > cfg.file_reserved_time_h * 3_600_000:
            return 1 if self._discard(m) else None
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(1 if times is None else times + 1)
        if m.store_timestamp >= start:
            return None  # stored during this pass
        age = now - m.born_timestamp
        immunity = cfg.timeout_ms
        imm = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        if imm is not None:
            secs = _to_int(imm)
            immunity = cfg.timeout_ms if secs in (None, -1) else secs * 1000
            if age < immunity:
                prep = _to_int(props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET))
                if prep is None:  # checkPrepareQueueOffset: copy forward, remembering where from
                    props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(m.queue_offset)
                    return 1 if self._put_ok(renewed_half(m, props)) else None
                if prep != -1:
                    if ops.find(prep) or self._settle_if_decided(m):
                        return 1
                    return 1 if self._put_ok(renewed_half(m, props)) else None
        elif 0 <= age < immunity:
            return None  # too young: the producer may still end it
        if ops.find(i):
            return 1
        if not (age > immunity or age <= -1):
            return None
        with self._lock_for(m):
            if self._settle_if_decided(m):  # decided through another copy of it
                return 1
            r = self.put(renewed_half(m, props))
        if r.status.name not in _STORED:
            log.error("half message %s not copied forward: %s", m.uniq_key, r.status.name)
            return None
        copy = replace(m, properties=props, queue_offset=r.queue_offset,
                       commitlog_offset=r.wrote_offset, msg_id=r.msg_id or "")
        group = props.get(PROPERTY_PRODUCER_GROUP)
        if group:
            out.append(CheckRequest(group, check_request(copy)))
        return 1

    def _settle_if_decided(self, m: MessageExt) -> bool:
        if self.decision(m) is None:
            return False
        self._write_op_once(m)
        return True

    def _put_ok(self, msg: Message) -> bool:
        return self.put(msg).status.name in _STORED

    def _discard(self, m: MessageExt) -> bool:
        log.error("half message %s (group %s, topic %s) checked %s times: moved to %s",
                  m.uniq_key, m.properties.get(PROPERTY_PRODUCER_GROUP),
                  m.properties.get(PROPERTY_REAL_TOPIC),
                  m.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES), CHECK_MAX_TIME_TOPIC)
        if self.topics.get(CHECK_MAX_TIME_TOPIC) is None:
            self.topics.create(CHECK_MAX_TIME_TOPIC, 1)
        return self._put_ok(discard_message(m))


def _to_int(v: str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return -1


class TransactionalMessageCheckService:
    """Runs a check pass every ``check_interval_ms`` and sends the check requests to a live
    connection of each producer group (RocketMQ's ``TransactionalMessageCheckService``)."""

    def __init__(self, service: TransactionalMessageService,
                 run: Callable[..., Any], connection_for: Callable[[str], Any]) -> None:
        self.service, self.run, self.connection_for = service, run, connection_for
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="transaction-check")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 30)
            except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
                pass

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(),
                                       self.service.config.check_interval_ms / 1000.0)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check pass failed")

    async def run_once(self) -> int:
        """One pass; returns how many producers were asked."""
        sent = 0
        missing: dict[str, int] = {}
        for req in await self.run(self.service.check):
            conn = self.connection_for(req.group)
            if conn is None:
                missing[req.group] = missing.get(req.group, 0) + 1
                continue
            try:
                conn.notify(req.command)
                sent += 1
            except Exception as exc:  # a closing connection: the next pass asks again
                log.warning("transaction check for group %s failed: %s", req.group, exc)
        for group, n in missing.items():
            log.warning("transaction check: %d half message(s) of producer group %s, which has "
                        "no live producer connection; asking again next pass", n, group)
        return sent
