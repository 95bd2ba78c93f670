"""``TimerCheckpoint``: ``<root>/config/timercheck``, one 4096-byte page written in place
(RocketMQ maps it too); layout in ``format/timer_layout.py``.

Each field is one aligned 8-byte store into the shared mapping, so a SIGKILL leaves each field
old or new, never torn; ``flush`` makes the page durable.
"""
from __future__ import annotations

import mmap
import os
import time

from ...format.timer_layout import (CURSOR_CL_OFF, CURSOR_POS_OFF, CURSOR_SLOT_OFF, I64,
                                    TIMER_CHECKPOINT, TIMER_CHECKPOINT_SIZE)
from ...errors import StoreError
from .. import syncprobe


class TimerCheckpoint:
    def __init__(self, path: str, readonly: bool = False) -> None:
        self.path = path
        existed = os.path.exists(path)
        if readonly:
            if not existed:
                self.mm = mmap.mmap(-1, TIMER_CHECKPOINT_SIZE)
                self._fd = -1
            else:
                self._fd = os.open(path, os.O_RDONLY)
                self.mm = mmap.mmap(self._fd, TIMER_CHECKPOINT_SIZE, access=mmap.ACCESS_COPY)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(self._fd).st_size < TIMER_CHECKPOINT_SIZE:
                os.ftruncate(self._fd, TIMER_CHECKPOINT_SIZE)
            try:  # real blocks: stores into the mapping can never meet a full disk (SIGBUS)
                os.posix_fallocate(self._fd, 0, TIMER_CHECKPOINT_SIZE)
            except OSError as exc:
                os.close(self._fd)
                raise StoreError(f"{path}: cannot allocate the timer checkpoint: {exc.strerror}") from exc
            self.mm = mmap.mmap(self._fd, TIMER_CHECKPOINT_SIZE, access=mmap.ACCESS_WRITE)
        self.existed = existed
        if not existed and not readonly:
            self._put(CURSOR_POS_OFF, -1)

    def _get(self, off: int) -> int:
        return I64.unpack_from(self.mm, off)[0]

    def _put(self, off: int, v: int) -> None:
        self.mm[off:off + 8] = I64.pack(v)

    def fields(self) -> tuple:
        return TIMER_CHECKPOINT.unpack_from(self.mm, 0)

    last_read_time_ms = property(lambda s: s._get(0), lambda s, v: s._put(0, v))
    last_timerlog_flush_pos = property(lambda s: s._get(8), lambda s, v: s._put(8, v))
    last_timer_queue_offset = property(lambda s: s._get(16), lambda s, v: s._put(16, v))
    master_timer_queue_offset = property(lambda s: s._get(24), lambda s, v: s._put(24, v))
    cursor_slot_ms = property(lambda s: s._get(CURSOR_SLOT_OFF), lambda s, v: s._put(CURSOR_SLOT_OFF, v))
    cursor_unit_pos = property(lambda s: s._get(CURSOR_POS_OFF), lambda s, v: s._put(CURSOR_POS_OFF, v))
    cursor_cl_offset = property(lambda s: s._get(CURSOR_CL_OFF), lambda s, v: s._put(CURSOR_CL_OFF, v))

    def next_version(self) -> None:
        """DataVersion.nextVersion: timestamp now, counter + 1."""
        self._put(40, int(time.time() * 1000))
        self._put(48, self._get(48) + 1)

    def flush(self) -> None:
        syncprobe.crash_point("timer-checkpoint")
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
