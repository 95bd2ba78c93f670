"""The put path: validate, encode, append, wait for durability; every outcome is a status.

| input                                                   | status                     |
|---------------------------------------------------------|----------------------------|
| store shut down / not writeable (disk full) / a failed  | SERVICE_NOT_AVAILABLE      |
| CommitLog sync (``FlushService.last_error``) / dispatch |                            |
| failing (``ReputService.stalled``) / read-only open     |                            |
| not a Message, empty/illegal topic, topic > 127 chars,  | MESSAGE_ILLEGAL            |
| negative queue id, body > max_message_size, bad types   |                            |
| properties string > 32767 bytes                         | PROPERTIES_SIZE_EXCEEDED   |
| batch of mixed topic/queue, transactional, delayed or   | MESSAGE_ILLEGAL            |
| with timer properties                                   |                            |
| no space for a new segment                              | CREATE_MAPPED_FILE_FAILED  |
| SYNC_FLUSH and not durable within sync_flush_timeout    | FLUSH_DISK_TIMEOUT         |
| the store is a SLAVE (brokerRole)                       | SERVICE_NOT_AVAILABLE      |
| SYNC_MASTER, no slave in reach (haSlaveFallbehindMax)   | SLAVE_NOT_AVAILABLE        |
| SYNC_MASTER, no slave acknowledgement in slave_timeout  | FLUSH_SLAVE_TIMEOUT        |
| controller mode, SyncStateSet below minInSyncReplicas   | IN_SYNC_REPLICAS_NOT_ENOUGH|
| timer message: bad value, beyond timerMaxDelaySec,      | WHEEL_TIMER_MSG_ILLEGAL    |
| cancel for a past time; timer store disabled            | WHEEL_TIMER_NOT_ENABLE     |

After the flush step comes the one "wait for replicas" step (``store.ha``): on a SYNC_MASTER a
put (unless its ``WAIT`` property is "false") is answered only when a slave reported an offset
past it. The replica status wins over the flush status, as in RocketMQ. With
``defer_replica_wait`` (the broker's event loop) the put returns at once with
``replica_wait_offset`` set and the caller waits without holding a thread.

IN_SYNC_REPLICAS_NOT_ENOUGH is decided before the append (``Replicas.before_write``), as
RocketMQ 5's CommitLog does. Nothing is written for any status but PUT_OK, FLUSH_DISK_TIMEOUT,
FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE. Delayed messages
(``DELAY`` property) go to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with ``REAL_TOPIC`` and
``REAL_QID``, as RocketMQ 4.9's CommitLog does; timer messages (``TIMER_DELIVER_MS`` /
``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS``) go to ``rmq_sys_wheel_timer`` (``store/timer/``).
"""
from __future__ import annotations

import logging
import re
import time
from functools import lru_cache
from operator import attrgetter, methodcaller
from typing import TYPE_CHECKING, Protocol

from .. import _native
from ..config import StoreConfig
from ..errors import DiskFullError, StoreError
from ..format.batch import parse_delay_levels
from ..format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID,
                              PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
                              PROPERTY_WAIT_STORE_MSG_OK, SCHEDULE_TOPIC, Message, MessageTooLarge,
                              EncodedMessage, PropertiesTooLarge, create_message_ids,
                              create_uniq_key, encode_batch, encode_message)
from ..format.record import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from .commitlog import CommitLog, RecordTooLarge
from .dispatch import ReputService
from .flush import FlushService
from .results import PutMessageResult, PutStatus
from .timer.transform import TimerRejected, is_timer_message, transform_timer_message

if TYPE_CHECKING:
    from .timer import TimerMessageStore


class Replicas(Protocol):
    """What the put path asks of the store's HA service (``store.ha.HAService``)."""

    def wake(self) -> None: ...

    def before_write(self) -> PutStatus | None: ...

    def replica_status(self, end_offset: int) -> PutStatus: ...

log = logging.getLogger(__name__)

