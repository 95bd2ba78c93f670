"""``TimerWheel``: ``<root>/timerwheel``, one 32-byte slot per ``timerPrecisionMs`` (layout in
``format/timer_layout.py``), written in place through a shared mapping.

A slot holds ``time / precision`` so a slot from an earlier turn of the wheel reads as empty
(``get_slot`` returns ``None``). The file is sparse; slots are read with ``pread`` and written with
``pwrite`` (no mapping: on a full file system a fault on a hole is a SIGBUS, a syscall an
error), so they are in the page cache at once (they survive a SIGKILL); ``flush`` makes them
durable. The file's size never depends on the number of timers.
"""
from __future__ import annotations

import os

import numpy as np

from ...errors import CorruptFileError
from ...format.timer_layout import SLOT, SLOT_SIZE, SLOTS_TOTAL
from .. import syncprobe

_SLOT_DTYPE = np.dtype([("t", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"), ("magic", ">i4")])
assert _SLOT_DTYPE.itemsize == SLOT_SIZE


class TimerWheel:
    def __init__(self, path: str, precision_ms: int, slots_total: int = SLOTS_TOTAL,
                 readonly: bool = False) -> None:
        self.path = path
        self.precision_ms = precision_ms
        self.slots_total = slots_total
        self.length = slots_total * 2 * SLOT_SIZE
        exists = os.path.exists(path)
        if exists and os.path.getsize(path) not in (0, self.length):
            raise CorruptFileError(path, f"timer wheel length {os.path.getsize(path)} != expected {self.length}")
        if readonly:
            fd = os.open(path, os.O_RDONLY)
        else:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size != self.length:
                os.ftruncate(fd, self.length)  # sparse: pages appear as slots are used
        self._fd = fd

    def _read(self, off: int, n: int) -> bytes:
        data = os.pread(self._fd, n, off)
        if len(data) != n:
            raise OSError(f"{self.path}: short read at {off}")
        return data

    def slot_index(self, time_ms: int) -> int:
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def raw_slot(self, time_ms: int) -> tuple[int, int, int, int, int]:
        """(time_ms, first, last, num, magic) as stored, whatever turn it belongs to."""
        t, first, last, num, magic = SLOT.unpack(self._read(self.slot_index(time_ms) * SLOT_SIZE, SLOT_SIZE))
        return t * self.precision_ms, first, last, num, magic

    def get_slot(self, time_ms: int) -> tuple[int, int, int, int] | None:
        """(first, last, num, magic) of the slot for ``time_ms``, None when empty."""
        t, first, last, num, magic = SLOT.unpack(self._read(self.slot_index(time_ms) * SLOT_SIZE, SLOT_SIZE))
        if t != time_ms // self.precision_ms:
            return None
        return first, last, num, magic

    def put_slot(self, time_ms: int, first: int, last: int, num: int, magic: int = 0) -> None:
        """A full disk is an ``OSError`` here."""
        off = self.slot_index(time_ms) * SLOT_SIZE
        if os.pwrite(self._fd, SLOT.pack(time_ms // self.precision_ms, first, last, num, magic), off) != SLOT_SIZE:
            raise OSError(f"{self.path}: short write at {off}")

    def revise_slot(self, time_ms: int, last: int) -> None:
        """Recovery (``reviseSlot(.., IGNORE, last, force)``): the slot's last unit is ``last``;
        a slot of another turn becomes this one's with ``last`` as first and last."""
        got = self.get_slot(time_ms)
        if got is None:
            self.put_slot(time_ms, last, last, 1)
        else:
            first, old_last, num, magic = got
            if last != old_last:
                self.put_slot(time_ms, first, last, num + (1 if last > old_last else 0), magic)

    def _live(self, time_start_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """(slot indexes, records) of every live slot of the turn starting at ``time_start_ms``."""
        n = self.slots_total * 2
        base = time_start_ms // self.precision_ms
        arr = np.frombuffer(self._read(0, self.length), dtype=_SLOT_DTYPE)
        idx = np.arange(n, dtype=np.int64)
        want = base + (idx - base % n) % n  # the time/precision each index holds in this turn
        live = arr["t"] == want
        return idx[live], arr[live]

    def check_phy_pos(self, time_start_ms: int, max_offset: int) -> int:
        """The smallest first position of a live slot whose last unit is not before
        ``max_offset`` (the wheel points past the timerlog's end), else a huge number."""
        _, rec = self._live(time_start_ms)
        bad = rec["last"] >= max_offset  # a unit starting at the end is not there
        return int(rec["first"][bad].min()) if bad.any() else 1 << 62

    def clear_beyond(self, time_start_ms: int, max_offset: int) -> int:
        """Empty every live slot whose last unit is not before ``max_offset`` (recovery re-walks
        the timerlog to rebuild them); returns how many."""
        idx, rec = self._live(time_start_ms)
        bad = idx[rec["last"] >= max_offset]
        for i in bad:
            os.pwrite(self._fd, bytes(SLOT_SIZE), int(i) * SLOT_SIZE)
        return len(bad)

    def nums_ahead(self, time_start_ms: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(slot times, nums) of the live slots among ``count`` slots from ``time_start_ms``,
        read in one pass (numpy) for metrics."""
        p = self.precision_ms
        n = self.slots_total * 2
        count = min(count, n)
        base = time_start_ms // p
        start = base % n
        dt = _SLOT_DTYPE
        first = np.frombuffer(self._read(start * SLOT_SIZE, (min(n, start + count) - start) * SLOT_SIZE), dtype=dt)
        rest = count - len(first)
        arr = first if rest <= 0 else np.concatenate(
            [first, np.frombuffer(self._read(0, rest * SLOT_SIZE), dtype=dt)])
        want = base + np.arange(len(arr), dtype=np.int64)
        live = arr["t"] == want
        return want[live] * p, arr["num"][live].astype(np.int64)

    def flush(self) -> None:
        os.fdatasync(self._fd)
        syncprobe.synced(self.path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
