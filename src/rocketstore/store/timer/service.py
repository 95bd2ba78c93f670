"""``TimerMessageStore``: RocketMQ 5's timer wheel over the store (``timerwheel``, ``timerlog/``,
``config/timercheck``, ``config/timermetrics``).

Theory of operation. The put path stores a timer message on ``rmq_sys_wheel_timer`` queue 0
(``transform.py``). Three threads then run here:

* **enqueue** reads that queue from ``curr_queue_offset``; for each message it appends a 52-byte
  unit to the timerlog (``prevPos`` = the slot's last unit) and points the wheel slot of its
  ``TIMER_OUT_MS`` at it. A time beyond the roll window (``timerRollWindowSlot`` slots) gets a
  *roll* unit at the window's end (or half of it, RocketMQ's rule); a ``TIMER_DEL_UNIQKEY``
  message gets a *delete* unit. A time already past goes to the first slot the dequeue has not
  started (RocketMQ puts it straight to delivery instead; a unit for every message makes the
  timerlog the one record of enqueue progress).
* **dequeue** waits until the clock has passed slot ``curr_read_ms``'s end, walks the slot's
  chain, collects its delete keys, and re-puts every other message in timerlog order: to its
  real topic and queue with ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` (a roll unit: back to
  ``rmq_sys_wheel_timer`` with ``TIMER_ROLL_TIMES`` + 1). Then the read time moves one slot on.
* **flush** makes the timerlog, the wheel and the checkpoint durable every
  ``timerFlushIntervalMs`` and persists the metrics.

Exactly once across SIGKILL. Every write lands in shared mappings at once. The enqueue position
is recomputed on restart from the timerlog's last unit (its message's queue offset + 1). The
dequeue writes a cursor after each re-put (the slot, the unit, the CommitLog end); a restart
inside a slot skips the units the cursor covers and looks in the CommitLog after the cursor's
offset for the one re-put a kill could have left unrecorded. RocketMQ itself restarts from its
last flushed checkpoint and may deliver twice.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from ...config import StoreConfig
from ...format.hashing import java_hash
from ...format.message import (PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, TRANSACTION_MASK,
                               Message, MessageExt, record_properties, string_to_properties)
from ...format.timer_layout import (MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL,
                                    PROPERTY_TIMER_DEL_UNIQKEY, PROPERTY_TIMER_DEQUEUE_MS,
                                    PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_OUT_MS,
                                    PROPERTY_TIMER_ROLL_TIMES, SLOTS_TOTAL, TIMER_BLANK_SLOTS,
                                    TIMER_TOPIC, UNIT_SIZE, build_delete_key, roll_window_slots)
from .. import syncprobe
from .checkpoint import TimerCheckpoint
from .log import TimerLog
from .metrics import TimerMetrics
from .wheel import TimerWheel

log = logging.getLogger(__name__)
ENQUEUE_BATCH = 64
DEQUEUE_CHUNK = 256  # units re-put between two cursor writes
SCAN_CHUNK = 8 << 20  # CommitLog bytes decoded at once by the new master's re-put scan
RETRY_PAUSE_S = 0.2
READ_TIME_REFRESH_MS = 600_000  # an idle wheel's read time is written this often at least


@dataclass
class TimerStoreAccess:
    """What the timer store uses of the message store (no facade reference)."""
    read_units: Callable[[int, int], list | None]       # (queue offset, count) of TIMER_TOPIC/0
    look_message: Callable[[int], MessageExt | None]     # CommitLog offset -> message
    put: Callable[[Message], object]                     # -> PutMessageResult
    put_batch: Callable[[list], object]                  # one topic and queue, one append
    read_records: Callable[[list, list], list]           # (offsets, sizes) -> record views
    commitlog_max_offset: Callable[[], int]
    commitlog_min_offset: Callable[[], int]
    queue_bounds: Callable[[], tuple[int, int]]          # TIMER_TOPIC/0 (min, max)
    # (offset, max bytes) -> the written bytes from there to at most its segment's end
    read_data: Callable[[int, int], bytes | None] | None = None


def _reput_key(topic: str, p: dict[str, str]) -> tuple:
    """What ``_not_delivered`` matches a timer re-put by: (back to the timer topic: a roll,
    UNIQ_KEY, TIMER_OUT_MS, roll count)."""
    return (topic == TIMER_TOPIC, p.get("UNIQ_KEY"), p.get(PROPERTY_TIMER_OUT_MS),
            int(p.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0))


def timer_paths(root: str) -> tuple[str, str, str, str]:
    cfg_dir = os.path.join(root, "config")
    return (os.path.join(root, "timerwheel"), os.path.join(root, "timerlog"),
            os.path.join(cfg_dir, "timercheck"), os.path.join(cfg_dir, "timermetrics"))


class TimerMessageStore:
    def __init__(self, cfg: StoreConfig, access: TimerStoreAccess,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.access = access
        self.clock = clock
        self.precision_ms = cfg.timer_precision_ms
        self.window_slots = roll_window_slots(cfg.timer_roll_window_slot)
        wheel_path, log_dir, ckpt_path, metrics_path = timer_paths(cfg.store_path_root_dir)
        self.wheel = TimerWheel(wheel_path, self.precision_ms)
        self.timerlog = TimerLog(log_dir, cfg.mapped_file_size_timer_log)
        self.checkpoint = TimerCheckpoint(ckpt_path)
        self.metrics = TimerMetrics(metrics_path)
        self.curr_read_ms = 0
        self.curr_write_ms = 0
        self.curr_queue_offset = 0
        self._reading: int | None = None  # the slot the dequeue has started
        self._already: set[int] = set()  # units of the current slot re-put before a restart
        self._resumed = True
        self._lock = threading.Lock()
        self._wake_enqueue = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.enqueued = 0
        self.dequeued = 0
        self.last_error: str | None = None
        self._rate_sample: tuple[float, int, int] | None = None
        self._flushed_state: tuple[int, int] | None = None
        self._tps = (0.0, 0.0)

    # -- lifecycle ------------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def format_ms(self, t: int) -> int:
        return t // self.precision_ms * self.precision_ms

    def load(self) -> None:
        """Load and recover (``TimerMessageStore.recover``)."""
        self.timerlog.load()
        self.metrics.load()
        had_files = self.checkpoint.existed or bool(self.timerlog.queue.files)
        begin = max(0, self.checkpoint.last_timerlog_flush_pos - self.cfg.mapped_file_size_timer_log)
        last_unit = [-1]

        def revise(deliver_ms: int, pos: int) -> None:
            self.wheel.revise_slot(deliver_ms, pos)
            last_unit[0] = pos
        process_offset = self.timerlog.recover(begin, revise)
        self.curr_queue_offset = self._queue_offset_after(last_unit[0])
        now = self.format_ms(self.now_ms())
        read = self.checkpoint.last_read_time_ms
        oldest = now - SLOTS_TOTAL * self.precision_ms + TIMER_BLANK_SLOTS * self.precision_ms
        self.curr_read_ms = max(read, oldest) if had_files else now
        self.curr_read_ms = self.format_ms(self.curr_read_ms)
        has_units = bool(self.timerlog.queue.files)
        min_first = self.wheel.check_phy_pos(self.curr_read_ms, process_offset) if has_units else 1 << 62
        if min_first < process_offset:  # the wheel points past the timerlog's valid end
            log.warning("timer wheel points beyond timerlog end %d; revising from %d",
                        process_offset, min_first)
            self.wheel.clear_beyond(self.curr_read_ms, process_offset)
            self.timerlog.recover(min_first, self.wheel.revise_slot)
        self.curr_write_ms = now
        # controller mode: a store that just became master (a promoted slave, or an old
        # master back) may hold, beyond what its own timerlog enqueued, timer messages that
        # another master of the group already delivered (the re-puts came with the replicated
        # CommitLog): that backlog is checked against those re-puts, not delivered again
        lo, hi = self.access.queue_bounds()
        self._dedup_below = hi if getattr(self.cfg, "controller_ha", None) is not None \
            and self.curr_queue_offset < hi else -1
        self._delivered: set[tuple] | None = None
        self._resumed = False  # the cursor's slot, when reached, is settled first
        self.checkpoint.last_read_time_ms = self.curr_read_ms
        self.flush()  # the recovered state is on disk before anything new happens
        log.info("timer store recovered: read time %d, queue offset %d, timerlog end %d",
                 self.curr_read_ms, self.curr_queue_offset, process_offset)

    def _queue_offset_after(self, last_unit: int) -> int:
        """The rmq_sys_wheel_timer offset after the last unit's message (RocketMQ's
        ``reviseQueueOffset``), else the checkpoint's, within the queue's bounds."""
        q = self.checkpoint.last_timer_queue_offset
        if last_unit >= 0:
            u = self.timerlog.read_unit(last_unit)
            m = self.access.look_message(u[5]) if u is not None else None
            if m is not None and m.topic == TIMER_TOPIC:
                q = m.queue_offset + 1
        lo, hi = self.access.queue_bounds()
        return min(max(q, lo), hi)

    def _settle_cursor(self, t: int) -> None:
        """Resuming slot ``t`` after a restart (the cursor names it): the chunk after the cursor
        may have been re-put (wholly or in part) just before the kill; find those re-puts in the
        CommitLog after the cursor's offset and mark their units delivered."""
        ck = self.checkpoint
        self._already = set()
        _, normals = self._slot_units(t)
        pending = [u for u in normals if u[0] > ck.cursor_unit_pos][:DEQUEUE_CHUNK]
        if not pending:
            return
        expected: dict[tuple, list[int]] = {}
        sources = set()
        for u in pending:
            src = self.access.look_message(u[4])
            if src is None:
                continue
            roll = bool(u[1] & MAGIC_ROLL)
            topic = TIMER_TOPIC if roll else src.properties.get(PROPERTY_REAL_TOPIC, src.topic)
            key = (topic, src.uniq_key, src.properties.get(PROPERTY_TIMER_OUT_MS))
            expected.setdefault(key, []).append(u[0])
            sources.add(u[4])
        off = ck.cursor_cl_offset
        end = self.access.commitlog_max_offset()
        seg = self.cfg.mapped_file_size_commitlog
        while off < end:
            m = self.access.look_message(off)
            if m is None:
                off = off - off % seg + seg
                continue
            p = m.properties
            if PROPERTY_TIMER_DEQUEUE_MS in p and off not in sources:
                units = expected.get((m.topic, m.uniq_key, p.get(PROPERTY_TIMER_OUT_MS)))
                if units:
                    self._already.add(units.pop(0))
            off += m.store_size
        if self._already:
            log.info("timer: %d unit(s) of slot %d were re-put before the restart",
                     len(self._already), t)

    def start(self) -> None:
        for name, fn in (("timer-enqueue", self._enqueue_loop), ("timer-dequeue", self._dequeue_loop),
                         ("timer-flush", self._flush_loop)):
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def wakeup(self) -> None:
        self._wake_enqueue.set()

    def shutdown(self) -> None:
        self._stopping.set()
        self._wake_enqueue.set()
        for t in self._threads:
            t.join(15)
        self._threads.clear()
        self.flush()
        self.timerlog.close()
        self.wheel.close()
        self.checkpoint.close()

    # -- enqueue --------------------------------------------------------------------------------
    def _enqueue_loop(self) -> None:
        idle_s = 100 * self.precision_ms / 1000 / 1000
        while not self._stopping.is_set():
            try:
                n = self.enqueue_once()
            except Exception as exc:  # logged; the same message is tried again
                self.last_error = f"enqueue: {exc}"
                log.exception("timer enqueue failed")
                n = 0
                self._stopping.wait(RETRY_PAUSE_S)
            if n == 0:
                self._wake_enqueue.wait(idle_s)
                self._wake_enqueue.clear()

    def enqueue_once(self) -> int:
        """Enqueue what rmq_sys_wheel_timer holds beyond ``curr_queue_offset``; returns how many."""
        self._move_write_time()
        lo, hi = self.access.queue_bounds()
        if self.curr_queue_offset < lo:
            self.curr_queue_offset = lo
        done = 0
        while self.curr_queue_offset < hi and not self._stopping.is_set():
            units = self.access.read_units(self.curr_queue_offset, ENQUEUE_BATCH)
            if not units:
                break
            views = self.access.read_records([u[0] for u in units], [u[1] for u in units])
            items = []
            for (offset_py, size_py, _tags), v in zip(units, views):
                rp = record_properties(v) if v is not None else None
                if rp is not None and PROPERTY_TIMER_OUT_MS in rp[2]:
                    items.append((offset_py, size_py, int(rp[2][PROPERTY_TIMER_OUT_MS]), rp[2]))
                else:
                    log.warning("timer: no timer message at CommitLog offset %d", offset_py)
            del views
            if self.curr_queue_offset < self._dedup_below and items:
                items = self._not_delivered(items)
            self._enqueue_batch(items)
            self.curr_queue_offset += len(units)
            done += len(units)
            self._move_write_time()
        return done

    def _not_delivered(self, items: list) -> list:
        """``items`` (of the backlog a new master found, see ``load``) less those another
        master delivered: a re-put (``TIMER_DEQUEUE_MS``) of the same UNIQ_KEY and
        ``TIMER_OUT_MS`` after it in the CommitLog — to its real topic with the same roll
        count, or back to the timer topic with one more (a roll)."""
        if self._delivered is None:
            self._delivered = self._scan_reputs(min(i[0] for i in items))
            log.warning("timer: %d re-put(s) of another master found in the CommitLog; "
                        "their messages are not delivered again", len(self._delivered))
        out = []
        for item in items:
            props = item[3]
            key = (props.get("UNIQ_KEY"), props.get(PROPERTY_TIMER_OUT_MS))
            roll = int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0)
            if (False, *key, roll) in self._delivered or (True, *key, roll + 1) in self._delivered:
                continue
            out.append(item)
        return out

    def _scan_reputs(self, start: int) -> set[tuple]:
        """(rolled, UNIQ_KEY, TIMER_OUT_MS, roll count) of every timer re-put from ``start``:
        the CommitLog decoded ``SCAN_CHUNK`` bytes at a time by the vectorised decoder, only
        the properties that name ``TIMER_DEQUEUE_MS`` parsed (``_scan_reputs_by_record`` is
        the same walk record by record: where the store gives no byte ranges, and for a
        record the decoder does not take whole)."""
        read = self.access.read_data
        if read is None:
            return self._scan_reputs_by_record(start, self.access.commitlog_max_offset())
        from ...format.batch import STOP_END, STOP_INCOMPLETE, decode_records
        found: set[tuple] = set()
        off = start
        end = self.access.commitlog_max_offset()
        seg = self.cfg.mapped_file_size_commitlog
        while off < end and not self._stopping.is_set():
            buf = read(off, min(SCAN_CHUNK, end - off))
            if not buf:
                off = off - off % seg + seg
                continue
            rec = decode_records(buf, 0, len(buf), base_offset=off)
            for topic, raw in zip(rec.topic, rec.props_raw):
                if PROPERTY_TIMER_DEQUEUE_MS in raw:  # (then parsed: a value might say it)
                    p = string_to_properties(raw)
                    if PROPERTY_TIMER_DEQUEUE_MS in p:
                        found.add(_reput_key(topic, p))
            if rec.end > 0 and rec.stop in (STOP_END, STOP_INCOMPLETE):
                off += rec.end  # the next chunk starts at the first record not taken whole
            elif rec.end > 0:  # a blank (the segment's end) or bytes that are not a record
                off = off - off % seg + seg
            else:  # nothing whole at ``off``: this one record as the per-record walk sees it
                found |= self._scan_reputs_by_record(off, off + 1)
                m = self.access.look_message(off)
                off = off + m.store_size if m is not None else off - off % seg + seg
        return found

    def _scan_reputs_by_record(self, start: int, end: int) -> set[tuple]:
        """``_scan_reputs`` over the records that start in ``[start, end)``, one by one."""
        found: set[tuple] = set()
        off = start
        seg = self.cfg.mapped_file_size_commitlog
        while off < end and not self._stopping.is_set():
            m = self.access.look_message(off)
            if m is None:
                off = off - off % seg + seg
                continue
            if PROPERTY_TIMER_DEQUEUE_MS in m.properties:
                found.add(_reput_key(m.topic, m.properties))
            off += m.store_size
        return found

    def _move_write_time(self) -> None:
        now = self.format_ms(self.now_ms())
        if self.curr_write_ms < now:
            self.curr_write_ms = now

    def _enqueue_batch(self, items: list) -> None:
        """Append a unit per message and point the wheel at them (``doEnqueue``), the slots
        of a batch written once at its end (recovery revises slots from the units)."""
        p = self.precision_ms
        w = self.window_slots
        added: dict[str, int] = {}
        with self._lock:
            write = self.curr_write_ms
            floor = self.curr_read_ms + (p if self._reading == self.curr_read_ms else 0)
            slots: dict[int, list[int]] = {}  # time // p -> [first, last, num, magic]
            for offset_py, size_py, delayed, props in items:
                real_topic = props.get(PROPERTY_REAL_TOPIC)
                is_delete = PROPERTY_TIMER_DEL_UNIQKEY in props
                magic = MAGIC_DEFAULT
                if delayed - write >= w * p:
                    magic |= MAGIC_ROLL
                    if delayed - write - w * p < w // 3 * p:
                        delayed = write + (w // 2) * p
                    else:
                        delayed = write + w * p
                if is_delete:
                    magic |= MAGIC_DELETE
                if delayed < floor:
                    delayed = floor
                key = delayed // p
                st = slots.get(key)
                if st is None:
                    got = self.wheel.get_slot(delayed)
                    st = slots[key] = list(got) if got is not None else [-1, -1, 0, 0]
                pos = self.timerlog.append(st[1], magic, write, delayed - write, offset_py, size_py,
                                           _topic_hash(real_topic))
                syncprobe.crash_point("timer-wheel-update")
                if st[0] == -1:
                    st[0] = pos
                st[1] = pos
                st[2] += -1 if is_delete else 1
                if real_topic and not is_delete:
                    added[real_topic] = added.get(real_topic, 0) + 1
            for key, (first, last, num, smagic) in slots.items():
                self.wheel.put_slot(key * p, first, last, num, smagic)
        now = self.now_ms()
        for topic, n in added.items():
            self.metrics.add(topic, n, now)
        self.enqueued += len(items)

    # -- dequeue --------------------------------------------------------------------------------
    def _dequeue_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                r = self.dequeue_once()
            except _Stopping:
                return
            except Exception as exc:
                self.last_error = f"dequeue: {exc}"
                log.exception("timer dequeue failed")
                self._stopping.wait(RETRY_PAUSE_S)
                continue
            if r < 0:  # caught up: sleep to the end of the slot being filled
                now = self.now_ms()
                wait_ms = self.curr_read_ms + self.precision_ms - now
                self._stopping.wait(min(max(wait_ms, 1), self.precision_ms) / 1000)

    def dequeue_once(self) -> int:
        """Deliver slot ``curr_read_ms`` if its time is over: -1 not yet, else units delivered."""
        self._move_write_time()
        if self.curr_read_ms >= self.curr_write_ms:
            return -1
        t = self.curr_read_ms
        with self._lock:
            self._reading = t
            slot = self.wheel.get_slot(t)
        delivered = 0
        if slot is not None:
            delivered = self._deliver_slot(t)
        with self._lock:
            self.curr_read_ms = t + self.precision_ms
            self._reading = None
            if slot is not None:  # empty slots are not worth a write (flush() catches up)
                self.checkpoint.last_read_time_ms = self.curr_read_ms
        return delivered

    def _slot_units(self, t: int) -> tuple[list, list]:
        """The slot's units in timerlog order: (delete units, others), each
        (pos, magic, enqueue_ms, delayed_ms, offset_py, size_py)."""
        slot = self.wheel.get_slot(t)
        units = []
        pos = slot[1] if slot is not None else -1
        end = self.timerlog.max_offset()
        seen = 0
        while pos != -1 and pos < end and seen < 100_000_000:
            u = self.timerlog.read_unit(pos)
            if u is None or u[0] != UNIT_SIZE:
                log.warning("timer: bad unit at timerlog offset %d in slot %d", pos, t)
                break
            units.append((pos, u[2], u[3], u[3] + u[4], u[5], u[6]))
            pos = u[1]
            seen += 1
        units.reverse()
        deletes = [u for u in units if u[1] & MAGIC_DELETE and not u[1] & MAGIC_ROLL]
        normals = [u for u in units if not (u[1] & MAGIC_DELETE and not u[1] & MAGIC_ROLL)]
        return deletes, normals

    def _deliver_slot(self, t: int) -> int:
        ck = self.checkpoint
        deletes, normals = self._slot_units(t)
        if ck.cursor_slot_ms != t:  # a fresh slot: nothing of it delivered yet
            ck.cursor_unit_pos = -1
            ck.cursor_cl_offset = self.access.commitlog_max_offset()
            ck.cursor_slot_ms = t
            self._already = set()
            if ck.last_read_time_ms < t:
                ck.last_read_time_ms = t  # a restart comes back here, not to an earlier slot
        elif not self._resumed:  # the slot a kill interrupted: what of it was re-put?
            self._settle_cursor(t)
        self._resumed = True
        done_upto = ck.cursor_unit_pos
        delete_keys = set()
        for u in deletes:
            m = self.access.look_message(u[4])
            if m is not None and PROPERTY_TIMER_DEL_UNIQKEY in m.properties:
                delete_keys.add(m.properties[PROPERTY_TIMER_DEL_UNIQKEY])
        todo = [u for u in normals if u[0] > done_upto]
        delivered = 0
        for i in range(0, len(todo), DEQUEUE_CHUNK):
            if self._stopping.is_set():
                raise _Stopping()
            chunk = todo[i:i + DEQUEUE_CHUNK]
            delivered += self._deliver_chunk(chunk, delete_keys)
            ck.cursor_unit_pos = chunk[-1][0]  # the chunk's re-puts are in the CommitLog
            ck.cursor_cl_offset = self.access.commitlog_max_offset()
        self.dequeued += delivered
        return delivered

    def _deliver_chunk(self, chunk: list, delete_keys: set) -> int:
        """Re-put a chunk of units: messages for the same topic and queue go in one append."""
        now = self.now_ms()
        groups: dict[tuple, list[Message]] = {}
        gone: dict[str, int] = {}
        for pos, magic, enqueue_ms, _delayed, offset_py, _size in chunk:
            if pos in self._already:
                continue
            m = self.access.look_message(offset_py)
            if m is None:
                log.warning("timer: message at CommitLog offset %d is gone", offset_py)
                continue
            roll = bool(magic & MAGIC_ROLL)
            real = m.properties.get(PROPERTY_REAL_TOPIC, m.topic)
            is_delete = PROPERTY_TIMER_DEL_UNIQKEY in m.properties
            if not roll:
                if is_delete:
                    continue  # a delete unit is never delivered
                if delete_keys and m.uniq_key is not None and \
                        build_delete_key(real, m.uniq_key) in delete_keys:
                    gone[real] = gone.get(real, 0) + 1  # cancelled
                    continue
            msg = convert(m, enqueue_ms, roll, now)
            key = (msg.topic, msg.queue_id, msg.sys_flag & TRANSACTION_MASK == 0)
            groups.setdefault(key, []).append(msg)
            if not is_delete:
                gone[real] = gone.get(real, 0) + 1
        n = 0
        for (_topic, _qid, batchable), msgs in groups.items():
            for part in _parts(msgs, self.cfg.max_message_size, batchable):
                self._reput(part)
                syncprobe.crash_point("timer-dequeue-put")
                n += len(part)
        for topic, k in gone.items():
            self.metrics.add(topic, -k, now)
        return n

    def _reput(self, msgs: list[Message]) -> None:
        """Put until the store takes them (a refused put is retried: never lost)."""
        while True:
            r = self.access.put(msgs[0]) if len(msgs) == 1 else self.access.put_batch(msgs)
            status = getattr(r, "status", None)
            if status is not None and status.ok:
                return
            name = getattr(status, "name", str(status))
            if name in ("MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED"):
                if len(msgs) > 1:  # find the one the store refuses; the others go on
                    for m in msgs:
                        self._reput([m])
                    return
                log.error("timer: re-put of %s refused for good (%s %s); dropped", msgs[0].topic,
                          name, getattr(r, "error", ""))
                return
            self.last_error = f"re-put failed: {name} {getattr(r, 'error', '')}"
            if self._stopping.wait(RETRY_PAUSE_S):
                raise _Stopping()

    # -- flush and views ------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        interval = self.cfg.timer_flush_interval_ms / 1000
        while not self._stopping.wait(interval):
            try:
                self.flush()
                self.tps()
                self.timerlog.delete_expired(self.access.commitlog_min_offset())
            except Exception as exc:
                self.last_error = f"flush: {exc}"
                log.exception("timer flush failed")

    def flush(self) -> None:
        """Timerlog, then wheel, then checkpoint (payload before the pointer to it)."""
        flushed = self.timerlog.flush()
        self.wheel.flush()
        ck = self.checkpoint
        state = (flushed, self.curr_queue_offset)
        read = self.curr_read_ms
        if state != self._flushed_state or read - ck.last_read_time_ms > READ_TIME_REFRESH_MS:
            ck.last_timerlog_flush_pos = flushed
            ck.last_timer_queue_offset = self.curr_queue_offset
            ck.master_timer_queue_offset = self.curr_queue_offset
            if read > ck.last_read_time_ms:
                ck.last_read_time_ms = read
            ck.next_version()
            ck.flush()
            self._flushed_state = state
        self.metrics.persist()

    def congest_num(self) -> int:
        """Timers in the wheel from the read time on (``getAllCongestNum``)."""
        _, nums = self.wheel.nums_ahead(self.curr_read_ms, SLOTS_TOTAL * 2)
        return int(nums.sum())

    def tps(self) -> tuple[float, float]:
        """(enqueue, dequeue) messages per second over the last flush interval or more."""
        now = time.monotonic()
        prev = self._rate_sample
        if prev is None or now - prev[0] >= 1.0:
            self._rate_sample = (now, self.enqueued, self.dequeued)
            if prev is not None:
                dt = now - prev[0]
                self._tps = ((self.enqueued - prev[1]) / dt, (self.dequeued - prev[2]) / dt)
        return self._tps

    def is_reject(self, deliver_ms: int) -> bool:
        """``isReject``: flow control per slot (``timerCongestNumEachSlot``)."""
        limit = self.cfg.timer_congest_num_each_slot
        if limit >= 2**31 - 1:
            return False
        slot = self.wheel.get_slot(deliver_ms)
        return slot is not None and slot[2] >= limit

    def stats(self) -> dict:
        now = self.now_ms()
        lo, hi = self.access.queue_bounds()
        return {"precision_ms": self.precision_ms, "roll_window_slots": self.window_slots,
                "read_time_ms": self.curr_read_ms, "write_time_ms": self.curr_write_ms,
                "dequeue_behind_ms": max(0, now - self.curr_read_ms - self.precision_ms),
                "enqueue_behind_messages": max(0, hi - self.curr_queue_offset),
                "enqueued": self.enqueued, "dequeued": self.dequeued,
                "timerlog_bytes": self.timerlog.max_offset() - max(0, self.timerlog.min_offset()),
                "topics": self.metrics.counts(), "error": self.last_error}

    def distribution(self, now_ms: int | None = None) -> dict:
        """Timers due per period from now (RocketMQ's timerDist: 5 s, 1 min, 5 min, 15 min, 1 h,
        4 h, 8 h, 24 h) and per hour over the next 24 hours."""
        now = self.format_ms(self.now_ms() if now_ms is None else now_ms)
        start = min(now, self.curr_read_ms)
        horizon = 86400 * 1000
        times, nums = self.wheel.nums_ahead(start, (now - start + horizon) // self.precision_ms)
        ahead = np.maximum(times - now, 0)
        per_hour = np.bincount(ahead // 3_600_000, weights=nums, minlength=24)[:24]
        periods = {str(s): int(nums[ahead < s * 1000].sum()) for s in self.metrics.timer_dist}
        busiest = int(np.argmax(nums)) if len(nums) else -1
        return {"per_period": periods, "per_hour": [int(x) for x in per_hour],
                "busiest_slot_ms": int(times[busiest]) if busiest >= 0 else None,
                "busiest_slot_num": int(nums[busiest]) if busiest >= 0 else 0}


def runtime_info(timer: "TimerMessageStore | None") -> dict[str, str]:
    """RocketMQ 5's timer keys of the broker runtime info (``prepareRuntimeInfo``)."""
    if timer is None:
        return {"timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0",
                "timerEnqueueTps": "0.0", "timerDequeueTps": "0.0"}
    st = timer.stats()
    enq, deq = timer.tps()
    return {"timerReadBehind": str(st["dequeue_behind_ms"] // 1000),
            "timerOffsetBehind": str(st["enqueue_behind_messages"]),
            "timerCongestNum": str(timer.congest_num()),
            "timerEnqueueTps": f"{enq:.1f}", "timerDequeueTps": f"{deq:.1f}"}


def _parts(msgs: list[Message], max_bytes: int, batchable: bool):
    """Runs of ``msgs`` whose bodies fit one batch put (transactional ones one by one)."""
    if not batchable:
        for m in msgs:
            yield [m]
        return
    part: list[Message] = []
    size = 0
    for m in msgs:
        if part and (size + len(m.body) > max_bytes or len(part) >= DEQUEUE_CHUNK):
            yield part
            part, size = [], 0
        part.append(m)
        size += len(m.body)
    if part:
        yield part


@lru_cache(maxsize=4096)
def _topic_hash(topic: str | None) -> int:
    return java_hash(topic) if topic else 0


class _Stopping(Exception):
    pass


def convert(m: MessageExt, enqueue_ms: int, roll: bool, now_ms: int) -> Message:
    """``TimerMessageStore.convert`` + ``convertMessage``: the message to re-put."""
    props = dict(m.properties)
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    if roll:
        props[PROPERTY_TIMER_ROLL_TIMES] = str(int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0")) + 1)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    props["WAIT"] = "false"
    if roll:
        topic, qid = m.topic, m.queue_id
    else:
        topic = props.pop(PROPERTY_REAL_TOPIC, m.topic)
        qid = int(props.pop(PROPERTY_REAL_QUEUE_ID, "0"))
    return Message(topic=topic, body=m.body, properties=props, queue_id=qid, flag=m.flag,
                   sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                   store_host=m.store_host, reconsume_times=m.reconsume_times,
                   prepared_transaction_offset=m.prepared_transaction_offset)
