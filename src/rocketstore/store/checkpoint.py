"""``StoreCheckpoint``: <root>/checkpoint, 4096 bytes (layout in ``format.layouts``).

Written by replacing the file atomically (temp file, fsync, rename, fsync of the directory), so
a crash leaves either the old or the new checkpoint, never a torn one. When the disk is full the
temp file cannot be created; the checkpoint is then rewritten in place (``pwrite`` of the whole
page + ``fdatasync``): the five fields share one 512-byte sector, which disks write atomically,
and no new block is needed.

Every field must describe data that is already on disk (payload first, checkpoint second):
physic is set after a CommitLog sync, index after a full index file is flushed, and logics —
which dispatch raises continuously in memory — is written capped at the value the logics
flusher marked durable (read before it flushed the ConsumeQueues, ``mark_logics_durable``).
A checkpoint that lags is always safe: abnormal recovery just walks back further.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from typing import Callable

from ..format.layouts import CHECKPOINT, CHECKPOINT_SIZE
from . import syncprobe

log = logging.getLogger(__name__)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, point: str | None = "checkpoint-write",
                 before_replace: Callable[[], None] | None = None, keep_mode: bool = False,
                 new_file_mode: int | None = None, record_synced: bool = True) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old or the new content: a temp
    file beside it, fsync, rename over it, fsync of the directory. The one atomic write of the
    project (the checkpoint, the abort file, the broker's state files, the ACL files).

    ``point``: the crash point passed just before the rename (``syncprobe``); ``before_replace``
    runs after the temp file is durable, before the rename (the state files rotate their
    ``.bak`` there); ``keep_mode``: the new file keeps the old one's permission bits;
    ``new_file_mode``: the permission bits when there was no file; ``record_synced``: tell the
    power-loss probe the file is durable."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as fh:
            if keep_mode and os.path.exists(path):
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            elif new_file_mode is not None and not os.path.exists(path):
                os.chmod(tmp, new_file_mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:  # a full disk: the old version stays, no partial temp file is left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if before_replace is not None:
        before_replace()
    if point is not None:
        syncprobe.crash_point(point)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    if record_synced:
        syncprobe.synced(path)


def overwrite_in_place(path: str, data: bytes) -> None:
    """Rewrite an existing file of the same size in place (needs no new disk space)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.EIO, f"{path}: short write")
        os.fdatasync(fd)
    finally:
        os.close(fd)
    syncprobe.synced(path)


class StoreCheckpoint:
    def __init__(self, path: str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only  # a read-only open never writes it
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self._lock = threading.Lock()
        if os.path.exists(path):
            with open(path, "rb") as fh:
                data = fh.read(CHECKPOINT.size)
            if len(data) < CHECKPOINT.size:
                # derived state: read as "nothing known durable", so an abnormal recovery walks
                # back to the first segment (safe, only slower); rewritten by the next flush
                log.warning("%s: checkpoint of %d bytes (want %d) read as zeros", path, len(data),
                            CHECKPOINT_SIZE)
                data = bytes(CHECKPOINT.size)
            (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
             self.master_flushed_offset, self.confirm_phy_offset) = CHECKPOINT.unpack(data)
        self._logics_durable: int | None = None  # no cap until a store tracks durability
        self.flush_count = 0

    def track_logics_durability(self) -> None:
        """From now on write logics capped at what ``mark_logics_durable`` confirmed."""
        if self._logics_durable is None:
            self._logics_durable = self.logics_msg_timestamp

    def mark_logics_durable(self, ts: int) -> None:
        """The ConsumeQueues hold every unit stored at or before ``ts`` on disk."""
        if self._logics_durable is not None and ts > self._logics_durable:
            self._logics_durable = ts

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3 s, at least 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def to_bytes(self) -> bytes:
        logics = self.logics_msg_timestamp
        if self._logics_durable is not None:
            logics = min(logics, self._logics_durable)
        head = CHECKPOINT.pack(self.physic_msg_timestamp, logics,
                               self.index_msg_timestamp, self.master_flushed_offset,
                               self.confirm_phy_offset)
        return head + bytes(CHECKPOINT_SIZE - len(head))

    def flush(self) -> None:
        """Persist atomically. I/O errors propagate."""
        if self.read_only:
            return
        with self._lock:
            data = self.to_bytes()
            try:
                atomic_write(self.path, data)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not os.path.exists(self.path) \
                        or os.path.getsize(self.path) != len(data):
                    raise
                overwrite_in_place(self.path, data)
            self.flush_count += 1
