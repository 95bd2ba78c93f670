"""The posix backend: each segment a file below the base directory (RocketMQ's
``PosixFileSegment``: positioned writes, forced to disk before the write is acknowledged)."""
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


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
