"""Durable "pop" state: who received which message, until when it stays invisible, what was acked.

RocketMQ 5 keeps this state in the store itself, and so do we. A receive ("pop") writes one
*checkpoint* record and each ack writes one *ack* record, both as ordinary messages on the system
topic ``rmq_sys_REVIVE_LOG_<cluster>`` (queue 0, tags ``ck`` / ``ack``, RocketMQ's names); when a
checkpoint's invisible time passes, every message of it that was not acked is *revived*: copied
to the pop retry topic ``%RETRY%<group>_<topic>`` (RocketMQ 5's ``buildPopRetryTopicV1``; a
message read from a retry topic goes back to that one) with ``reconsume_times + 1`` (or, once the
group's attempts are used up, to ``%DLQ%<group>``) and then marked done with an ack record.
Bodies are small JSON objects::

    ck   {"g": group, "t": topic, "q": queue id, "so": start offset, "pt": pop time (ms),
          "it": invisible time (ms), "o": [[queue offset, commitlog offset], ...]}
    ack  {"g": group, "t": topic, "q": queue id, "so": start offset, "pt": pop time,
          "o": offset, or [offsets] when one AckMessage acks several of a checkpoint}

FIFO groups (``consumeMessageOrderly``) pop orderly: a checkpoint marked ``"f": 1`` (with the
delivery attempt ``"a"``, the batch end ``"e"`` and the offsets already acked ``"k"``) locks its
queue for the group until every message is acked — then the group's offset moves to the end —
or until it expires; the next receive then delivers the unacked messages again, in order, with
the attempt + 1, as a new checkpoint that supersedes the old one (no retry topic). Past the
group's attempts the batch goes to ``%DLQ%<group>`` and the queue moves on.

Where RocketMQ differs: its revive service consumes the revive topic through its own delay
queues and merges ck/ack pairs in a buffer; here the live checkpoints are held in memory (they
are few: only what is in flight) and rebuilt at start by replaying the revive queue from the
*revive offset* — the revive-queue offset of the oldest checkpoint still open, committed as the
consumer offset of group ``CID_RMQ_SYS_REVIVE_GROUP`` and persisted with the other consumer
offsets. A record is never changed in place, so a crash at any point loses nothing: an ack
written just before a crash is replayed; a revive copied but not yet marked is copied again
(at-least-once, as RocketMQ). Pop moves the group's consumer offset forward right away (as
RocketMQ's ``PopMessageProcessor`` does for unordered pops), so 4.x consumers of the same group
and 5.x consumers share one offset table.

The receipt handle a client gets is RocketMQ's ``ExtraInfoUtil`` layout:
``startOffset popTime invisibleTime reviveQueueId topicType brokerName queueId offset
[commitLogOffset]`` (topic type 0 = the topic, 1 = the group's retry topic; revive queue 999 =
an orderly pop, RocketMQ's ``POP_ORDER_REVIVE_QUEUE``). The gRPC door hands out all nine
fields; a remoting client builds the first eight itself from POP_MESSAGE's response header
(``startOffsetInfo``, ``msgOffsetInfo``), so the commitlog offset is optional (-1) and always
looked up in the checkpoint.

Both doors share this state: it lives in the broker (``services.pop``), the gRPC proxy and the
remoting processors (``processors.pop``) are two ways in.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG = "ck"
ACK_TAG = "ack"
RETRY_PREFIX = "%RETRY%"
TOPIC_TYPE_NORMAL = "0"
TOPIC_TYPE_RETRY = "1"
ORDER_REVIVE_QUEUE = 999  # RocketMQ's KeyBuilder.POP_ORDER_REVIVE_QUEUE: an orderly pop's handle


def pop_retry_topic(group: str, topic: str) -> str:
    """Where ``group``'s revived messages of ``topic`` go and are popped from:
    ``%RETRY%<group>_<topic>`` (RocketMQ 5.3.3: ``KeyBuilder.buildPopRetryTopicV1``, since
    ``enableRetryTopicV2`` is off by default); a retry topic is its own."""
    return topic if topic.startswith(RETRY_PREFIX) else f"{RETRY_PREFIX}{group}_{topic}"


def revive_topic(cluster: str) -> str:
    return f"rmq_sys_REVIVE_LOG_{cluster}"


@dataclass(frozen=True)
class ReceiptHandle:
    start_offset: int
    pop_time: int
    invisible_ms: int
    revive_queue_id: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return " ".join(str(v) for v in (self.start_offset, self.pop_time, self.invisible_ms,
                                          self.revive_queue_id, self.topic_type, self.broker_name,
                                          self.queue_id, self.offset, self.commitlog_offset))

    @classmethod
    def decode(cls, s: str) -> "ReceiptHandle":
        parts = s.split(" ")
        if len(parts) < 8:
            raise ValueError(f"receipt handle {s!r} has {len(parts)} fields, want 8 or 9")
        try:
            return cls(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4],
                       parts[5], int(parts[6]), int(parts[7]),
                       int(parts[8]) if len(parts) > 8 else -1)
        except ValueError as exc:
            raise ValueError(f"receipt handle {s!r} is malformed: {exc}") from None

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    def real_topic(self, topic: str, group: str) -> str:
        return pop_retry_topic(group, topic) if self.topic_type == TOPIC_TYPE_RETRY else topic


CkKey = tuple[str, str, int, int, int]  # group, stored topic, queue id, start offset, pop time


@dataclass
class Checkpoint:
    group: str
    topic: str  # the topic read: the user's topic or its pop retry topic %RETRY%<group>_<topic>
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_ms: int
    pending: dict[int, int] = field(default_factory=dict)  # queue offset -> commitlog offset
    revive_offset: int = -1  # where the ck record sits in the revive queue
    fifo: bool = False  # an orderly pop: the queue stays locked until all is acked or it expires
    attempt: int = 1  # FIFO: which delivery of these messages this is
    end: int = -1  # FIFO: the queue offset after the batch (committed once all is acked)
    acked: set[int] = field(default_factory=set)  # FIFO: offsets of the batch already acked

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def deadline(self) -> int:
        return self.pop_time + self.invisible_ms

    def to_json(self) -> dict:
        d = {"g": self.group, "t": self.topic, "q": self.queue_id, "so": self.start_offset,
             "pt": self.pop_time, "it": self.invisible_ms,
             "o": [[o, c] for o, c in sorted(self.pending.items())]}
        if self.fifo:
            d.update(f=1, a=self.attempt, e=self.end, k=sorted(self.acked))
        return d

    @classmethod
    def from_json(cls, d: dict, revive_offset: int) -> "Checkpoint":
        return cls(str(d["g"]), str(d["t"]), int(d["q"]), int(d["so"]), int(d["pt"]),
                   int(d["it"]), {int(o): int(c) for o, c in d["o"]}, revive_offset,
                   bool(d.get("f")), int(d.get("a", 1)), int(d.get("e", -1)),
                   {int(k) for k in d.get("k", ())})

    @property
    def queue_key(self) -> tuple[str, str, int]:
        return (self.group, self.topic, self.queue_id)


class PopState:
    """The live checkpoints and the records that make them durable.

    ``write(tags, body) -> revive queue offset`` stores one revive record (blocking, the
    caller's thread); ``read(offset) -> [(queue offset, tags, body)]`` reads the revive queue
    from ``offset`` (empty at the end). ``commit_revive_offset(offset)`` records how far the
    revive queue is fully resolved. Every method here may block on the store; call them off the
    event loop.
    """

    def __init__(self, broker_name: str, write: Callable[[str, bytes], int],
                 commit_revive_offset: Callable[[int], None],
                 clock: Callable[[], int] = lambda: int(time.time() * 1000),
                 on_fifo_done: Callable[["Checkpoint"], None] = lambda ck: None) -> None:
        self.broker_name = broker_name
        self._write = write
        self._commit = commit_revive_offset
        self._clock = clock
        self._on_fifo_done = on_fifo_done
        self._lock = threading.Lock()
        self._cks: dict[CkKey, Checkpoint] = {}
        self._fifo: dict[tuple[str, str, int], Checkpoint] = {}  # the open FIFO ck per queue
        self._revive_end = 0  # revive queue offset just past the last record we know

    # -- start-up ------------------------------------------------------------------------------
    def replay(self, records: Iterable[tuple[int, str, bytes]]) -> int:
        """Rebuild the live checkpoints from revive records; returns how many are open."""
        for qoff, tags, body in records:
            self._revive_end = max(self._revive_end, qoff + 1)
            try:
                d = json.loads(body)
                if tags == CK_TAG:
                    ck = Checkpoint.from_json(d, qoff)
                    if ck.pending:
                        self._add(ck)
                elif tags == ACK_TAG:
                    key = (str(d["g"]), str(d["t"]), int(d["q"]), int(d["so"]), int(d["pt"]))
                    ck = self._cks.get(key)
                    offsets = d["o"] if isinstance(d["o"], list) else [d["o"]]
                    for o in offsets if ck is not None else ():
                        self._resolve_one(ck, int(o))
            except (ValueError, KeyError, TypeError):
                continue  # a record we do not understand: not ours to act on
        return len(self._cks)

    def _add(self, ck: Checkpoint) -> None:
        """Track ``ck`` (caller holds the lock or is single-threaded); a FIFO ck replaces the
        queue's previous one (a redelivery supersedes the expired batch)."""
        if ck.fifo:
            old = self._fifo.get(ck.queue_key)
            if old is not None:
                self._cks.pop(old.key, None)
            self._fifo[ck.queue_key] = ck
        self._cks[ck.key] = ck

    def _resolve_one(self, ck: Checkpoint, queue_offset: int) -> bool:
        """One message of ``ck`` is done; True when that finished a FIFO batch."""
        if ck.pending.pop(queue_offset, None) is not None and ck.fifo:
            ck.acked.add(queue_offset)
        if ck.pending:
            return False
        self._cks.pop(ck.key, None)
        if ck.fifo and self._fifo.get(ck.queue_key) is ck:
            del self._fifo[ck.queue_key]
            self._on_fifo_done(ck)
            return True
        return False

    # -- pop, ack, change invisible time ---------------------------------------------------------
    def checkpoint(self, group: str, topic: str, queue_id: int, pop_time: int, invisible_ms: int,
                   offsets: list[tuple[int, int]], *, fifo: bool = False, attempt: int = 1,
                   end: int = -1, acked: set[int] | None = None) -> Checkpoint:
        """Record that ``offsets`` ([(queue offset, commitlog offset)]) were handed out."""
        ck = Checkpoint(group, topic, queue_id, offsets[0][0], pop_time, invisible_ms,
                        dict(offsets), fifo=fifo, attempt=attempt, end=end,
                        acked=set(acked or ()))
        ck.revive_offset = self._write(CK_TAG, json.dumps(ck.to_json()).encode())
        with self._lock:
            self._add(ck)
            self._revive_end = max(self._revive_end, ck.revive_offset + 1)
        return ck

    def fifo_checkpoint(self, group: str, topic: str, queue_id: int) -> Checkpoint | None:
        """The open FIFO batch of ``group`` on a queue (expired or not), if any."""
        with self._lock:
            return self._fifo.get((group, topic, queue_id))

    def handle(self, ck: Checkpoint, queue_offset: int) -> ReceiptHandle:
        ttype = TOPIC_TYPE_RETRY if ck.topic.startswith(RETRY_PREFIX) else TOPIC_TYPE_NORMAL
        rqid = ORDER_REVIVE_QUEUE if ck.fifo else 0
        return ReceiptHandle(ck.start_offset, ck.pop_time, ck.invisible_ms, rqid, ttype,
                             self.broker_name, ck.queue_id, queue_offset, ck.pending[queue_offset])

    def find(self, group: str, topic: str, rh: ReceiptHandle) -> Checkpoint | None:
        """The open checkpoint ``rh`` points at, if its message is still pending."""
        key = (group, rh.real_topic(topic, group), rh.queue_id, rh.start_offset, rh.pop_time)
        with self._lock:
            ck = self._cks.get(key)
            return ck if ck is not None and rh.offset in ck.pending else None

    def ack(self, ck: Checkpoint, queue_offset: int | list[int]) -> None:
        """Mark messages of ``ck`` done (acked, changed or revived): one ack record for all of
        them (RocketMQ's batch ack), then forget them."""
        offsets = queue_offset if isinstance(queue_offset, list) else [queue_offset]
        body = {"g": ck.group, "t": ck.topic, "q": ck.queue_id, "so": ck.start_offset,
                "pt": ck.pop_time, "o": offsets[0] if len(offsets) == 1 else offsets}
        qoff = self._write(ACK_TAG, json.dumps(body).encode())
        with self._lock:
            self._revive_end = max(self._revive_end, qoff + 1)
            for o in offsets:
                self._resolve_one(ck, o)

    def change_invisible(self, ck: Checkpoint, queue_offset: int, invisible_ms: int
                         ) -> ReceiptHandle:
        """A new checkpoint for one message, invisible for ``invisible_ms`` from now; the old
        one is acked for it. Returns the new handle."""
        clog = ck.pending[queue_offset]
        if ck.fifo:  # the batch keeps its lock and its key: move the whole batch's deadline
            with self._lock:
                ck.invisible_ms = self._clock() - ck.pop_time + invisible_ms
                snapshot = json.dumps(ck.to_json()).encode()
            qoff = self._write(CK_TAG, snapshot)  # replaces the earlier record on replay
            with self._lock:
                self._revive_end = max(self._revive_end, qoff + 1)
            return self.handle(ck, queue_offset)
        new = self.checkpoint(ck.group, ck.topic, ck.queue_id, self._clock(), invisible_ms,
                              [(queue_offset, clog)])
        self.ack(ck, queue_offset)
        return self.handle(new, queue_offset)

    # -- revive --------------------------------------------------------------------------------
    def due(self, now: int | None = None) -> list[tuple[Checkpoint, int, int]]:
        """(checkpoint, queue offset, commitlog offset) of every pending message whose
        invisible time has passed."""
        now = self._clock() if now is None else now
        with self._lock:  # FIFO batches are not revived: the next receive redelivers them
            return [(ck, o, c) for ck in self._cks.values() if ck.deadline <= now and not ck.fifo
                    for o, c in sorted(ck.pending.items())]

    def next_deadline(self) -> int | None:
        with self._lock:
            return min((ck.deadline for ck in self._cks.values()), default=None)

    def commit_revive_offset(self) -> int:
        """Commit the revive offset: the oldest open checkpoint, or the end of the queue."""
        with self._lock:
            offset = min((ck.revive_offset for ck in self._cks.values()),
                         default=self._revive_end)
        self._commit(offset)
        return offset

    def open_checkpoints(self) -> int:
        with self._lock:
            return len(self._cks)

    def pending_count(self, group: str) -> int:
        with self._lock:
            return sum(len(ck.pending) for ck in self._cks.values() if ck.group == group)
