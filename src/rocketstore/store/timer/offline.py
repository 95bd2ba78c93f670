"""The timer files of a closed store: rebuild the wheel from the timerlog, and verify them.

The timerwheel is derived from the timerlog (each unit names its slot: enqueueTime + delayTime,
and the wheel's slot holds the first and last unit of that slot and their count, deletes
counting -1), so ``rebuild_wheel`` replays every unit into a fresh wheel and swaps it in: the
same bytes the running store wrote, as long as no timerlog file has expired. The timerlog and
the checkpoint are state (what was enqueued, how far delivery got), not derived: rebuild keeps
them, verify checks them.
"""
from __future__ import annotations

import os

import numpy as np

from ...format.layouts import name_to_offset
from ...format.timer_layout import (BLANK, BLANK_MAGIC_CODE, MAGIC_DELETE, MIN_BLANK_LEN, SLOT,
                                    SLOT_SIZE, SLOTS_TOTAL, TIMER_CHECKPOINT_SIZE, TIMER_TOPIC,
                                    UNIT, UNIT_SIZE, is_magic_ok, wheel_file_size)
from ..checkpoint import fsync_dir


def timerlog_files(root: str) -> list[tuple[int, str]]:
    d = os.path.join(root, "timerlog")
    if not os.path.isdir(d):
        return []
    return sorted((o, os.path.join(d, n)) for n in os.listdir(d) if (o := name_to_offset(n)) is not None)


