"""An ordered list of equal-size mapped files forming one logical byte stream.

Files are named by the 20-digit offset of their first byte (``format.layouts.offset_to_name``).
``load`` checks every file's size (a wrong size raises ``CorruptFileError`` naming the file);
``get_last_mapped_file`` creates the next file when the last one is full; ``truncate_dirty``
sets the write position of the file holding an offset and destroys every later file.
"""
from __future__ import annotations

import os
import threading

from ..errors import CorruptFileError
from ..format.layouts import name_to_offset, offset_to_name
from . import syncprobe
from .lazy_file import LazyMappedFile
from .mapped_file import MappedFile


class MappedFileQueue:
    def __init__(self, directory: str, file_size: int, *, readonly: bool = False,
                 private: bool = False, durable_create: bool = False,
                 crash_point: str | None = None, sparse: bool = False, lazy: bool = False) -> None:
        self.directory = directory
        self.crash_point = crash_point  # syncprobe's name for "a new file, not yet written"
        self.file_size = file_size
        self.readonly = readonly
        self.private = private  # copy-on-write views, no file created or removed (read-only open)
        self.durable_create = durable_create  # sync a new file and its directory entry (CommitLog)
        self.sparse = sparse  # files allocated as they fill (``MappedFile.ensure_allocated``)
        # opened on use, closed when idle under a process-wide cap (``lazy_file``)
        self.lazy = lazy and sparse and not private and not readonly
        self.files: list[MappedFile] = []
        self._lock = threading.RLock()

    def load(self) -> None:
        """Open every segment in the directory, in offset order. Positions start at file end."""
        if not os.path.isdir(self.directory):
            return
        entries = []
        for name in os.listdir(self.directory):
            off = name_to_offset(name)
            if off is None:
                continue  # temp files and foreign names are not segments
            entries.append((off, name))
        entries.sort()
        prev = None
        for off, name in entries:
            path = os.path.join(self.directory, name)
            if off % self.file_size:
                raise CorruptFileError(path, f"offset {off} is not a multiple of the file size {self.file_size}")
            if prev is not None and off != prev + self.file_size:
                raise CorruptFileError(path, f"gap: previous file starts at {prev}")
            if self.lazy:
                self.files.append(LazyMappedFile(path, off, self.file_size))
            else:
                self.files.append(MappedFile(path, off, self.file_size, readonly=self.readonly,
                                             private=self.private, sparse=self.sparse))
            prev = off

    # -- lookup -----------------------------------------------------------------------------------
    def first(self) -> MappedFile | None:
        f = self.files
        return f[0] if f else None

    def last(self) -> MappedFile | None:
        f = self.files
        return f[-1] if f else None

    def min_offset(self) -> int:
        f = self.files
        return f[0].file_from_offset if f else -1

    def max_offset(self) -> int:
        """Offset right after the last written byte."""
        f = self.files
        if not f:
            return 0
        last = f[-1]
        return last.file_from_offset + last.wrote_position

    def flushed_where(self) -> int:
        """Offset up to which every byte is known to be on disk."""
        files = self.files
        for mf in files:
            if mf.flushed_position < mf.wrote_position or mf is files[-1]:
                return mf.file_from_offset + mf.flushed_position
        return 0

    def find(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0]
        idx = (offset - first.file_from_offset) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return first if return_first_on_not_found else None

    # -- growth -----------------------------------------------------------------------------------
    def get_last_mapped_file(self, start_offset: int = 0, create: bool = True) -> MappedFile | None:
        """The last file, creating the next one when there is none or it is full."""
        with self._lock:
            last = self.files[-1] if self.files else None
            if last is not None and not last.is_full():
                return last
            if not create:
                return last
            if last is None:
                create_offset = start_offset - start_offset % self.file_size
            else:
                create_offset = last.file_from_offset + self.file_size
            if not self.private:
                os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, offset_to_name(create_offset))
            if self.lazy:
                mf = LazyMappedFile(path, create_offset, self.file_size, create=True,
                                    durable_create=self.durable_create)
            else:
                mf = MappedFile(path, create_offset, self.file_size, create=True,
                                private=self.private, durable_create=self.durable_create,
                                sparse=self.sparse)
            self.files.append(mf)
            if self.crash_point is not None:
                syncprobe.crash_point(self.crash_point)
            return mf

    # -- truncation and deletion ------------------------------------------------------------------
    def truncate_dirty(self, offset: int) -> None:
        """Keep bytes below ``offset``: position the file holding it, destroy later files."""
        with self._lock:
            keep = []
            for mf in self.files:
                end = mf.file_from_offset + self.file_size
                if end > offset:
                    if offset >= mf.file_from_offset:
                        pos = offset % self.file_size
                        mf.set_positions(pos)
                        if pos < self.file_size and not self.readonly:
                            _zero_tail(mf, pos)
                        keep.append(mf)
                    else:
                        mf.destroy()
                else:
                    keep.append(mf)
            self.files = keep

    def delete_first_files(self, count: int) -> list[MappedFile]:
        with self._lock:
            gone, self.files = self.files[:count], self.files[count:]
        for mf in gone:
            mf.destroy()
        return gone

    def destroy_all(self) -> None:
        with self._lock:
            for mf in self.files:
                mf.destroy()
            self.files = []

    def flush(self, least_pages: int = 0) -> int:
        """Flush the first file with unflushed bytes (and later ones); returns flushed offset."""
        for mf in list(self.files):
            if mf.flushed_position < mf.wrote_position:
                mf.flush(least_pages)
        return self.flushed_where()

    def close(self) -> None:
        for mf in self.files:
            mf.close()


def _zero_tail(mf: MappedFile, pos: int) -> None:
    """Zero the bytes after a truncation point so no stale record looks valid later. Only the
    parts that may hold data are read (``MappedFile.data_ranges``): holes and unwritten blocks
    already read as zeros, and touching them would fault in pages for nothing."""
    chunk = 1 << 20
    for lo, hi in mf.data_ranges(pos):
        while lo < hi:
            n = min(chunk, hi - lo)
            if mf.mm[lo:lo + min(n, 64)].count(0) == min(n, 64) and mf.mm[lo:lo + n].count(0) == n:
                lo += n
                continue
            mf.mm[lo:lo + n] = bytes(n)
            lo += n
