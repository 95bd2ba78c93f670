"""The posix backend: each segment a file below the base directory (RocketMQ's
``PosixFileSegment``: positioned writes, forced to disk before the write is acknowledged). Files carry no checksum of their own:
each record's checks (``repair.record_ok``) find damage."""
from __future__ import annotations

import os


class PosixBackend:
    def __init__(self, base: str) -> None:
        self.base = os.path.abspath(os.fspath(base))

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"bad tier key {key!r}")
        return os.path.join(self.base, *parts)

    def size(self, key: str) -> int:
        try:
            return os.path.getsize(self._path(key))
        except FileNotFoundError:
            return 0

    def append(self, key: str, position: int, data: bytes) -> None:
        path = self._path(key)
        new = not os.path.exists(path)
        if new:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size > position:
                os.ftruncate(fd, position)
            view = memoryview(data)
            pos = position
            while view:
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            _fsync_dir(os.path.dirname(path))

    def read(self, key: str, position: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as fh:
                fh.seek(position)
                return fh.read(length)
        except FileNotFoundError:
            return b""

    def list(self, prefix: str) -> list[tuple[str, int]]:
        root = self._path(prefix) if prefix else self.base
        out = []
        for dirpath, _dirs, files in os.walk(root):
            rel = os.path.relpath(dirpath, self.base).replace(os.sep, "/")
            for name in files:
                out.append((f"{rel}/{name}" if rel != "." else name,
                            os.path.getsize(os.path.join(dirpath, name))))
        return sorted(out)

    def truncate(self, key: str, size: int) -> None:
        path = self._path(key)
        if os.path.exists(path):
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass


    def replace(self, key: str, data: bytes) -> None:
        """A temporary file beside it (a name no segment has), forced, then renamed over it."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.replace")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path))

    def salvage(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return b""


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
