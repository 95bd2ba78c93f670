"""The one storage interface the tier writes through (``posix.PosixBackend``, ``s3.S3Backend``).

Keys are ``/``-separated paths relative to the tier's base (``layout.segment_key``). A segment
is written only at its end (a repair replaces it whole: ``replace``) (``append(key, position, data)`` with ``position`` = its current
size, or a shorter size after a cut: the bytes past ``position`` are dropped), so a backend
that cannot append (S3) may rewrite the object. Every ``append`` is durable when it returns.
"""
from __future__ import annotations

from typing import Protocol


class Backend(Protocol):
    def size(self, key: str) -> int:
        """The segment's length, 0 when it does not exist."""
        ...

    def append(self, key: str, position: int, data: bytes) -> None:
        """Write ``data`` at ``position`` (creating the segment), dropping anything after."""
        ...

    def read(self, key: str, position: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``position`` (fewer at the end)."""
        ...

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """``(key, size)`` of every segment below ``prefix`` (a directory-like key)."""
        ...

    def truncate(self, key: str, size: int) -> None:
        ...

    def delete(self, key: str) -> None:
        ...

    def replace(self, key: str, data: bytes) -> None:
        """Make the segment ``data`` at once: a reader or a crash sees the old bytes or the new,
        never a mix (a repair rewrites a segment in place with it)."""
        ...

    def salvage(self, key: str) -> bytes:
        """The object's bytes as they are, without the whole-object check a full read does
        (S3): what a repair starts from when that check fails."""
        ...


def open_backend(tcfg) -> Backend:
    """The backend a ``config.TierConfig`` names."""
    if tcfg.backend == "s3":
        from .s3 import S3Backend
        return S3Backend.from_config(tcfg)
    from .posix import PosixBackend
    return PosixBackend(tcfg.file_path)
