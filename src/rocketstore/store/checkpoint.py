"""``StoreCheckpoint``: <root>/checkpoint, 4096 bytes (layout in ``format.layouts``).

Written by replacing the file atomically (temp file, fsync, rename, fsync of the directory), so
a crash leaves either the old or the new checkpoint, never a torn one.
"""
from __future__ import annotations

import os
import threading

from ..errors import CorruptFileError
from ..format.layouts import CHECKPOINT, CHECKPOINT_SIZE


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old or the new content."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
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
                raise CorruptFileError(path, f"checkpoint of {len(data)} bytes, want {CHECKPOINT_SIZE}")
            (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
             self.master_flushed_offset, self.confirm_phy_offset) = CHECKPOINT.unpack(data)

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3 s, at least 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def to_bytes(self) -> bytes:
        head = CHECKPOINT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                               self.index_msg_timestamp, self.master_flushed_offset,
                               self.confirm_phy_offset)
        return head + bytes(CHECKPOINT_SIZE - len(head))

    def flush(self) -> None:
        """Persist atomically. I/O errors propagate."""
        with self._lock:
            atomic_write(self.path, self.to_bytes())
