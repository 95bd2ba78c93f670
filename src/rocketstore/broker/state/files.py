"""Broker state files under ``<store>/config/``: how they are read and written.

Theory of operation: ``persist()`` of every manager writes its whole file the crash-safe way: a
temp file, fsync, ``os.replace``, fsync of the directory, plus a ``.bak`` copy of the previous
version as RocketMQ keeps. RocketMQ's fastjson writes integer map keys without quotes
(``{0:12}``); we write standard JSON, which RocketMQ also reads, and read both. A main copy that
does not decode is read from its ``.bak``; both damaged is an error that names them.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

from ...remoting.jsonbody import load_json_text
from ...store import syncprobe
from ...store.checkpoint import atomic_write

log = logging.getLogger(__name__)

# files whose main copy ``load_json_lenient`` found damaged: the next write keeps those bytes
# aside (``<file>.damaged``) instead of rotating them into ``.bak`` over the good backup
_DAMAGED: set[str] = set()


def _read_config(path: str) -> dict | None:
    """One candidate: its object, None if absent or empty; ValueError if damaged."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    try:
        data = load_json_text(raw.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path}: damaged, not a RocketMQ config file: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: damaged, not a RocketMQ config file: a JSON "
                         f"{type(data).__name__}, not an object")
    return data


def load_json_lenient(path: str) -> dict | None:
    """Read a RocketMQ config JSON file (bare integer keys allowed); None if absent/empty.

    As RocketMQ's ``ConfigManager.load``: a file that is absent, empty or does not decode is
    read from ``<file>.bak``; when both are damaged a ValueError names them (a damaged file is
    never read as empty). Nothing is written here (read-only commands call this)."""
    try:
        data = _read_config(path)
    except ValueError as exc:
        try:
            bak = _read_config(path + ".bak")
        except ValueError as exc2:
            raise ValueError(f"{exc}; and its backup {exc2}") from exc
        if bak is None:
            raise
        log.error("%s; read from its backup %s.bak", exc, path)
        _DAMAGED.add(os.path.abspath(path))
        return bak
    if data is None:
        return _read_config(path + ".bak")
    return data


_WRITE_LOCK = threading.Lock()


def write_json_atomic(path: str, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as JSON: temp file, fsync, rename, fsync of the directory."""
    with _WRITE_LOCK:
        _write_json_atomic(path, obj)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """``write_json_atomic`` for JSON text the caller already built."""
    with _WRITE_LOCK:
        _write_bytes_atomic(path, data)


def _write_json_atomic(path: str, obj: Any) -> None:
    _write_bytes_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1,
                                         sort_keys=True).encode("utf-8"))


def _write_bytes_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)

    def rotate() -> None:
        if not os.path.exists(path):
            return
        # the previous version becomes the backup, unless it was found damaged: then it is
        # kept as ``.damaged`` for the operator and the good backup stays
        key = os.path.abspath(path)
        try:
            os.replace(path, path + (".damaged" if key in _DAMAGED else ".bak"))
        except OSError:
            pass
        else:
            _DAMAGED.discard(key)
        syncprobe.crash_point("state-write")

    atomic_write(path, data, point=None, before_replace=rotate, record_synced=False)
