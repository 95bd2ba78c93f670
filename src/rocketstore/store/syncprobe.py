"""Power-loss probe: a record of what each store file held when it was last made durable.

Off unless the process starts with ``ROCKETSTORE_SYNC_SHADOW=<shadow dir>:<store root>`` (the
power-loss tests set it in a child writer; nothing else should). Then every point where the
store makes a file durable — ``fdatasync`` of a mapped file, ``msync`` of an index file, the
atomic replace of the checkpoint and other small files, the creation of a CommitLog segment
(with its directory synced) — calls ``synced(path, upto)``, which copies the file as it is at that
moment to ``<shadow dir>/<path relative to the store root>`` (atomically: temp file + rename)
and records ``upto`` (the position made durable) beside it in ``<copy>.pos``.

The copy is taken *after* the sync returned and *before* the caller learns it did, so whatever
was acknowledged as durable is in the copy. A test kills the writer, then builds the disk a
power loss could leave: per page, either the last synced copy or the newer bytes (the kernel
may have written any dirty page back before the loss); files never synced are absent.
"""
from __future__ import annotations

import json
import os
import signal
import threading

_SPEC = os.environ.get("ROCKETSTORE_SYNC_SHADOW")
_SHADOW, _ROOT = (os.path.abspath(p) for p in _SPEC.rsplit(":", 1)) if _SPEC else (None, None)


_CRASH = os.environ.get("ROCKETSTORE_CRASH_AT")
_CRASH_POINT, _CRASH_AT = (_CRASH.rsplit(":", 1)[0], int(_CRASH.rsplit(":", 1)[1])) if _CRASH \
    else (None, 0)
_crash_hits = 0
_crash_lock = threading.Lock()

def crash_point(point: str) -> None:
    """SIGKILL this process the ``n``-th time it passes ``point`` (see the module doc)."""
    global _crash_hits
    if _CRASH_POINT != point:
        return
    with _crash_lock:
        _crash_hits += 1
        if _crash_hits == _CRASH_AT:
            os.kill(os.getpid(), signal.SIGKILL)


def enabled() -> bool:
    return _SHADOW is not None


def synced(path: str, upto: int | None = None) -> None:
    """``path`` was just made durable up to ``upto`` bytes (None: wholly)."""
    if _SHADOW is None:
        return
    path = os.path.abspath(path)
    rel = os.path.relpath(path, _ROOT)
    if rel.startswith(".."):
        return
    dst = os.path.join(_SHADOW, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(path, "rb") as fh:
        data = fh.read()
    for target, payload in ((dst, data), (dst + ".pos", json.dumps(
            {"upto": len(data) if upto is None else upto}).encode())):
        tmp = target + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(payload)
        os.replace(tmp, target)
