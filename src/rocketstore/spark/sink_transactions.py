"""The exactly-once sink's durable decisions and the process that answers the broker's checks.

Theory of operation (``deliveryGuarantee=exactly-once``). Every row goes out as a RocketMQ half
message (sysFlag PREPARED, ``TRAN_MSG=true``, ``PGROUP=<producer group>``) carrying
``RS_SPARK_TXN = <sink id>/<batch>/<task uuid>``: the sink (its state directory), the Spark
batch (a streaming batch id, or ``w-<uuid>`` for one ``df.write``) and the task attempt that
sent it. A task's commit message lists its half messages. To a broker that advertises
``transactionPackEnable=true`` in GET_BROKER_CONFIG (``rocketstore serve``) a task packs each
batch of up to ``sendBatchSize`` rows into ONE half message (its body the batch, its
transaction id its last row's UNIQ_KEY), which a COMMIT stores as those rows; to one that
advertises only ``transactionBatchEnable=true`` it sends each batch as one SEND_BATCH_MESSAGE
of half messages, each stored as its own. Either way the driver ends them with batched
END_TRANSACTIONs (``END_BATCH`` halves a request). To RocketMQ's brokers, which refuse all of
these, one request per row and per END_TRANSACTION, many in flight. The check and the answers
below treat a packed half as one half whose UNIQ_KEY is its last row's: the target holds that
key once the whole batch is stored (one append, in order). The driver's commit then

1. reads ``<state>/committed/<batch>.json``; when it is absent (the batch's first commit), writes
   it — the task uuids whose rows the batch delivers — atomically (temporary file, fsync,
   rename, fsync of the directory): **this write is the commit point**;
2. ends every listed half message: COMMIT when its task is in the record, else ROLLBACK. A
   batch write does this itself, so its rows are visible when ``save()`` returns. A stream's
   commit hands it to the responder (below; ``ending/``), which ends batch N's halves while
   batch N+1's tasks run: the commit returns once the decision is durable and batch N-1's
   halves are ended (one batch's ENDs in flight at a time). A new sink's first commit, whose
   responder is only starting, ends its own.

A replayed batch (a driver restarted after step 1, before Spark logged the batch as done) finds
the record of its first run, so the new halves are rolled back and nothing is delivered twice.
Whatever step 2 did not reach — the driver died, an END_TRANSACTION was lost, a failed task's
halves that no commit message lists — the broker asks about with CHECK_TRANSACTION_STATE, and
the *responder* answers from the record alone: COMMIT if the half's task is in its batch's
record, ROLLBACK if the record exists without it, UNKNOW (ask later) while there is no record.
An abort ends the listed halves with ROLLBACK; a ``df.write`` that aborts also records an empty
decision, so halves of its failed tasks are rolled back too.

A broker may ask about one half more than once, and each COMMIT it gets stores the message:
RocketMQ's check re-puts an undecided half (a new copy, a new offset) before it asks, so a half
the driver ends while a check is under way, or one whose answer came after the next check
round, is asked about again — and a plain "COMMIT if decided" answer stores that row twice.
So, for a half whose task the record delivers, the responder answers

* UNKNOW while a process that ends the batch's halves lives (``settling/<batch>.<pid>`` names
  it: the Python worker that runs the commit, which can outlive a killed driver JVM for a while
  and still send END_TRANSACTIONs; it rewrites the file with a stop record when done);
* ROLLBACK when the half's task is in such a stop record's ``ended`` list: the broker
  acknowledged an END_TRANSACTION COMMIT for every half of that task, so this is a re-put copy
  of a delivered row. This needs no lookup, which could miss a row stored a moment ago;
* UNKNOW for ``SETTLER_GRACE_S`` after a settler stopped short of acknowledgements for all,
  or was first seen dead without a stop record: its last END_TRANSACTIONs may still be stored;
* ROLLBACK when the target topic already holds a message with the half's UNIQ_KEY (a
  QUERY_MESSAGE by unique key on the topic's brokers): the row was delivered, by the driver's
  END_TRANSACTION or an earlier answer — this copy is redundant;
* UNKNOW when it answered COMMIT for that UNIQ_KEY less than ``ANSWER_GRACE_S`` ago and the
  message is not visible yet (the answer is on its way: one-way, as RocketMQ's is);
* else COMMIT, after appending the UNIQ_KEY to ``answered/<batch>.log`` — the durable record of
  what the responder committed, read back by the next responder after a restart.

The responder is a small detached process (``python -m rocketstore.spark.sink_transactions``)
in the producer group, one per state directory (an ``flock`` on ``responder.lock``), started
when none runs: by the driver's writer when the state directory holds a decision already (a
restarted query: the halves of the batches before may need answers), else by the first
commit, right after its decision — until then every answer would be UNKNOW, which a missing
responder gives as well, and its start-up does not compete with the tasks. It follows the
Spark driver named in ``owner`` (the JVM's pid, rewritten by every writer) and exits when that
process is gone; a restarted driver starts a new one, which answers for the dead driver's half
messages too. Credentials reach it through its
environment, never its command line.

The broker discards a half message after ``transactionCheckMax`` unanswered checks (RocketMQ:
15, one every ``transactionCheckInterval`` = 60 s): a batch must finish within that time.
"""
from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
import zlib
from array import array
from itertools import repeat
from dataclasses import dataclass, field