DISPATCH_RECHECK_S = 0.2  # a put waits this long for a failing dispatch to retry before refusing
_ILLEGAL_TOPIC = re.compile(r"[\x00-\x1f/\\]")
_TOPIC_OF = attrgetter("topic")
_PROPERTIES_OF = attrgetter("properties")
_WAIT_OF = methodcaller("get", PROPERTY_WAIT_STORE_MSG_OK)


@lru_cache(maxsize=4096)
def check_topic(topic: object) -> str | None:
    """Why a topic is illegal, or None."""
    if not isinstance(topic, str) or not topic:
        return "topic must be a non-empty string"
    if topic in (".", "..") or _ILLEGAL_TOPIC.search(topic):
        return f"topic {topic!r} has characters that cannot name a directory"
    if len(topic) > 127 or len(topic.encode("utf-8")) > 127:
        return "topic longer than 127"
    return None


def check_messages(msgs: list[Message], batch: bool) -> str | None:
    """Why ``msgs`` cannot be put (as one batch when ``batch``), or None."""
    if not msgs:
        return "no messages"
    first = msgs[0]
    for m in msgs:
        if not isinstance(m, Message):
            return f"expected Message, got {type(m).__name__}"
        why = check_topic(m.topic)
        if why:
            return why
        if not isinstance(m.queue_id, int) or isinstance(m.queue_id, bool) or m.queue_id < 0:
            return f"queue_id must be a non-negative int, not {m.queue_id!r}"
        if not isinstance(m.body, (bytes, bytearray, memoryview)):
            return f"body must be bytes, not {type(m.body).__name__}"
        if batch:
            if (m.topic, m.queue_id) != (first.topic, first.queue_id):
                return "a batch must have one topic and one queue"
            if m.sys_flag & TRANSACTION_MASK not in (TRANSACTION_NOT_TYPE,):
                return "a batch cannot be transactional"
    return None


check_messages_py = check_messages  # the specification of the compiled twin
_speedups = _native.load("rocketstore.store._speedups")
if _speedups is not None:
    check_messages = _speedups.check_messages  # noqa: F811