def iter_units(root: str, problems: list | None = None):
    """(offset, unit tuple) of every valid unit in the timerlog, in order; a unit that is not
    valid ends the walk (reported in ``problems`` as (path, offset, what) when given)."""
    files = timerlog_files(root)
    size = os.path.getsize(files[0][1]) if files else 0
    prev_off = None
    for base, path in files:
        if prev_off is not None and base != prev_off + size and problems is not None:
            problems.append((path, 0, f"gap: previous timerlog file starts at {prev_off}"))
        prev_off = base
        if os.path.getsize(path) != size:
            if problems is not None:
                problems.append((path, 0, f"size {os.path.getsize(path)}, the first file has {size}"))
            return
        with open(path, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos + MIN_BLANK_LEN <= size:
            n, _prev, magic = BLANK.unpack_from(data, pos)
            if magic == BLANK_MAGIC_CODE and n == size - pos:
                break
            if n == 0 and not any(data[pos:]):
                return  # end of data
            if n != UNIT_SIZE or not is_magic_ok(magic) or pos + UNIT_SIZE > size:
                if problems is not None:
                    problems.append((path, pos, f"not a timerlog unit (size {n}, magic {magic:#x})"))
                return
            yield base + pos, UNIT.unpack_from(data, pos)
            pos += UNIT_SIZE


def wheel_from_units(root: str, precision_ms: int) -> dict[int, list[int]]:
    """slot index -> [time/precision, first, last, num] replayed from the timerlog."""
    slots: dict[int, list[int]] = {}
    n = SLOTS_TOTAL * 2
    for off, u in iter_units(root):
        t = (u[3] + u[4]) // precision_ms
        i = t % n
        s = slots.get(i)
        delta = -1 if u[2] & MAGIC_DELETE else 1
        if s is None or s[0] != t:
            slots[i] = [t, off, off, delta]
        else:
            s[2] = off
            s[3] += delta
    return slots


def detect_precision(root: str, default: int) -> int:
    """The timerPrecisionMs the wheel was written with: the candidate for which the wheel slot
    of the timerlog's last unit holds that unit's turn (``default`` when nothing tells)."""
    from ...format.timer_layout import PRECISION_CANDIDATES
    last = None
    for last in iter_units(root):
        pass
    path = os.path.join(root, "timerwheel")
    if last is None or not os.path.exists(path) or os.path.getsize(path) != wheel_file_size():
        return default
    at = last[1][3] + last[1][4]
    with open(path, "rb") as fh:
        for p in (default, *PRECISION_CANDIDATES):
            t = at // p
            fh.seek(t % (SLOTS_TOTAL * 2) * SLOT_SIZE)
            if int.from_bytes(fh.read(8), "big", signed=True) == t:
                return p
    return default


def rebuild_wheel(root: str, precision_ms: int) -> int:
    """Write ``timerwheel`` anew from the timerlog (temp file, fsync, rename); returns the
    number of slots written. Nothing is done for a store without a timerlog."""
    if not timerlog_files(root):
        return 0
    slots = wheel_from_units(root, precision_ms)
    path = os.path.join(root, "timerwheel")
    tmp = path + ".rebuild"
    with open(tmp, "wb") as fh:
        fh.truncate(wheel_file_size())
        for i in sorted(slots):
            t, first, last, num = slots[i]
            fh.seek(i * SLOT_SIZE)
            fh.write(SLOT.pack(t, first, last, num, 0))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(root)
    return len(slots)


def verify_timer(root: str, precision_ms: int, commitlog_offsets: np.ndarray, topics: np.ndarray,
                 min_offset: int, add) -> int:
    """Check the timer files; ``add(severity, path, offset, what)`` reports. Returns units seen.

    timerwheel has RocketMQ 5's size; timercheck is one page; every timerlog unit is whole and
    points at a rmq_sys_wheel_timer record of the CommitLog (or below its min offset); every
    slot from the checkpoint's read time on matches the slots the timerlog replays to."""
    wheel = os.path.join(root, "timerwheel")
    ck_path = os.path.join(root, "config", "timercheck")
    if os.path.exists(wheel) and os.path.getsize(wheel) not in (0, wheel_file_size()):
        add("error", wheel, 0, f"timer wheel is {os.path.getsize(wheel)} bytes, not {wheel_file_size()}")
        wheel = None
    read_ms = 0
    if os.path.exists(ck_path):
        if os.path.getsize(ck_path) != TIMER_CHECKPOINT_SIZE:
            add("error", ck_path, 0, f"timer checkpoint is {os.path.getsize(ck_path)} bytes, not 4096")
        else:
            with open(ck_path, "rb") as fh:
                read_ms = int.from_bytes(fh.read(8), "big", signed=True)
    problems: list = []
    units = list(iter_units(root, problems))
    for path, off, what in problems:
        add("error", path, off, what)
    if not units:
        return 0
    offs = np.fromiter((u[5] for _, u in units), dtype=np.int64, count=len(units))
    idx = np.searchsorted(commitlog_offsets, offs)
    found = (idx < len(commitlog_offsets)) & (commitlog_offsets[np.minimum(idx, len(commitlog_offsets) - 1)] == offs)
    tlog = os.path.join(root, "timerlog")
    for k in np.flatnonzero(~found):
        if offs[k] >= min_offset:
            add("error", tlog, units[k][0], f"unit points at CommitLog offset {offs[k]}: no record starts there")
    for k in np.flatnonzero(found):
        if topics[idx[k]] != TIMER_TOPIC:
            add("error", tlog, units[k][0], f"unit points at a record of topic {topics[idx[k]]!r}, not {TIMER_TOPIC}")
    if wheel is not None and os.path.exists(wheel):
        replayed = wheel_from_units(root, precision_ms)
        base = read_ms // precision_ms
        with open(wheel, "rb") as fh:
            for i, (t, first, last, _num) in replayed.items():
                if t < base:
                    continue  # delivered already
                fh.seek(i * SLOT_SIZE)
                st, sfirst, slast, _, _ = SLOT.unpack(fh.read(SLOT_SIZE))
                if st == t and slast < last or st != t and first == last == units[-1][0]:
                    add("warning", wheel, i * SLOT_SIZE,  # a kill between unit and slot update
                        f"slot for {t * precision_ms} ms lags the timerlog's last unit {last}; "
                        f"the next open revises it")
                elif (st, slast) != (t, last):
                    add("error", wheel, i * SLOT_SIZE,
                        f"slot for {t * precision_ms} ms holds (turn {st}, last unit {slast}); "
                        f"the timerlog says last unit {last} (rocketstore rebuild rewrites the wheel)")
    return len(units)


def file_runtime_info(root: str, precision_ms: int, timer_queue_max: int, now_ms: int) -> dict[str, str]:
    """RocketMQ 5's timer runtime keys read from the files of a store no timer service runs on
    (a read-only open): what is waiting in the wheel from the checkpoint's read time on, how far
    enqueue and dequeue are behind."""
    from .wheel import TimerWheel
    ck_path = os.path.join(root, "config", "timercheck")
    wheel_path = os.path.join(root, "timerwheel")
    if not os.path.exists(ck_path) or not os.path.exists(wheel_path) \
            or os.path.getsize(wheel_path) != wheel_file_size():
        return {}
    with open(ck_path, "rb") as fh:
        head = fh.read(24)
    read_ms = int.from_bytes(head[0:8], "big", signed=True)
    queue_offset = int.from_bytes(head[16:24], "big", signed=True)
    precision_ms = detect_precision(root, precision_ms)
    wheel = TimerWheel(wheel_path, precision_ms, readonly=True)
    try:
        _, nums = wheel.nums_ahead(read_ms, SLOTS_TOTAL * 2)
    finally:
        wheel.close()
    return {"timerReadBehind": str(max(0, now_ms - read_ms) // 1000),
            "timerOffsetBehind": str(max(0, timer_queue_max - queue_offset)),
            "timerCongestNum": str(int(nums.sum())), "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0"}