from ..format.message import (PROPERTY_PRODUCER_GROUP, PROPERTY_TRANSACTION_PREPARED,
                              TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE)

log = logging.getLogger(__name__)

TXN_PROPERTY = "RS_SPARK_TXN"
STATE_SUBDIR = "rocketmq-sink"  # inside a streaming query's checkpoint location


def sink_id(state_dir: str) -> str:
    return hashlib.md5(os.path.abspath(state_dir).encode("utf-8")).hexdigest()[:12]


def default_group(state_dir: str) -> str:
    return f"rocketstore_spark_eo_{sink_id(state_dir)}"


def new_task_uuid() -> str:
    return uuid.uuid4().hex


def make_tag(sid: str, batch: str, task: str) -> str:
    return f"{sid}/{batch}/{task}"


def parse_tag(tag: str) -> tuple[str, str, str] | None:
    parts = (tag or "").split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


# -- the durable record ------------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def record_path(state_dir: str, batch: str) -> str:
    return os.path.join(state_dir, "committed", f"{batch}.json")


def read_decision(state_dir: str, batch: str) -> frozenset[str] | None:
    """The task uuids batch ``batch`` delivers; None when the batch is not decided yet."""
    try:
        with open(record_path(state_dir, batch), "rb") as f:
            return frozenset(json.loads(f.read().decode("utf-8"))["tasks"])
    except FileNotFoundError:
        return None