class PutPath:
    def __init__(self, cfg: StoreConfig, commitlog: CommitLog, reput: ReputService,
                 flush: FlushService) -> None:
        self.cfg = cfg
        self.commitlog = commitlog
        self.reput = reput
        self.flush = flush
        self.running = True
        self.writeable = True  # cleared by the clean service when the disk is nearly full
        self.replicas: Replicas | None = None  # store.ha.HAService when the store replicates
        self.defer_replica_wait = False
        self.sync_master = cfg.broker_role == "SYNC_MASTER"
        self._delays = parse_delay_levels(cfg.message_delay_level)
        self.timer: TimerMessageStore | None = None  # when timer_wheel_enable

    def put(self, msgs: list[Message], batch: bool, nowait: bool = False,
            defer_sync: bool = False) -> PutMessageResult | None:
        """Put ``msgs``; with ``nowait`` None means "would block, nothing written: put again
        without ``nowait``" (see ``CommitLog.append``). Under SYNC_FLUSH ``nowait`` needs
        ``defer_sync``: instead of waiting for its group commit the put returns once appended,
        with ``sync_offset`` — the caller acknowledges only after the flush service reports that
        offset durable (one report per sync serves every put below it)."""
        refused = self._refusal(nowait, defer_sync)  # (dispatch failing: RocketMQ's
        if refused is not False:                      # makeLogicsQueueError)
            return refused  # type: ignore[return-value]
        why = self._check(msgs, batch)
        if why is not None:
            return PutMessageResult(PutStatus.MESSAGE_ILLEGAL, error=why)
        return self._encode_and_append(msgs, batch, nowait, defer_sync)

    def _refusal(self, nowait: bool, defer_sync: bool) -> PutMessageResult | None | bool:
        """The store-wide reasons no put can go in now (a result), None for "would block",
        False when a put may proceed."""
        if self.cfg.read_only:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE, error="store is open read-only")
        if self.cfg.is_slave:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                    error="messages are put to the slave (brokerRole=SLAVE)")
        if nowait and ((self.cfg.sync_flush and not defer_sync)
                       or (self.sync_master and not self.defer_replica_wait)):
            return None  # a SYNC_FLUSH put waits for its group commit by definition
        if not self.running or not self.writeable:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                    error="store is shut down" if not self.running else "store not writeable")
        if self.reput.last_error is not None and not self.reput.recheck(DISPATCH_RECHECK_S):
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                    error=f"dispatch cannot progress at CommitLog offset "
                                          f"{self.reput.reput_from}: {self.reput.last_error}")
        if self.flush.last_error is not None:
            return PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                    error=f"CommitLog flush failed: {self.flush.last_error}")
        return False

    def append(self, recs: list[EncodedMessage], nowait: bool = False,
               defer_sync: bool = False, detail: bool = True) -> list[PutMessageResult] | None:
        """Put independent records encoded already (the broker's send rule: ``broker.send_rule``)
        in one append: one lock, one segment check, one dispatch feed item and one wake-up for
        all of them, and a result of its own for each (its queue offset, msgId and, under
        SYNC_FLUSH or on a SYNC_MASTER, its own offset to wait for). The same store-wide
        refusals, durability and replica steps as ``put``, without encoding again; the records
        are plain messages (no delay, timer or transaction properties). A record with an illegal
        topic gets its own refusal; the others go in. None: ``nowait`` and the append would
        block (nothing was written). ``detail=False``: the results carry only a status (and an
        error), shared between records — for a caller that needs no msgId or offset (a batched
        END_TRANSACTION's committed copies), without building one full result per record."""
        refused = self._refusal(nowait, defer_sync)
        if refused is None:
            return None
        if refused is not False:
            assert isinstance(refused, PutMessageResult)
            return [PutMessageResult(refused.status, error=refused.error) for _ in recs]
        topics = set(map(_TOPIC_OF, recs))  # (C loops: this runs for 512 records at a time)
        refusals = {t: why for t in topics if (why := check_topic(t)) is not None}
        if refusals:
            good = [rec for rec in recs if rec.topic not in refusals]
        else:
            good = recs
        if good:
            marks = list(map(_WAIT_OF, map(_PROPERTIES_OF, good)))
            waits = [True] * len(good) if "false" not in marks else [m != "false" for m in marks]
            rs = self._append(good, waits, self.cfg.store_host, nowait, defer_sync, atomic=False,
                              detail=detail)
            if rs is None:
                return None
            if not refusals:
                return rs
        else:
            rs = []
        kept = iter(rs)
        out = [PutMessageResult(PutStatus.MESSAGE_ILLEGAL, error=refusals[rec.topic])
               if rec.topic in refusals else next(kept, None) for rec in recs]
        return [r for r in out if r is not None]

    def _append(self, recs: list[EncodedMessage], waits: list[bool], store_host: str,
                nowait: bool, defer_sync: bool, atomic: bool, detail: bool = True
                ) -> list[PutMessageResult] | None:
        """Append records, then the durability and replica steps; a result per record (its
        own end offset to wait for, as a put of its own would have). ``atomic``: the records
        are one message batch (all or nothing); else records too large together for a segment
        go in one at a time."""
        replicas = self.replicas
        if replicas is not None and self.sync_master and any(waits):
            refused = replicas.before_write()  # controller mode: IN_SYNC_REPLICAS_NOT_ENOUGH
            if refused is not None:
                return self._refuse_waiting(recs, waits, refused, store_host, nowait, defer_sync)
        try:
            res = self.commitlog.append(recs, nowait=nowait)
        except RecordTooLarge as exc:
            if atomic or len(recs) == 1:
                return [PutMessageResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc))
                        for _ in recs]
            if nowait:
                return None  # (nothing written: the put thread does them one at a time)
            return [r for rec, w in zip(recs, waits)
                    for r in self._append([rec], [w], store_host, False, defer_sync, False,
                                          detail) or ()]
        except (DiskFullError, StoreError, OSError) as exc:
            log.error("cannot append: %s", exc)
            return [PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED, error=str(exc))
                    for _ in recs]
        if res is None:
            return None
        # one wait covers every record (the last one's end covers the others'); each result
        # then carries its own end offset to wait for, as a put of its own would
        st, sync_end, replica_end = self._after_append(res.end_offset, any(waits), defer_sync)
        if atomic and len(recs) > 1 and detail:  # one message batch: one result (all wait alike)
            ids = create_message_ids(store_host, res.wrote_offset, res.sizes)
            w = waits[0]
            return [PutMessageResult(st if w else PutStatus.PUT_OK, msg_id=",".join(ids),
                                     wrote_offset=res.wrote_offset, wrote_bytes=sum(res.sizes),
                                     queue_offset=res.queue_offsets[0],
                                     store_timestamp=res.store_timestamp, msg_num=len(ids),
                                     msg_ids=ids, sync_offset=res.end_offset if w and sync_end
                                     else 0, replica_wait_offset=res.end_offset
                                     if w and replica_end is not None else None)]
        if not detail:
            waited, done = PutMessageResult(st), PutMessageResult(PutStatus.PUT_OK)
            return [waited if w else done for w in waits]
        ids = create_message_ids(store_host, res.wrote_offset, res.sizes)
        out = []
        start = res.wrote_offset
        for i, n in enumerate(res.sizes):
            end = start + n
            w = waits[i]
            out.append(PutMessageResult(st if w else PutStatus.PUT_OK, msg_id=ids[i],
                                        wrote_offset=start, wrote_bytes=n,
                                        queue_offset=res.queue_offsets[i],
                                        store_timestamp=res.store_timestamp, msg_num=1,
                                        msg_ids=[ids[i]], sync_offset=end if w and sync_end else 0,
                                        replica_wait_offset=end if w and replica_end is not None
                                        else None))
            start = end
        return out

    def _refuse_waiting(self, recs: list[EncodedMessage], waits: list[bool], status: PutStatus,
                        store_host: str, nowait: bool, defer_sync: bool
                        ) -> list[PutMessageResult] | None:
        """Refuse, unwritten, the records that wait for replicas; append the others (records
        of one put whose ``WAIT`` property is "false" need no replica, as in RocketMQ)."""
        out = [PutMessageResult(status, error="in-sync replicas not enough") for _ in recs]
        keep = [i for i, w in enumerate(waits) if not w]
        if keep:
            rs = self._append([recs[i] for i in keep], [False] * len(keep), store_host, nowait,
                              defer_sync, atomic=False)
            if rs is None:
                return None
            for i, r in zip(keep, rs):
                out[i] = r
        return out

    def _encode_and_append(self, msgs: list[Message], batch: bool, nowait: bool,
                           defer_sync: bool) -> PutMessageResult | None:
        now = int(time.time() * 1000)
        cfg = self.cfg
        try:
            if batch:
                encoded, wait = encode_batch(msgs, now=now, default_host=cfg.store_host,
                                             max_body_size=cfg.max_message_size,
                                             generate_uniq_key=cfg.generate_uniq_key)
                total_body = 0
                for m in msgs:
                    total_body += len(m.body)
                if total_body > cfg.max_message_size:
                    return PutMessageResult(PutStatus.MESSAGE_ILLEGAL,
                                            error=f"batch body of {total_body} bytes exceeds max_message_size")
            else:
                encoded, wait = self._encode_one(msgs[0], now)
        except TimerRejected as exc:
            return PutMessageResult(PutStatus[exc.status], error=exc.remark)
        except PropertiesTooLarge as exc:
            return PutMessageResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, error=str(exc))
        except (MessageTooLarge, ValueError, TypeError, AttributeError) as exc:
            return PutMessageResult(PutStatus.MESSAGE_ILLEGAL, error=str(exc))
        rs = self._append(encoded, [wait] * len(encoded), msgs[0].store_host or cfg.store_host,
                          nowait, defer_sync, atomic=True)
        return None if rs is None else _one_result(rs)

    def _encode_one(self, m: Message, now: int) -> tuple[list[EncodedMessage], bool]:
        """One ``put_message``: delay and timer rules apply (a batch refuses them)."""
        cfg = self.cfg
        props = m.all_properties()
        wait = props.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"
        topic, qid = self._apply_delay(m, props)
        if cfg.generate_uniq_key and PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = create_uniq_key()
        target = m if (topic, qid) == (m.topic, m.queue_id) else _retarget(m, topic, qid)
        return [encode_message(
            target, props, born_timestamp=m.born_timestamp if m.born_timestamp is not None else now,
            born_host=m.born_host or cfg.store_host, store_host=m.store_host or cfg.store_host,
            max_body_size=cfg.max_message_size)], wait

    def _after_append(self, end: int, wait: bool, defer_sync: bool
                      ) -> tuple[PutStatus, int, int | None]:
        """The steps after an append up to ``end``: wake the reput (ASYNC_FLUSH), then durability
        (SYNC_FLUSH: wait here, or leave the wait to the caller with ``defer_sync``) and
        replicas (SYNC_MASTER: wait here, or leave it with ``defer_replica_wait``). Returns the
        status, the offset the caller must see durable (0: none) and the offset a slave must
        hold (None: none)."""
        cfg = self.cfg
        if not cfg.sync_flush:
            self.reput.wakeup()  # under SYNC_FLUSH dispatch reads durable bytes: it polls (10 ms)
        status = PutStatus.PUT_OK
        sync_offset = 0
        if cfg.sync_flush:
            if wait and defer_sync:
                sync_offset = end
                self.flush.request_sync()
            elif wait:
                if not self.flush.wait_flushed(end):
                    status = PutStatus.FLUSH_DISK_TIMEOUT
            else:
                self.flush.wakeup()
        replica_wait = None
        replicas = self.replicas
        if replicas is not None:
            replicas.wake()
            if self.sync_master and wait:
                if self.defer_replica_wait:
                    replica_wait = end
                else:
                    rs = replicas.replica_status(end)
                    if rs is not PutStatus.PUT_OK:
                        status = rs
        return status, sync_offset, replica_wait

    def _check(self, msgs: list[Message], batch: bool) -> str | None:
        return check_messages(msgs, batch)

    def _apply_delay(self, m: Message, props: dict[str, str]) -> tuple[str, int]:
        level_s = props.get(PROPERTY_DELAY_TIME_LEVEL)
        tran = m.sys_flag & TRANSACTION_MASK
        if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return m.topic, m.queue_id
        try:
            level = int(level_s) if level_s else 0
        except ValueError as exc:
            raise ValueError(f"DELAY must be an int level, not {level_s!r}") from exc
        if is_timer_message(m.topic, props, level):  # RocketMQ 5's handleScheduleMessage
            timer = self.timer
            return transform_timer_message(
                m.topic, m.queue_id, props, int(time.time() * 1000),
                enabled=timer is not None, precision_ms=self.cfg.timer_precision_ms,
                max_delay_sec=self.cfg.timer_max_delay_sec,
                is_reject=timer.is_reject if timer is not None else None)
        if level <= 0:
            return m.topic, m.queue_id
        level = min(level, len(self._delays))
        props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_REAL_TOPIC] = m.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(m.queue_id)
        return SCHEDULE_TOPIC, level - 1


def _one_result(rs: list[PutMessageResult]) -> PutMessageResult:
    """The one result of a message put (a batch's records together)."""
    first, last = rs[0], rs[-1]
    if len(rs) == 1 or first.msg_id is None:
        return first
    ids = [r.msg_id or "" for r in rs]
    return PutMessageResult(first.status, msg_id=",".join(ids), wrote_offset=first.wrote_offset,
                            wrote_bytes=sum(r.wrote_bytes for r in rs),
                            queue_offset=first.queue_offset,
                            store_timestamp=first.store_timestamp, msg_num=len(ids), msg_ids=ids,
                            sync_offset=last.sync_offset,
                            replica_wait_offset=last.replica_wait_offset)


def _retarget(m: Message, topic: str, qid: int) -> Message:
    return Message(topic=topic, body=m.body, queue_id=qid, flag=m.flag, sys_flag=m.sys_flag,
                   born_timestamp=m.born_timestamp, born_host=m.born_host, store_host=m.store_host,
                   reconsume_times=m.reconsume_times,
                   prepared_transaction_offset=m.prepared_transaction_offset)
