"""Quarantine: the one place CommitLog bytes go when recovery cuts them.

Theory of operation. RocketMQ (and Kafka) recover a damaged log by truncating it at the first
record that fails the record rule: every byte after it — the rest of that segment and every
later segment — is deleted, intact records included. We cut at the same point (the log must
end where its records stop being valid, or offsets and ConsumeQueues would disagree), but we
never destroy what we cut: ``set_aside`` copies every non-zero byte from the cut to the end of
the log into ``<store>/quarantine/<event>/`` *before* recovery zeroes or deletes it, one file
per CommitLog segment touched (named by the CommitLog offset of its first byte, ``%020d``, as
segments are), then writes ``manifest.json`` (offsets, bytes, reason, time), each fsynced.

Layout of one event folder::

    quarantine/20261125T140312Z-00000000000000012345/
        00000000000000012345      bytes [12345, end of that segment) up to its last non-zero
        00000000000001048576      a later segment, up to its last non-zero byte
        manifest.json             {"cut_at", "reason", "time", "time_ms", "bytes",
                                   "pieces": [{"file", "offset", "bytes"}], "salvage": ...}

``rocketstore salvage`` (``store.salvage``) reads the pieces back, finds the intact records in
them (the next magic code whose record passes the record rule and its body CRC) and re-appends
them as new messages; it records what it did in the manifest's ``salvage`` entry. Nothing here
or elsewhere deletes a quarantine folder: an operator does, once satisfied.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass

from ..format.layouts import offset_to_name

log = logging.getLogger(__name__)
QUARANTINE_DIR = "quarantine"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class QuarantineEvent:
    path: str
    cut_at: int
    bytes: int
    pieces: int
    reason: str


def quarantine_root(store_root: str) -> str:
    return os.path.join(store_root, QUARANTINE_DIR)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_nonzero(view) -> int:
    """Length of ``view`` without its trailing zero bytes."""
    n = len(view)
    chunk = 1 << 20
    while n > 0:
        lo = max(0, n - chunk)
        part = bytes(view[lo:n]).rstrip(b"\0")
        if part:
            return lo + len(part)
        n = lo
    return 0


def set_aside(store_root: str, segments, cut_at: int, reason: str) -> QuarantineEvent | None:
    """Copy every non-zero byte of the CommitLog from ``cut_at`` on into a new quarantine
    folder; None when there is none (a clean tail of zeros). ``segments``: the CommitLog's
    mapped files in order (``file_from_offset``, ``file_size``, ``mm``)."""
    pieces = []
    for mf in segments:
        end = mf.file_from_offset + mf.file_size
        if end <= cut_at:
            continue
        start = max(0, cut_at - mf.file_from_offset)
        ranges = mf.data_ranges(start) if hasattr(mf, "data_ranges") else [(start, mf.file_size)]
        if not ranges:  # holes and unwritten blocks only: zeros
            continue
        view = memoryview(mf.mm)[start:ranges[-1][1]]
        n = _last_nonzero(view)
        if n:
            pieces.append((mf.file_from_offset + start, view[:n]))
        else:
            view.release()
    if not pieces:
        return None
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    root = quarantine_root(store_root)
    os.makedirs(root, exist_ok=True)
    name = f"{stamp}-{offset_to_name(cut_at)}"
    folder = os.path.join(root, name)
    k = 1
    while os.path.exists(folder):  # the same cut twice in one second: keep both
        folder = os.path.join(root, f"{name}.{k}")
        k += 1
    os.makedirs(folder)
    listed = []
    for offset, view in pieces:
        fname = offset_to_name(offset)
        with open(os.path.join(folder, fname), "wb") as fh:
            fh.write(view)
            fh.flush()
            os.fsync(fh.fileno())
        listed.append({"file": fname, "offset": offset, "bytes": len(view)})
        view.release()
    total = sum(p["bytes"] for p in listed)
    manifest = {"cut_at": cut_at, "reason": reason, "bytes": total, "pieces": listed,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "time_ms": int(now * 1000), "salvage": None}
    write_manifest(folder, manifest)
    _fsync_dir(root)
    log.error("CommitLog damaged at offset %d (%s): %d byte(s) after it set aside in %s — "
              "run `rocketstore salvage --store %s` to re-append the intact records",
              cut_at, reason, total, folder, store_root)
    return QuarantineEvent(folder, cut_at, total, len(listed), reason)


def write_manifest(folder: str, manifest: dict) -> None:
    tmp = os.path.join(folder, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(folder, MANIFEST))
    _fsync_dir(folder)


def events(store_root: str) -> list[tuple[str, dict]]:
    """(folder, manifest) of every quarantine event, oldest first; a folder whose manifest is
    unreadable is listed with ``{"error": ...}`` (never skipped silently)."""
    root = quarantine_root(store_root)
    if not os.path.isdir(root):
        return []
    out = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        try:
            with open(os.path.join(folder, MANIFEST), encoding="utf-8") as fh:
                out.append((folder, json.load(fh)))
        except (OSError, ValueError) as exc:
            out.append((folder, {"error": f"manifest unreadable: {exc}"}))
    return out


def summary(store_root: str) -> dict:
    """Counts for ``inspect`` and the log: events, bytes, and how many still await salvage."""
    evs = events(store_root)
    return {"events": len(evs), "bytes": sum(int(m.get("bytes", 0)) for _, m in evs),
            "unsalvaged": sum(1 for _, m in evs if not m.get("salvage")),
            "path": quarantine_root(store_root)}
