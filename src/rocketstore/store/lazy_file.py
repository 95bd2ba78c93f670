"""Mapped files opened on first use and closed when idle, under one process-wide cap.

A broker with thousands of queues holds a ConsumeQueue file per queue; keeping each open costs
two descriptors (ours and the one ``mmap`` keeps), so 1,000 one-message queues held 2,000. A
``LazyMappedFile`` opens its descriptor when something writes, syncs or allocates, and maps the
file when something reads (``mm``); every use stamps it with a tick. ``OpenFiles`` counts the
descriptors held this way and, past its limit, closes those of the files used longest ago (down
to three quarters of the limit, so the sort is rare). Closing is safe beside users:

* a descriptor is closed only under the file's ``_io_lock``, which every ``pwrite``,
  ``fdatasync`` and ``fallocate`` holds, taken without blocking (a busy file is skipped), so
  no lock order between files exists;
* a mapping is only dropped (``_map = None``): whoever still holds it (a local, a numpy view)
  keeps it alive, and it is unmapped with its last reference.

Nothing about the file changes: its length, blocks (``allocated``) and positions stay as they
were, and the next use opens it again.
"""
from __future__ import annotations

import itertools
import mmap
import os
import threading

from ..errors import CorruptFileError, StoreError
from .mapped_file import MappedFile, open_sized_file

DEFAULT_LIMIT = 256  # descriptors (a descriptor and a mapping each count one)

_tick = itertools.count().__next__
IDLE, CLOSED = -1, -2  # ``_h_fd`` when not open now / never again (closed or destroyed)


class OpenFiles:
    """The process's lazily opened files and how many descriptors they hold."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._files: set[LazyMappedFile] = set()  # those holding a descriptor or a mapping
        self._lock = threading.Lock()
        self.held = 0  # descriptors held now

    def opened(self, f: "LazyMappedFile", n: int) -> None:
        with self._lock:
            self._files.add(f)
            self.held += n
            over = self.held > self.limit
        if over:
            self._shrink(f)

    def released(self, f: "LazyMappedFile", n: int, gone: bool = False) -> None:
        """``n`` descriptors closed; ``gone``: ``f`` holds none now."""
        with self._lock:
            self.held -= n
            if gone:
                self._files.discard(f)

    def _shrink(self, keep: "LazyMappedFile") -> None:
        target = self.limit * 3 // 4
        with self._lock:
            order = sorted(self._files, key=lambda x: x._last_use)
        for f in order:
            if self.held <= target:
                break
            if f is not keep:
                f._release(blocking=False)


OPEN_FILES = OpenFiles()


class LazyMappedFile(MappedFile):
    """A ``MappedFile`` (sparse: ConsumeQueue files) whose descriptor and mapping exist only
    while it is in use; see the module's notes."""

    __slots__ = ("_h_fd", "_map", "_last_use", "_readonly", "_gone")

    def __init__(self, path: str, file_from_offset: int, file_size: int, *, create: bool = False,
                 readonly: bool = False, durable_create: bool = False) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.store_timestamp = 0
        self.private = False
        self._io_lock = threading.Lock()
        self._warm = (0, 0)
        self._readonly = readonly
        self._map = None
        self._last_use = _tick()
        self._h_fd = IDLE
        self._gone = False
        self.allocated = file_size if readonly else 0
        if create:
            fd = open_sized_file(path, file_size, create=True, durable_create=durable_create,
                                 sparse=True)
            self._h_fd = fd
            OPEN_FILES.opened(self, 1)
        else:
            try:
                actual = os.stat(path).st_size
            except OSError as exc:
                raise StoreError(f"{path}: cannot open: {exc.strerror}") from exc
            if actual != file_size:
                raise CorruptFileError(path, f"file of {actual} bytes, expected {file_size}")
        self.wrote_position = 0 if create else file_size
        self.flushed_position = self.wrote_position

    # -- the descriptor and the mapping, on demand ----------------------------------------------
    @property
    def _fd(self) -> int:  # type: ignore[override]
        fd = self._h_fd
        self._last_use = _tick()
        if fd != IDLE:
            return fd
        try:
            fd = os.open(self.path, os.O_RDONLY if self._readonly else os.O_RDWR)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot open: {exc.strerror}") from exc
        self._h_fd = fd
        OPEN_FILES.opened(self, 1)
        return fd

    @_fd.setter
    def _fd(self, value: int) -> None:
        self._h_fd = value if value >= 0 else CLOSED

    @property
    def mm(self):  # type: ignore[override]
        m = self._map
        self._last_use = _tick()
        if m is not None:
            return m
        with self._io_lock:
            m = self._map
            if m is None:
                if self._gone:
                    raise ValueError(f"{self.path}: closed")
                tmp = os.open(self.path, os.O_RDONLY if self._readonly else os.O_RDWR)
                try:
                    m = mmap.mmap(tmp, self.file_size,
                                  access=mmap.ACCESS_READ if self._readonly else mmap.ACCESS_WRITE)
                except OSError as exc:
                    raise StoreError(f"{self.path}: cannot map: {exc.strerror}") from exc
                finally:
                    os.close(tmp)
                self._map = m
                counted = True
            else:
                counted = False
        if counted:
            OPEN_FILES.opened(self, 1)
        return m

    @mm.setter
    def mm(self, value) -> None:
        self._map = value

    def _release(self, blocking: bool) -> None:
        """Close the descriptor and drop the mapping (they reopen on the next use)."""
        if not self._io_lock.acquire(blocking=blocking):
            return
        try:
            if self._gone:
                return
            n = 0
            fd = self._h_fd
            if fd >= 0:
                self._h_fd = IDLE
                os.close(fd)
                n += 1
            if self._map is not None:
                self._map = None  # unmapped with its last reference
                n += 1
        finally:
            self._io_lock.release()
        OPEN_FILES.released(self, n, gone=True)  # holds nothing now

    def _retire(self) -> None:
        """Closed or destroyed: never opened again; its descriptors leave the count (a
        destroyed file's mapping stays for whoever still reads it, as ``MappedFile.destroy``)."""
        with self._io_lock:
            if self._gone:
                return
            fd, self._h_fd = self._h_fd, CLOSED
            n = 1 if self._map is not None else 0
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                n += 1
            self._gone = True
        OPEN_FILES.released(self, n, gone=True)

    def _close_fd(self) -> None:
        self._retire()

    def close(self) -> None:
        self._retire()
        m, self._map = self._map, None
        if m is not None:
            try:
                m.close()
            except (BufferError, ValueError):
                pass  # a reader still holds a view; the mapping goes with the last reference