def decide(state_dir: str, batch: str, tasks: list[str]) -> frozenset[str]:
    """Record ``tasks`` as batch ``batch``'s delivered tasks unless a decision exists; the
    decision in force (an earlier one wins: a replayed batch delivers nothing new)."""
    done = read_decision(state_dir, batch)
    if done is not None:
        return done
    d = os.path.join(state_dir, "committed")
    os.makedirs(d, exist_ok=True)
    final = record_path(state_dir, batch)
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(json.dumps({"tasks": sorted(set(tasks)), "time": int(time.time() * 1000)})
                .encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    try:  # link, not rename: if another commit of the batch won the race, its decision stands
        os.link(tmp, final)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    _fsync_dir(d)
    return read_decision(state_dir, batch) or frozenset()


# -- who is ending a batch's halves -------------------------------------------------------------
#
# ``settling/<batch>@<pid>-…``: the process ``pid`` (the one that runs the commit: a Python worker
# of the Spark driver, which outlives a killed driver JVM until pyspark's daemon notices) ends
# batch ``batch``'s halves. Written before the decision; rewritten when it stops, with when and
# the tasks whose every half it committed (the broker acknowledged each END_TRANSACTION).

# how long after a settler stopped without acknowledgements for all (or died) the responder waits
# before it looks a half up by key: an END_TRANSACTION that left before may still be stored and
# indexed, and a lookup that misses it would COMMIT the broker's re-put copy too
SETTLER_GRACE_S = 5.0


def _settler_path(state_dir: str, batch: str, pid: int) -> str:
    """A new marker's path: ``settling/<batch>@<pid>-<random>`` (one per settling, never
    reused: a stop record stays what it says)."""
    return os.path.join(state_dir, "settling", f"{batch}@{pid}-{uuid.uuid4().hex[:8]}")


def _mark_settling(state_dir: str, batch: str, pid: int | None = None) -> str:
    os.makedirs(os.path.join(state_dir, "settling"), exist_ok=True)
    pid = os.getpid() if pid is None else pid
    path = _settler_path(state_dir, batch, pid)
    _write_atomic(path, json.dumps({"pid": pid}))
    return path


def _mark_settled(path: str, ended: list[str]) -> None:
    _write_atomic(path, json.dumps({"pid": os.getpid(), "stopped": time.time(),
                                    "ended": sorted(ended)}))


@dataclass
class Settlers:
    """What the settlers of one batch say: whether one runs, the tasks whose every half a
    settler committed, and when the last one stopped (or was first seen dead) — None when none
    stopped short of acknowledgements for all."""

    live: bool = False
    ended: frozenset = frozenset()
    quiet_since: float | None = None


def settlers(state_dir: str, batch: str, first_dead: dict[str, float] | None = None) -> Settlers:
    """Batch ``batch``'s settlers. ``first_dead`` (path -> epoch seconds) remembers when a dead
    settler that left no stop record was first seen; a responder passes the same dict each
    time."""
    out = Settlers()
    ended: set[str] = set()
    d = os.path.join(state_dir, "settling")
    try:
        names = [n for n in os.listdir(d) if n.partition("@")[0] == batch]
    except FileNotFoundError:
        return out
    for name in names:
        path = os.path.join(d, name)
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        try:
            rec = json.loads(text)
            if not isinstance(rec, dict):
                rec = {"pid": int(rec)}
        except ValueError:
            continue
        if "stopped" in rec:
            ended.update(rec.get("ended") or ())
            if not rec.get("ended"):
                out.quiet_since = max(out.quiet_since or 0.0, float(rec["stopped"]))
            continue
        if _alive(int(rec.get("pid") or 0)):
            out.live = True
            continue
        seen = time.time() if first_dead is None else first_dead.setdefault(path, time.time())
        out.quiet_since = max(out.quiet_since or 0.0, seen)
    out.ended = frozenset(ended)
    return out


# how long a COMMIT answer may take to show in the store before the same key is answered
# COMMIT again (for the broker's re-put copy): 5 s let a loaded Java 4.9.7 broker, whose
# query by key waits on its index, store 23 rows twice in one CI run; a genuinely lost
# answer now waits up to 20 s, far inside transactionCheckMax (15 checks, 60 s apart)
ANSWER_GRACE_S = 20.0


class Answered:
    """The UNIQ_KEYs the responder answered COMMIT for, per batch, with when (epoch seconds):
    in memory, and appended to ``answered/<batch>.log`` so that a new responder knows them."""

    def __init__(self, state_dir: str) -> None:
        self.dir = os.path.join(state_dir, "answered")
        self.batches: dict[str, dict[str, float]] = {}

    def of(self, batch: str) -> dict[str, float]:
        if batch not in self.batches:
            got: dict[str, float] = {}
            try:
                with open(os.path.join(self.dir, f"{batch}.log")) as f:
                    for line in f:
                        key, _, when = line.strip().partition(" ")
                        if key and when:
                            got[key] = float(when)
            except FileNotFoundError:
                pass
            self.batches[batch] = got
        return self.batches[batch]

    def add(self, batch: str, key: str) -> None:
        now = time.time()
        os.makedirs(self.dir, exist_ok=True)
        fd = os.open(os.path.join(self.dir, f"{batch}.log"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, f"{key} {now:.3f}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.of(batch)[key] = now


# -- what a task sent, and how the driver ends it ----------------------------------------------

@dataclass
class Half:
    """One half message: enough to end it (END_TRANSACTION) from the driver."""

    topic: str
    broker: str
    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC: END_TRANSACTION's tranStateTableOffset
    commitlog_offset: int
    msg_id: str
    rows: int = 1  # a packed half message carries many


class HalfRun:
    """Half messages a task stored in one topic on one broker, in a form that pickles small
    (a task's commit message carries these to the driver): their offsets as ``array('q')``s
    beside the list of their UNIQ_KEYs, and the rows each carries when some are packed."""

    __slots__ = ("topic", "broker", "queue_offsets", "commitlog_offsets", "msg_ids", "rows")

    def __init__(self, topic: str, broker: str, queue_offsets: array, commitlog_offsets: array,
                 msg_ids: list[str], rows: array | None = None) -> None:
        self.topic, self.broker = topic, broker
        self.queue_offsets, self.commitlog_offsets = queue_offsets, commitlog_offsets
        self.msg_ids = msg_ids
        self.rows = rows  # rows per half; None: one each

    @classmethod
    def of(cls, topic: str, broker: str, refs) -> "HalfRun":
        """From ``HalfRef``s (or ``Half``s): where each half was stored."""
        rows = [getattr(r, "rows", 1) for r in refs]
        return cls(topic, broker, array("q", [r.queue_offset for r in refs]),
                   array("q", [r.commitlog_offset for r in refs]),
                   [r.msg_id for r in refs], array("q", rows) if set(rows) - {1} else None)

    @classmethod
    def of_run(cls, topic: str, broker: str, first_queue_offset: int,
               commitlog_offsets: array, msg_ids: list[str]) -> "HalfRun":
        """A batch's halves as ``client.transaction.send_half_run`` answers: consecutive queue
        offsets from ``first_queue_offset``."""
        return cls(topic, broker, _consecutive(first_queue_offset, len(msg_ids)),
                   commitlog_offsets, msg_ids)

    def __len__(self) -> int:
        return len(self.queue_offsets)

    def row_count(self) -> int:
        return len(self.queue_offsets) if self.rows is None else sum(self.rows)

    def __reduce__(self):
        # a few objects a run, not one a half, and small: a task's commit message goes through
        # Spark's driver (25,000 halves were 1.2 MB as arrays and plain ids, 0.13 MB so).
        # Consecutive queue offsets (a batch's) as (first, count); the ids, which share their
        # client's prefix, and the CommitLog offsets, a record size apart, zlib-compressed
        q = self.queue_offsets
        n = len(q)
        queues: object = q
        if n and q[-1] - q[0] == n - 1 and q == _consecutive(q[0], n):
            queues = (q[0], n)
        return (_half_run, (self.topic, self.broker, queues,
                            zlib.compress(_little_endian(self.commitlog_offsets), 1),
                            zlib.compress("\n".join(self.msg_ids).encode("utf-8"), 1),
                            None if self.rows is None else _little_endian(self.rows)))

    def halves(self) -> list[Half]:
        rows = self.rows if self.rows is not None else repeat(1)
        return [Half(self.topic, self.broker, q, c, i, n) for q, c, i, n in
                zip(self.queue_offsets, self.commitlog_offsets, self.msg_ids, rows)]



def _consecutive(first: int, n: int) -> array:
    return array("q", range(first, first + n))


def _little_endian(a: array) -> bytes:
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _half_run(topic: str, broker: str, queue_offsets, commitlog_offsets, msg_ids,
              rows: bytes | None = None) -> HalfRun:
    if isinstance(queue_offsets, tuple):
        queue_offsets = _consecutive(*queue_offsets)
    if isinstance(commitlog_offsets, bytes):
        commitlog_offsets = array("q", zlib.decompress(commitlog_offsets))
        if sys.byteorder == "big":
            commitlog_offsets.byteswap()
    if isinstance(msg_ids, bytes):
        msg_ids = zlib.decompress(msg_ids).decode("utf-8")
    if rows is not None:
        rows = array("q", rows)
        if sys.byteorder == "big":
            rows.byteswap()
    return HalfRun(topic, broker, queue_offsets, commitlog_offsets,
                   msg_ids.split("\n") if msg_ids else [], rows)


@dataclass
class TaskHalves:
    """What an exactly-once task sent: its uuid, its batch and its half messages as runs."""

    task: str
    batch: str
    runs: list[HalfRun] = field(default_factory=list)

    def add_run(self, topic: str, broker: str, first_queue_offset: int,
                commitlog_offsets: array, msg_ids: list[str]) -> None:
        """The halves one batch stored (``HalfRun.of_run``): a run of their own."""
        if msg_ids:
            self.runs.append(HalfRun.of_run(topic, broker, first_queue_offset,
                                            commitlog_offsets, msg_ids))

    def add_one(self, topic: str, broker: str, queue_offset: int, commitlog_offset: int,
                msg_id: str, rows: int = 1) -> None:
        """One half a single send stored (a packed one: of ``rows`` rows): onto the last run
        when it is the same queue's."""
        last = self.runs[-1] if self.runs else None
        if last is None or last.topic != topic or last.broker != broker:
            last = HalfRun(topic, broker, array("q"), array("q"), [])
            self.runs.append(last)
        if rows != 1 and last.rows is None:
            last.rows = array("q", repeat(1, len(last)))
        if last.rows is not None:
            last.rows.append(rows)
        last.queue_offsets.append(queue_offset)
        last.commitlog_offsets.append(commitlog_offset)
        last.msg_ids.append(msg_id)

    def __len__(self) -> int:
        return sum(len(r) for r in self.runs)

    @property
    def rows(self) -> int:
        return sum(r.row_count() for r in self.runs)

    @property
    def halves(self) -> list[Half]:
        return [h for r in self.runs for h in r.halves()]


def prepared_properties(props: dict, group: str, tag: str) -> dict:
    p = dict(props)
    p[PROPERTY_TRANSACTION_PREPARED] = "true"
    p[PROPERTY_PRODUCER_GROUP] = group
    p[TXN_PROPERTY] = tag
    return p


END_BATCH = 512  # half messages per batched END_TRANSACTION
END_ROWS = 4096  # rows per batched END_TRANSACTION of packed halves (its rows show as they end)


async def end_halves(ci, group: str, runs: list[HalfRun], commit: bool,
                     concurrency: int = 128) -> int:
    """End every half of ``runs``: to a broker that takes batched END_TRANSACTIONs
    (rocketstore's ``transactionBatchEnable``) ``END_BATCH`` halves a request, else one
    END_TRANSACTION each (RocketMQ's brokers); up to ``concurrency`` requests in flight either
    way. How many the broker did not acknowledge (its check settles those from the record)."""
    from ..client.transaction import (HalfRef, end_packed_at, end_transaction_at,
                                      transaction_batch_supported)

    sem = asyncio.Semaphore(concurrency)
    failed = 0
    verb = "COMMIT" if commit else "ROLLBACK"

    async def one(addr: str, h: Half) -> None:
        nonlocal failed
        header = {"producerGroup": group, "tranStateTableOffset": h.queue_offset,
                  "commitLogOffset": h.commitlog_offset,
                  "commitOrRollback": TRANSACTION_COMMIT_TYPE if commit
                  else TRANSACTION_ROLLBACK_TYPE,
                  "fromTransactionCheck": False, "msgId": h.msg_id, "transactionId": h.msg_id}
        async with sem:
            try:
                await end_transaction_at(ci, addr, header)
            except Exception as exc:  # the broker's check asks again; the record answers
                failed += 1
                log.warning("END_TRANSACTION %s of %s on %s: %s", verb, h.msg_id, h.broker, exc)

    async def chunk(addr: str, broker: str, first: HalfRef, n: int, pairs: bytes) -> None:
        nonlocal failed
        async with sem:
            try:
                await end_packed_at(ci, addr, group, first, n, pairs, commit)
            except Exception as exc:  # as above: the check settles what was not ended
                failed += n
                log.warning("END_TRANSACTION %s of %d half messages on %s: %s", verb, n, broker,
                            exc)

    by_key: dict[tuple[str, str], list[HalfRun]] = {}
    for r in runs:
        if len(r):
            by_key.setdefault((r.topic, r.broker), []).append(r)
    by_addr: dict[str, list[HalfRun]] = {}
    for (topic, broker), rs in by_key.items():
        try:
            route = await ci.route(topic)
            if broker not in route.brokers:
                route = await ci.route(topic, refresh=True)
            by_addr.setdefault(route.brokers[broker], []).extend(rs)
        except Exception as exc:
            failed += sum(len(r) for r in rs)
            log.warning("END_TRANSACTION %s of %d half messages: no address for %s: %s", verb,
                        sum(len(r) for r in rs), broker, exc)
    jobs = []
    for addr, rs in by_addr.items():
        if not await transaction_batch_supported(ci, addr):
            jobs += [one(addr, h) for r in rs for h in r.halves()]
            continue
        qs = array("q")
        cls = array("q")
        rows = array("q")
        for r in rs:
            qs.extend(r.queue_offsets)
            cls.extend(r.commitlog_offsets)
            rows.extend(r.rows if r.rows is not None else repeat(1, len(r)))
        ids = [i for r in rs for i in r.msg_ids]
        pairs = array("q", bytes(16 * len(qs)))  # the batched END's body: big-endian pairs
        pairs[0::2], pairs[1::2] = qs, cls
        if sys.byteorder == "little":
            pairs.byteswap()
        body = pairs.tobytes()
        for i, n in _chunks(rows):
            jobs.append(chunk(addr, rs[0].broker, HalfRef(qs[i], cls[i], ids[i]), n,
                              body[16 * i:16 * (i + n)]))
    await asyncio.gather(*jobs)
    return failed


def _chunks(rows: array) -> list[tuple[int, int]]:
    """(first, count) of each batched END_TRANSACTION over halves carrying ``rows`` rows
    each: up to ``END_BATCH`` halves and, past one half, ``END_ROWS`` rows a request."""
    out = []
    i, n = 0, len(rows)
    if n and max(rows) == 1:
        return [(i, min(END_BATCH, n - i)) for i in range(0, n, END_BATCH)]
    while i < n:
        j, total = i, 0
        while j < n and j - i < END_BATCH and (j == i or total + rows[j] <= END_ROWS):
            total += rows[j]
            j += 1
        out.append((i, j - i))
        i = j
    return out


def settle(state_dir: str, batch: str, sent: list[TaskHalves], *, namesrv: str, group: str,
           credentials, timeout_s: float, decide_tasks: list[str] | None,
           hand_over: bool = False) -> frozenset[str]:
    """Step 1 (when ``decide_tasks`` is given) and step 2 of the module doc. With
    ``hand_over`` (a stream's commit) step 2 goes to the responder, which ends the halves while
    the next micro-batch runs; this returns once the previous batch's were ended."""
    from ..client import ClientInstance
    from .network import run

    _fault("sent", batch)
    marker = _mark_settling(state_dir, batch)  # before the decision: the responder waits for us
    ended: list[str] = []
    try:
        decided = (decide(state_dir, batch, decide_tasks) if decide_tasks is not None
                   else read_decision(state_dir, batch) or frozenset())
        _fault("decided", batch)
        # a fresh sink's responder starts here, beside the END_TRANSACTIONs (nothing it could
        # answer but UNKNOW existed before this batch's decision); else it runs already
        try:
            ensure_responder(state_dir, group, namesrv, credentials)
        except OSError as exc:  # the ENDs below still go out; the check waits for an answer
            log.warning("cannot start the responder for %s: %s", state_dir, exc)
        committing = [t for t in sent if t.task in decided]
        commit = [r for t in committing for r in t.runs]
        rollback = [r for t in sent if t.task not in decided for r in t.runs]
        if hand_over and (commit or rollback) and _hand_over(
                state_dir, batch, commit, rollback, [t.task for t in committing], timeout_s):
            _fault("ended", batch)
            return decided

        async def go() -> int:
            ci = ClientInstance(namesrv, timeout_s=timeout_s, credentials=credentials)
            try:
                failed = await end_halves(ci, group, commit, True)
                await end_halves(ci, group, rollback, False)
                return failed
            finally:
                ci.close()
        if commit or rollback:
            if run(go()) == 0:
                ended = [t.task for t in committing]
        _fault("ended", batch)
        return decided
    finally:
        # the responder answers ROLLBACK for any other copy of an ended task's halves (the
        # broker's re-put of a half whose END was under way); for the rest it waits
        # SETTLER_GRACE_S, then looks them up by key
        _mark_settled(marker, ended)


# -- a stream's END_TRANSACTIONs, handed to the responder ----------------------------------------
#
# ``ending/<batch>@<pid>-…`` (a pickle): the halves batch ``batch``'s commit left for the responder
# ``pid`` to end. The commit writes the responder's settling marker first, so from the decision on
# a live process answers for the batch. The responder removes the file when it is done. A file
# addressed to a responder that is gone is claimed by the next one, which must not simply end it
# again (a Java broker stores a row twice for two COMMITs of one half): it ends only the halves
# whose UNIQ_KEY the target lacks, after SETTLER_GRACE_S (``_claim_orphans``, ``_end_handed``).

def _ending_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "ending")


def responder_pid(state_dir: str) -> int:
    """The pid of the responder serving ``state_dir``; 0 when none runs."""
    try:
        with open(os.path.join(state_dir, "responder.pid")) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0
    return pid if _alive(pid) else 0


def _handed(state_dir: str) -> list[tuple[str, str, int]]:
    """(file name, batch, responder pid) of each batch whose END a responder has yet to finish."""
    try:
        names = os.listdir(_ending_dir(state_dir))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        b, _, rest = n.partition("@")
        pid = rest.partition("-")[0]
        if b and pid.isdigit() and not n.endswith(".tmp"):
            out.append((n, b, int(pid)))
    return out


def _hand_over(state_dir: str, batch: str, commit: list[HalfRun], rollback: list[HalfRun],
               tasks: list[str], timeout_s: float) -> bool:
    """Leave ``batch``'s END_TRANSACTIONs to the running responder, once the previous hand-over
    is done (one batch's ENDs at a time run beside the next batch's tasks). False — the caller
    ends them itself — when no responder is up yet."""
    import pickle
    rpid = responder_pid(state_dir)
    if not rpid:  # one is starting (a new sink's first commit): do not wait for it
        return False
    wait_until = time.monotonic() + max(timeout_s, 1.0) * 30
    while any(b != batch and _alive(pid) for _, b, pid in _handed(state_dir)):
        if time.monotonic() > wait_until:
            break  # a stuck responder: go on; its batch stays decided, the check settles it
        time.sleep(0.002)
    if responder_pid(state_dir) != rpid:
        return False
    os.makedirs(_ending_dir(state_dir), exist_ok=True)
    marker = _mark_settling(state_dir, batch, rpid)  # live from here: the responder's
    path = os.path.join(_ending_dir(state_dir), os.path.basename(marker))
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump({"batch": batch, "commit": commit, "rollback": rollback, "tasks": tasks}, f,
                    protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return True


def _claim_orphans(state_dir: str) -> None:
    """Take over the batches handed to a responder that is gone: each becomes this process's
    (a live settler from here: the check path waits for it) to recover — end only the halves
    whose rows are not in the store yet (``_end_handed``)."""
    me = os.getpid()
    for name, batch, pid in _handed(state_dir):
        if pid == me or _alive(pid):
            continue
        marker = _settler_path(state_dir, batch, me).replace(f"@{me}-", f"@{me}-r")
        _write_atomic(marker, json.dumps({"pid": me}))
        try:
            os.replace(os.path.join(_ending_dir(state_dir), name),
                       os.path.join(_ending_dir(state_dir), os.path.basename(marker)))
        except FileNotFoundError:
            _mark_settled(marker, [])
            continue
        log.warning("batch %s was handed to responder %d, gone: ending what it did not", batch,
                    pid)


async def _undelivered(runs: list[HalfRun], delivered) -> tuple[list[HalfRun], int]:
    """The halves of ``runs`` whose row (UNIQ_KEY; a packed half's last row) the target does
    not hold, and how many rows it holds."""
    out, held = [], 0
    for r in runs:
        keep = []
        for h in r.halves():
            if await delivered(h.topic, h.msg_id):
                held += h.rows
            else:
                keep.append(h)
        if keep:
            out.append(HalfRun.of(r.topic, r.broker, keep))
    return out, held


async def _end_handed(state_dir: str, group: str, ci, delivered) -> int:
    """The responder's side: end every batch handed to this process, oldest first. A batch
    it took over from a dead responder (``_claim_orphans``, called here too) waits
    ``SETTLER_GRACE_S`` for that one's last ENDs to be stored, then ends only what the target
    does not hold: a second COMMIT of a half stores its row twice. How many batches it ended."""
    import pickle
    me = os.getpid()
    done = 0
    handed = _handed(state_dir)
    if any(pid != me for _, _, pid in handed):
        _claim_orphans(state_dir)
        handed = _handed(state_dir)
    for name, batch, pid in sorted(handed, key=lambda h: _batch_order(h[1])):
        if pid != me:
            continue
        path = os.path.join(_ending_dir(state_dir), name)
        marker = os.path.join(state_dir, "settling", name)
        recover = name.partition("@")[2].partition("-")[2].startswith("r")
        ended: list[str] = []
        try:  # once, whatever happens
            with open(path, "rb") as f:
                job = pickle.load(f)
            commit, held = job["commit"], 0
            if recover:
                await asyncio.sleep(max(0.0, SETTLER_GRACE_S
                                        - (time.time() - os.stat(marker).st_mtime)))
                commit, held = await _undelivered(commit, delivered)
            else:
                _fault("handed", batch)
            failed = await end_halves(ci, group, commit, True)
            await end_halves(ci, group, job["rollback"], False)
            if not recover:
                _fault("handed-ended", batch)
            ended = job["tasks"] if not failed else []
            log.info("%s batch %s: %d rows in %d half messages committed (%d not "
                     "acknowledged), %d rows delivered already, %d half messages rolled back",
                     "recovered" if recover else "ended", batch,
                     sum(r.row_count() for r in commit), sum(len(r) for r in commit), failed,
                     held, sum(len(r) for r in job["rollback"]))
        finally:
            _mark_settled(marker, ended)
            _unlink(path)
        done += 1
    return done


def _batch_order(batch: str):
    return (0, int(batch), "") if batch.isdigit() else (1, 0, batch)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fault(point: str, batch: str) -> None:
    """Crash tests. ``ROCKETSTORE_SPARK_EO_KILL_AT=decided:3`` SIGKILLs the Spark driver (the
    JVM's process group) right after batch 3's decision (``sent:3``: before it, ``ended:3``:
    after its END_TRANSACTIONs). The Python worker that runs the commit is in pyspark daemon's
    own process group: it goes on, as it does when a real driver dies, until the daemon sees
    the JVM gone. ``ROCKETSTORE_SPARK_EO_STALL_AT=decided:3=4`` makes it stall 4 s there first,
    deaf to the daemon's SIGHUP (a worker that outlives its driver for that long).
    ``handed:3`` / ``handed-ended:3`` SIGKILL the responder before / after it ends the halves a
    stream's commit handed it."""
    import signal
    stall = os.environ.get("ROCKETSTORE_SPARK_EO_STALL_AT", "").rpartition("=")
    stalls = stall[0] == f"{point}:{batch}"
    if stalls:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if os.environ.get("ROCKETSTORE_SPARK_EO_KILL_AT") == f"{point}:{batch}":
        if point.startswith("handed"):
            os.kill(os.getpid(), signal.SIGKILL)  # the responder, before / after its ENDs
        os.killpg(os.getpgid(driver_pid()), signal.SIGKILL)
    if stalls:
        time.sleep(float(stall[2]))


# -- the responder -------------------------------------------------------------------------------

def answer(state_dir: str, sid: str, tag: str | None):
    """The record's answer for a half message carrying ``tag``: what the decision says,
    before the responder's checks against the store (module doc)."""
    from ..client import LocalTransactionState as S
    parsed = parse_tag(tag or "")
    if parsed is None or parsed[0] != sid:
        return S.UNKNOW  # not this sink's
    decided = read_decision(state_dir, parsed[1])
    if decided is None:
        return S.UNKNOW
    return S.COMMIT_MESSAGE if parsed[2] in decided else S.ROLLBACK_MESSAGE


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs. No pid (0: an ``owner`` file gone with its state directory)
    is no process — ``kill(0, 0)`` would ask about our own process group instead."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (killed, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return True


def driver_pid() -> int:
    """The Spark driver's JVM: the nearest ``java`` ancestor of this Python worker (else the
    parent)."""
    pid = os.getpid()
    for _ in range(16):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            break
        comm = stat[stat.index(b"(") + 1:stat.rindex(b")")]
        if comm == b"java":
            return pid
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        if ppid <= 1:
            break
        pid = ppid
    return os.getppid()


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _owner(state_dir: str) -> int:
    try:
        with open(os.path.join(state_dir, "owner")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def has_decisions(state_dir: str) -> bool:
    """Whether any batch of this sink was decided (a responder may have something to say)."""
    try:
        with os.scandir(os.path.join(state_dir, "committed")) as it:
            return any(e.name.endswith(".json") for e in it)
    except FileNotFoundError:
        return False


def ensure_responder(state_dir: str, group: str, namesrv: str, credentials) -> None:
    """Make sure a responder serves ``state_dir`` for as long as this driver lives."""
    os.makedirs(state_dir, exist_ok=True)
    _write_atomic(os.path.join(state_dir, "owner"), str(driver_pid()))
    lock = os.path.join(state_dir, "responder.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return  # one runs; it follows ``owner``
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    env = dict(os.environ)
    env.pop("ROCKETMQ_ACCESS_KEY", None)
    env.pop("ROCKETMQ_SECRET_KEY", None)
    if credentials is not None:
        env["ROCKETMQ_ACCESS_KEY"] = credentials.access_key
        env["ROCKETMQ_SECRET_KEY"] = credentials.secret_key
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    logf = open(os.path.join(state_dir, "responder.log"), "ab")
    try:
        subprocess.Popen([sys.executable, "-m", "rocketstore.spark.sink_transactions",
                          state_dir, group, namesrv], env=env, stdin=subprocess.DEVNULL,
                         stdout=logf, stderr=logf, start_new_session=True, close_fds=True)
    finally:
        logf.close()


async def _respond(state_dir: str, group: str, namesrv: str, fd: int) -> None:
    from ..client import SessionCredentials
    from ..client.transaction import AsyncTransactionProducer
    sid = sink_id(state_dir)

    from ..client import AsyncAdminClient, LocalTransactionState as S
    from ..format.message import PROPERTY_REAL_TOPIC
    credentials = SessionCredentials.from_env()
    admin = AsyncAdminClient(namesrv, credentials=credentials)
    answered = Answered(state_dir)
    pending: set[str] = set()
    first_dead: dict[str, float] = {}

    async def delivered(topic: str, key: str) -> bool:
        return bool(await admin.query_message(topic, key, max_num=1, unique_key=True))

    async def decide_check(msg):
        tag = msg.properties.get(TXN_PROPERTY)
        state = answer(state_dir, sid, tag)
        if state is not S.COMMIT_MESSAGE:
            return state
        batch = parse_tag(tag)[1]
        key, topic = msg.uniq_key, msg.properties.get(PROPERTY_REAL_TOPIC) or msg.topic
        if not key:
            return state
        who = settlers(state_dir, batch, first_dead)
        if who.live or key in pending:
            return S.UNKNOW
        if parse_tag(tag)[2] in who.ended:
            return S.ROLLBACK_MESSAGE  # the settler's acknowledged END delivered it
        if who.quiet_since is not None and time.time() - who.quiet_since < SETTLER_GRACE_S:
            return S.UNKNOW  # an END of a settler that stopped short may still land
        pending.add(key)
        try:
            if await delivered(topic, key):
                return S.ROLLBACK_MESSAGE  # delivered already: this copy is redundant
        except Exception as exc:
            log.warning("looking up %s in %s: %s", key, topic, exc)
            return S.UNKNOW
        finally:
            pending.discard(key)
        last = answered.of(batch).get(key)
        if last is not None and time.time() - last < ANSWER_GRACE_S:
            return S.UNKNOW  # our COMMIT is on its way
        answered.add(batch, key)
        return S.COMMIT_MESSAGE

    async def check(msg):
        state = await decide_check(msg)
        log.info("check %s %s: %s", msg.uniq_key, msg.properties.get(TXN_PROPERTY), state.value)
        return state

    _claim_orphans(state_dir)  # before any check can be answered
    p = AsyncTransactionProducer(group, namesrv, check_listener=check, heartbeat_interval_s=5.0,
                                 credentials=credentials)
    await p.start()
    from ..client import ClientInstance
    ender = ClientInstance(namesrv, credentials=credentials)
    _write_atomic(os.path.join(state_dir, "responder.pid"), str(os.getpid()))
    log.info("responder for %s (group %s) up", state_dir, group)

    async def end_handed() -> None:
        try:
            await _end_handed(state_dir, group, ender, delivered)
        except Exception as exc:  # the batch stays decided: the check settles it
            log.warning("ending a handed batch: %s", exc)
    try:
        last_look = 0.0
        while True:
            await asyncio.sleep(0.005)
            await end_handed()
            now = time.monotonic()
            if now - last_look < 0.5:
                continue
            last_look = now
            if _alive(_owner(state_dir)):
                continue
            await end_handed()  # what the dead driver handed over
            fcntl.flock(fd, fcntl.LOCK_UN)  # see ensure_responder: release, then look again
            if not _alive(_owner(state_dir)):
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                break  # a new responder has taken over
    finally:
        ender.close()
        await p.shutdown()
        await admin.close()
        log.info("responder for %s down", state_dir)


def main(argv: list[str]) -> int:
    state_dir, group, namesrv = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    fd = os.open(os.path.join(state_dir, "responder.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + 10
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                return 0  # another responder serves this directory
            time.sleep(0.2)
    asyncio.run(_respond(state_dir, group, namesrv, fd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
