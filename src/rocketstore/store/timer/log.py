"""``TimerLog``: ``<root>/timerlog/``, mapped files of 52-byte units (``format/timer_layout.py``),
``mappedFileSizeTimerLog`` bytes each, chained per wheel slot through ``prevPos``.

A unit is written body first and its ``size`` field last, so a process killed in the middle of
an append leaves a unit recovery does not accept (size 0) rather than one with half its fields.
"""
from __future__ import annotations

from ...format.timer_layout import (BLANK, BLANK_MAGIC_CODE, MIN_BLANK_LEN, UNIT, UNIT_BODY,
                                    UNIT_SIZE, is_magic_ok)
from ..mapped_file_queue import MappedFileQueue

_SIZE_FIELD = UNIT_SIZE.to_bytes(4, "big")


class TimerLog:
    def __init__(self, directory: str, file_size: int, readonly: bool = False) -> None:
        self.file_size = file_size
        self.queue = MappedFileQueue(directory, file_size, readonly=readonly, private=readonly,
                                     crash_point="timerlog-roll")

    def load(self) -> None:
        self.queue.load()

    def append(self, prev_pos: int, magic: int, enqueue_ms: int, delay_ms: int, offset_py: int,
               size_py: int, topic_hash: int) -> int:
        """Append one unit; returns its timerlog offset."""
        q = self.queue
        mf = q.get_last_mapped_file(0)
        if UNIT_SIZE + MIN_BLANK_LEN > mf.file_size - mf.wrote_position:
            left = mf.file_size - mf.wrote_position
            mf.mm[mf.wrote_position:mf.wrote_position + MIN_BLANK_LEN] = BLANK.pack(left, 0, BLANK_MAGIC_CODE)
            mf.wrote_position = mf.file_size
            mf = q.get_last_mapped_file(0)
        pos = mf.wrote_position
        body = UNIT_BODY.pack(prev_pos, magic, enqueue_ms, delay_ms, offset_py, size_py, topic_hash, 0)
        mf.mm[pos + 4:pos + UNIT_SIZE] = body
        mf.mm[pos:pos + 4] = _SIZE_FIELD
        mf.wrote_position = pos + UNIT_SIZE
        return mf.file_from_offset + pos

    def read_unit(self, offset: int) -> tuple | None:
        """(size, prevPos, magic, enqueueTime, delayTime, offsetPy, sizePy, topicHash, reserved)."""
        mf = self.queue.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + UNIT_SIZE > mf.file_size:
            return None
        return UNIT.unpack_from(mf.mm, pos)

    def max_offset(self) -> int:
        return self.queue.max_offset()

    def min_offset(self) -> int:
        return self.queue.min_offset()

    def recover(self, begin: int, revise) -> int:
        """Walk units from the file holding ``begin`` to the first invalid one, calling
        ``revise(deliver_ms, offset)`` for each; cut what follows. Returns the valid end."""
        files = self.queue.files
        if not files:
            return 0
        idx = len(files) - 1
        while idx > 0 and begin < files[idx].file_from_offset:
            idx -= 1
        check = files[idx].file_from_offset
        stop = False
        for mf in files[idx:]:
            pos = 0
            mm = mf.mm
            while pos + MIN_BLANK_LEN <= mf.file_size:
                size, _prev, magic = BLANK.unpack_from(mm, pos)
                if magic == BLANK_MAGIC_CODE and size == mf.file_size - pos:
                    pos = mf.file_size
                    break
                if size != UNIT_SIZE or not is_magic_ok(magic) or pos + UNIT_SIZE > mf.file_size:
                    stop = True
                    break
                u = UNIT.unpack_from(mm, pos)
                revise(u[3] + u[4], mf.file_from_offset + pos)
                pos += UNIT_SIZE
            check = mf.file_from_offset + pos
            if stop:
                break
        self.queue.truncate_dirty(check)
        return check

    def flush(self) -> int:
        return self.queue.flush(0)

    def flushed_where(self) -> int:
        return self.queue.flushed_where()

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Drop whole timerlog files whose last unit points below the CommitLog's first
        offset (``deleteExpiredFileByOffsetForTimerLog``); never the last file."""
        files = self.queue.files
        n = 0
        last_unit = self.file_size - (self.file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE
        for mf in files[:-1]:
            u = UNIT.unpack_from(mf.mm, last_unit) if last_unit >= 0 else None
            if u is None or u[0] != UNIT_SIZE or u[5] >= min_commitlog_offset:
                break
            n += 1
        if n:
            self.queue.delete_first_files(n)
        return n

    def close(self) -> None:
        self.queue.close()
