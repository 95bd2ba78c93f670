"""One memory-mapped, pre-sized file: append, read, flush. Knows no record format.

A file is created at its full size (``posix_fallocate``, so a full disk fails here, at creation,
with ``DiskFullError`` — never later as a SIGBUS inside the mapping; the timer log and ext files)
and named by the absolute offset of its first byte. A *sparse* file (CommitLog segments, ConsumeQueue and index files) has its
full logical length from the start — RocketMQ opens only files of exactly the configured size, and
reads a hole as zeros, as it reads its own files, which it maps without allocating — but disk
blocks only as it fills: every write first calls ``ensure_allocated(end)``, which
``posix_fallocate``s ahead of the write position in growing chunks (one page, doubling up to
``SPARSE_CHUNK_MAX``), so a full disk still fails cleanly with ``DiskFullError`` before the
mapped write, never as a SIGBUS. 1,000 one-message queues take 1,000 pages, not 1,000 files. ``wrote_position`` is how far it is written, ``flushed_position`` how
far it is known to be on disk. Writers hold the owner's lock; readers read ``wrote_position``
first and then the bytes below it, which is safe because bytes are copied into the mapping
before the position moves.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading

from ..errors import CorruptFileError, DiskFullError, StoreError
from . import syncprobe

OS_PAGE_SIZE = 4096
SPARSE_CHUNK_MAX = 1 << 20  # the largest step a sparse file's allocation grows by


def allocate(fd: int, path: str, start: int, length: int, what: str = "file") -> None:
    """``posix_fallocate`` ``[start, start + length)``; ``DiskFullError`` when the disk is full."""
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"{path}: no space for {length} more bytes of a {what}") from exc
        raise StoreError(f"{path}: cannot allocate: {exc.strerror}") from exc


def data_ranges(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` that may hold non-zero bytes, as ``(start, end)`` pairs in
    order (``lseek`` ``SEEK_DATA``/``SEEK_HOLE``); everything outside them reads as zeros (a hole,
    or blocks allocated but never written). A filesystem that reports no holes gives the whole
    range, so callers stay correct, only slower."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data from pos to the end of the file
                break
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return [(pos, end)] if not out else out + [(pos, end)]
            raise
        if d >= end:
            break
        h = min(os.lseek(fd, d, os.SEEK_HOLE), end)
        out.append((d, h))
        pos = h
    return out


def next_allocation(allocated: int, end: int, size: int) -> int:
    """How far to allocate so that ``end`` fits: a page at first, then doubling, at most
    ``SPARSE_CHUNK_MAX`` past the old end, whole pages, never past ``size``."""
    step = min(max(allocated, OS_PAGE_SIZE), SPARSE_CHUNK_MAX)
    target = max(end, allocated + step)
    target = -(-target // OS_PAGE_SIZE) * OS_PAGE_SIZE
    return min(target, size)


class PageAllocator:
    """Disk blocks for a sparse file written at scattered places (the index file's hash slots
    and its growing entry list): one bit per page; ``ensure(start, end)`` and ``ensure_at``
    allocate the pages not yet allocated (runs of them with one call each), plus ``ahead``
    bytes past a range's end, before the caller writes into the mapping. Owns ``fd``."""

    def __init__(self, fd: int, path: str, size: int, what: str = "file") -> None:
        self.fd, self.path, self.size, self.what = fd, path, size, what
        import numpy as np  # the index module's dependency; the CommitLog never imports this
        self._np = np
        self._bits = bytearray(-(-size // OS_PAGE_SIZE))  # 1 = allocated; plain indexing is fast
        self._pages = np.frombuffer(self._bits, dtype=bool)  # the same bytes, for batches

    def ensure(self, start: int, end: int, ahead: int = 0) -> None:
        if end <= start:
            return
        p0, p1 = start // OS_PAGE_SIZE, (end - 1) // OS_PAGE_SIZE
        bits = self._bits
        if bits[p0] and bits[p1] and (p1 - p0 < 2 or self._pages[p0:p1 + 1].all()):
            return
        stop = min(self.size, -(-(end + ahead) // OS_PAGE_SIZE) * OS_PAGE_SIZE)
        self._allocate_pages(p0, -(-stop // OS_PAGE_SIZE))

    def ensure_at(self, positions, width: int) -> None:
        """Pages under ``width`` bytes at each of ``positions`` (an int array)."""
        np = self._np
        pos = np.asarray(positions, dtype=np.int64)
        if not len(pos):
            return
        pages = np.unique(np.concatenate((pos // OS_PAGE_SIZE, (pos + width - 1) // OS_PAGE_SIZE)))
        missing = pages[~self._pages[pages]]
        if not len(missing):
            return
        breaks = np.flatnonzero(np.diff(missing) != 1) + 1
        for run in np.split(missing, breaks):
            self._allocate_pages(int(run[0]), int(run[-1]) + 1)

    def _allocate_pages(self, p0: int, p1: int) -> None:
        start = p0 * OS_PAGE_SIZE
        allocate(self.fd, self.path, start, min(self.size, p1 * OS_PAGE_SIZE) - start, self.what)
        self._pages[p0:p1] = True

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def open_sized_file(path: str, size: int, *, create: bool, readonly: bool = False,
                    what: str = "file", durable_create: bool = False, sparse: bool = False) -> int:
    """Open a pre-sized store file and return its descriptor.

    ``create``: make it and allocate all ``size`` bytes now, so a full disk fails here with
    ``DiskFullError`` (never later as a SIGBUS in a mapping); with ``sparse`` only set its
    length (the writer allocates as it fills: ``allocate``). Otherwise check its size and raise
    ``CorruptFileError`` naming the file if it differs.
    """
    flags = os.O_RDONLY if readonly else os.O_RDWR
    if create:
        flags |= os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open: {exc.strerror}") from exc
    if create:
        try:
            if sparse:
                os.ftruncate(fd, size)
            else:
                os.posix_fallocate(fd, 0, size)
            if durable_create:
                # (CommitLog segments) the new file's name must survive a power loss before
                # anything in it is acknowledged: sync its allocation and its directory entry
                os.fsync(fd)
                dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            os.close(fd)
            os.unlink(path)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"{path}: no space for a {size}-byte {what}") from exc
            raise StoreError(f"{path}: cannot allocate: {exc.strerror}") from exc
        if durable_create:
            syncprobe.synced(path, 0)
    else:
        actual = os.fstat(fd).st_size
        if actual != size:
            os.close(fd)
            raise CorruptFileError(path, f"{what} of {actual} bytes, expected {size}")
    return fd


def map_private(path: str, size: int, *, create: bool, what: str = "file") -> mmap.mmap:
    """A private, copy-on-write view of a store file, for read-only opens: writes go to memory
    only, never to the file. ``create`` gives zero-filled memory and no file; a file shorter
    than ``size`` (being created or extended by a live writer) is read into zero-padded memory.
    The file is opened read-only and nothing on disk changes."""
    if create:
        return mmap.mmap(-1, size)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open: {exc.strerror}") from exc
    try:
        actual = os.fstat(fd).st_size
        if actual > size:
            raise CorruptFileError(path, f"{what} of {actual} bytes, expected {size}")
        if actual == size:
            return mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        mm = mmap.mmap(-1, size)
        pos = 0
        while pos < actual:
            chunk = os.pread(fd, min(1 << 24, actual - pos), pos)
            if not chunk:
                break
            mm[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        return mm
    finally:
        os.close(fd)


class MappedFile:
    __slots__ = ("path", "file_from_offset", "file_size", "mm", "_fd", "wrote_position",
                 "flushed_position", "store_timestamp", "_io_lock", "private", "allocated",
                 "_warm")

    def __init__(self, path: str, file_from_offset: int, file_size: int, *, create: bool = False,
                 readonly: bool = False, private: bool = False, durable_create: bool = False,
                 sparse: bool = False) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.store_timestamp = 0  # store time of the last message appended (CommitLog only)
        self.private = private  # a read-only open's copy-on-write view: nothing reaches the disk
        self._io_lock = threading.Lock()
        self._warm = (0, 0)  # pages ``write_at`` wrote with pwrite: [start, end) (see there)
        # bytes known to have disk blocks: all of a fully allocated file; a sparse one's writer
        # allocates from 0 (fallocate over blocks already there is a no-op)
        self.allocated = 0 if sparse and not readonly and not private else file_size
        if private:
            self.mm = map_private(path, file_size, create=create)
            self._fd = -1
            self.wrote_position = 0 if create else file_size
            self.flushed_position = self.wrote_position
            return
        fd = open_sized_file(path, file_size, create=create, readonly=readonly,
                             durable_create=durable_create, sparse=sparse)
        try:
            self.mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        except BaseException as exc:
            try:
                os.close(fd)
            except OSError:
                pass
            if create:  # leave no half-made file behind: a retry creates it again (O_EXCL)
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise StoreError(f"{path}: cannot map: {exc.strerror}") from exc
            raise
        self._fd = fd
        self.wrote_position = 0 if create else file_size
        self.flushed_position = self.wrote_position

    # -- positions --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = pos
        self.flushed_position = pos

    # -- write / read -------------------------------------------------------------------------
    def ensure_allocated(self, end: int) -> None:
        """Make sure ``[0, end)`` has disk blocks before a mapped write there (sparse files;
        free for fully allocated ones). ``DiskFullError`` when the disk is full."""
        if end <= self.allocated:
            return
        with self._io_lock:
            if self._fd < 0 or end <= self.allocated:
                return
            target = next_allocation(self.allocated, end, self.file_size)
            allocate(self._fd, self.path, self.allocated, target - self.allocated)
            self.allocated = target

    def data_ranges(self, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
        """Where in ``[start, end)`` (default: to the file's end) non-zero bytes may be
        (``data_ranges``); the rest reads as zeros. A private view may hold bytes written in
        memory only: all of it counts as data."""
        end = self.file_size if end is None else min(end, self.file_size)
        if start >= end:
            return []
        if self.private:
            return [(start, end)]
        with self._io_lock:
            fd = self._fd
            if fd >= 0:
                return data_ranges(fd, start, end)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return [(start, end)]
        try:
            return data_ranges(fd, start, end)
        finally:
            os.close(fd)

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` to ``pos`` with ``pwrite`` (the mapping sees it: one page cache), not
        through the mapping: the first write fault in a newly made file costs milliseconds
        here, a ``pwrite`` microseconds — what a store of many small queues pays once per
        file. The caller allocated the blocks first (``ensure_allocated``).

        Only the first write into a page pays a syscall: later writes inside pages a pwrite
        wrote already (``_warm``, one run of pages) are a memory copy. A ConsumeQueue unit is
        20 bytes, so the reput writes ~200 units per page with no syscall and without giving
        up the GIL between them. Which way a write goes changes its speed, never its bytes."""
        end = pos + len(data)
        warm_start, warm_end = self._warm
        if warm_start <= pos and end <= warm_end:
            self.mm[pos:end] = data
            return
        with self._io_lock:
            fd = self._fd
            if fd >= 0:
                view, at = memoryview(data), pos
                while view:
                    try:
                        n = os.pwrite(fd, view, at)
                    except OSError as exc:
                        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                            raise DiskFullError(
                                f"{self.path}: no space for {len(view)} bytes") from exc
                        raise StoreError(f"{self.path}: cannot write: {exc.strerror}") from exc
                    view, at = view[n:], at + n
                page_end = -(-end // OS_PAGE_SIZE) * OS_PAGE_SIZE
                self._warm = ((warm_start, max(warm_end, page_end))
                              if warm_start <= pos <= warm_end
                              else (pos // OS_PAGE_SIZE * OS_PAGE_SIZE, page_end))
                return
        self.mm[pos:end] = data  # a private view (or a destroyed file)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Copy ``data`` at the write position; returns the position it was written at."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise ValueError(f"{self.path}: append of {n} bytes at {pos} overflows {self.file_size}")
        if pos + n > self.allocated:
            self.ensure_allocated(pos + n)
        self.mm[pos:pos + n] = data
        self.wrote_position = pos + n
        return pos

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        """A zero-copy view of ``[start, end)`` (default: up to the write position)."""
        if end is None:
            end = self.wrote_position
        return memoryview(self.mm)[start:end]

    def read(self, pos: int, size: int) -> bytes:
        return self.mm[pos:pos + size]

    # -- durability -------------------------------------------------------------------------
    def flush(self, least_pages: int = 0, upto: int | None = None) -> int:
        """fdatasync the written-but-unflushed bytes if they span ``least_pages`` pages (0: always).

        ``upto`` caps the position recorded as flushed (a caller that read other state first
        passes the write position it captured). ``fdatasync`` releases the GIL, unlike
        ``mmap.flush``, so putters keep appending during the sync (group commit). Returns the
        new flushed position; I/O errors propagate.
        """
        wrote = self.wrote_position if upto is None else min(upto, self.wrote_position)
        flushed = self.flushed_position
        if wrote <= flushed:
            return flushed
        if least_pages > 0 and (wrote // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE) < least_pages:
            return flushed
        if self.private:  # nothing of a read-only view is ever written to disk
            self.flushed_position = max(self.flushed_position, wrote)
            return self.flushed_position
        with self._io_lock:
            if self._fd < 0:  # destroyed meanwhile: nothing left to make durable
                return self.flushed_position
            os.fdatasync(self._fd)
            syncprobe.synced(self.path, wrote)
            if wrote > self.flushed_position:
                self.flushed_position = wrote
        return self.flushed_position

    def close(self) -> None:
        try:
            self.mm.close()
        except (BufferError, ValueError):
            pass  # a reader still holds a view; the mapping goes with the last reference
        self._close_fd()

    def _close_fd(self) -> None:
        with self._io_lock:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def destroy(self) -> None:
        """Unlink the file. The mapping is left to the garbage collector, so a reader that
        found this segment just before it was deleted still reads valid bytes (never a closed
        mmap); the disk space returns when the last reference goes."""
        self._close_fd()
        if self.private:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def touch_mtime(self) -> float:
        return os.stat(self.path).st_mtime

    def __repr__(self) -> str:
        return f"MappedFile({self.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"
