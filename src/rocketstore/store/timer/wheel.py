"""``TimerWheel``: ``<root>/timerwheel``, one 32-byte slot per ``timerPrecisionMs`` (layout in
``format/timer_layout.py``), written in place through a shared mapping.

A slot holds ``time / precision`` so a slot from an earlier turn of the wheel reads as empty
(``get_slot`` returns ``None``). Writes go to the page cache at once (they survive a SIGKILL);
``flush`` makes them durable. The file's size never depends on the number of timers.
"""
from __future__ import annotations

import mmap
import os

from ...errors import CorruptFileError
from ...format.timer_layout import SLOT, SLOT_SIZE, SLOTS_TOTAL
from .. import syncprobe


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
            self.mm = mmap.mmap(fd, self.length, access=mmap.ACCESS_COPY)
        else:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size != self.length:
                os.ftruncate(fd, self.length)  # sparse: pages appear as slots are used
            self.mm = mmap.mmap(fd, self.length, access=mmap.ACCESS_WRITE)
        self._fd = fd

    def slot_index(self, time_ms: int) -> int:
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def raw_slot(self, time_ms: int) -> tuple[int, int, int, int, int]:
        """(time_ms, first, last, num, magic) as stored, whatever turn it belongs to."""
        t, first, last, num, magic = SLOT.unpack_from(self.mm, self.slot_index(time_ms) * SLOT_SIZE)
        return t * self.precision_ms, first, last, num, magic

    def get_slot(self, time_ms: int) -> tuple[int, int, int, int] | None:
        """(first, last, num, magic) of the slot for ``time_ms``, None when empty."""
        t, first, last, num, magic = SLOT.unpack_from(self.mm, self.slot_index(time_ms) * SLOT_SIZE)
        if t != time_ms // self.precision_ms:
            return None
        return first, last, num, magic

    def put_slot(self, time_ms: int, first: int, last: int, num: int, magic: int = 0) -> None:
        off = self.slot_index(time_ms) * SLOT_SIZE
        self.mm[off:off + SLOT_SIZE] = SLOT.pack(time_ms // self.precision_ms, first, last, num, magic)

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

    def check_phy_pos(self, time_start_ms: int, max_offset: int) -> int:
        """The smallest first position of a live slot whose last position is beyond
        ``max_offset`` (the wheel points past the timerlog's end), else a huge number."""
        p = self.precision_ms
        base = time_start_ms // p
        n = self.slots_total * 2
        start = base % n
        min_first = 1 << 62
        mm = self.mm
        for i in range(n):
            off = ((start + i) % n) * SLOT_SIZE
            t, first, last, _, _ = SLOT.unpack_from(mm, off)
            if t == base + i and last > max_offset and first < min_first:
                min_first = first
        return min_first

    def clear_beyond(self, time_start_ms: int, max_offset: int) -> int:
        """Empty every live slot whose last position is beyond ``max_offset`` (recovery re-walks
        the timerlog to rebuild them); returns how many."""
        p = self.precision_ms
        base = time_start_ms // p
        n = self.slots_total * 2
        cleared = 0
        for i in range(n):
            off = ((base + i) % n) * SLOT_SIZE
            t, _, last, _, _ = SLOT.unpack_from(self.mm, off)
            if t == base + i and last > max_offset:
                self.mm[off:off + SLOT_SIZE] = bytes(SLOT_SIZE)
                cleared += 1
        return cleared

    def live_slots(self, time_start_ms: int, count: int):
        """(time_ms, first, last, num) of the live slots in ``count`` slots from ``time_start_ms``."""
        p = self.precision_ms
        base = time_start_ms // p
        n = self.slots_total * 2
        for i in range(min(count, n)):
            t, first, last, num, _ = SLOT.unpack_from(self.mm, ((base + i) % n) * SLOT_SIZE)
            if t == base + i:
                yield t * p, first, last, num

    def flush(self) -> None:
        self.mm.flush()
        syncprobe.synced(self.path)

    def close(self) -> None:
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
