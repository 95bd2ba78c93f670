"""``<root>/lock``: the one lock of a store directory.

A process that writes a store holds ``<root>/lock`` exclusively for as long as it has it open:
``flock`` (what another ``MessageStore`` or ``rocketstore`` command tries) and, for
``rocketstore rebuild``, also ``lockf`` (the POSIX lock RocketMQ's own broker takes), so
neither a second writer of ours nor a Java broker can open the directory meanwhile. A command
that only needs the store closed (``verify``) probes the lock without holding it. The lock
is the kernel's: it goes away with the process, so a crash leaves nothing to clean up.
"""
from __future__ import annotations

import errno
import fcntl
import os

from ..errors import StoreLockedError

_HELD = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


class StoreLock:
    """``with StoreLock(root):`` or ``acquire()`` / ``release()``; ``posix``: take RocketMQ's
    ``lockf`` too; ``why``: what a refusal says after the path."""

    def __init__(self, root: str, *, posix: bool = False,
                 why: str = "the store is open in another process or store") -> None:
        self.path = os.path.join(root, "lock")
        self.posix = posix
        self.why = why
        self.fd: int | None = None

    def acquire(self) -> "StoreLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if self.posix:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            detail = "" if exc.errno in _HELD else f" ({exc})"
            raise StoreLockedError(f"{self.path}: {self.why}{detail}") from exc
        os.pwrite(fd, b"lock", 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            if self.posix:
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "StoreLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_unlocked(root: str, why: str) -> None:
    """Raise ``StoreLockedError`` (``why`` after the path) when a process holds ``root``'s lock;
    the probe takes and drops it, and creates no file."""
    path = os.path.join(root, "lock")
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        raise StoreLockedError(f"{path}: {why}") from exc
    finally:
        os.close(fd)  # closing drops the probe lock
