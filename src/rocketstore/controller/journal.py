"""The controller's durable decisions: an append-only event log and an atomic snapshot.

Files under ``controllerStorePath``::

    snapshot.json   {"format": 1, "seq": N, "state": ReplicasInfo.to_json()}   (atomic rename)
    events.log      records, each: u32 length | u32 crc32(payload) | payload
                    payload = JSON {"seq": n, "events": [Event, ...]}       (big-endian)

Theory of operation: a decision's events go into one record, written and fsynced before they are
applied and before the request is answered — so an answer a broker saw survives SIGKILL, and a
record is all of a decision or none of it. ``open`` loads the snapshot, then replays the records
whose ``seq`` is above the snapshot's; the first record that is short or fails its checksum ends
the log (a torn last write): the log is cut there, and any bytes after it are kept aside in
``events.log.bad-<time>`` rather than thrown away. Once the log passes ``compact_bytes`` the whole
state is written to ``snapshot.json`` (tmp file, fsync, rename, fsync of the directory) and the
log emptied; a crash between the two only leaves records the snapshot already covers, and their
``seq`` makes replay skip them.
"""
from __future__ import annotations

import json
import logging
import os
import struct
import time
import zlib
from typing import Any

from .state import Event, ReplicasInfo

log = logging.getLogger(__name__)
_HEAD = struct.Struct(">II")
MAX_RECORD = 16 * 1024 * 1024
SNAPSHOT = "snapshot.json"
EVENTS = "events.log"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    def __init__(self, directory: str, compact_bytes: int = 1 << 20) -> None:
        self.dir = directory
        self.compact_bytes = compact_bytes
        self.seq = 0
        self._fh: Any = None
        self.replayed = 0  # records replayed by ``open`` (for status and tests)
        self.broken: str | None = None  # why appends are refused (a failed write not undone)

    def open(self) -> ReplicasInfo:
        """Load the state the files hold and get ready to append."""
        os.makedirs(self.dir, exist_ok=True)
        state = ReplicasInfo()
        snap = os.path.join(self.dir, SNAPSHOT)
        if os.path.exists(snap):
            with open(snap, encoding="utf-8") as fh:
                d = json.load(fh)
            state = ReplicasInfo.from_json(d["state"])
            self.seq = int(d["seq"])
        path = os.path.join(self.dir, EVENTS)
        data = b""
        if os.path.exists(path):
            with open(path, "rb") as fh:
                data = fh.read()
        pos = 0
        while pos + _HEAD.size <= len(data):
            length, crc = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + length
            if length > MAX_RECORD or end > len(data):
                break
            payload = data[pos + _HEAD.size:end]
            if zlib.crc32(payload) != crc:
                break
            try:
                rec = json.loads(payload)
            except ValueError:
                break
            if int(rec["seq"]) > self.seq:
                for ev in rec["events"]:
                    state.apply(ev)
                self.seq = int(rec["seq"])
                self.replayed += 1
            pos = end
        if pos < len(data):
            tail = data[pos:]
            if tail.strip(b"\0"):  # not only a preallocated / zeroed tail
                aside = f"{path}.bad-{int(time.time() * 1000)}"
                with open(aside, "wb") as fh:
                    fh.write(tail)
                    fh.flush()
                    os.fsync(fh.fileno())
                log.warning("controller journal: %d bytes after offset %d are not a whole record; "
                            "kept in %s", len(tail), pos, aside)
            with open(path, "r+b") as fh:
                fh.truncate(pos)
                fh.flush()
                os.fsync(fh.fileno())
        self._fh = open(path, "ab")
        _fsync_dir(self.dir)
        return state

    def append(self, events: list[Event]) -> None:
        """Write one record and fsync it; raises OSError when it could not be made durable."""
        if not events:
            return
        if self.broken:
            raise OSError(f"the controller journal refuses writes: {self.broken}")
        payload = json.dumps({"seq": self.seq + 1, "events": events},
                             separators=(",", ":")).encode()
        pos = self._fh.tell()
        try:
            self._fh.write(_HEAD.pack(len(payload), zlib.crc32(payload)) + payload)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            # undo the partial record, or a later record would sit behind bytes replay stops at
            try:
                self._fh.truncate(pos)
                self._fh.seek(pos)
                os.fsync(self._fh.fileno())
            except OSError as undo:
                self.broken = f"a failed write ({exc}) could not be undone ({undo})"
            raise
        self.seq += 1

    def size(self) -> int:
        return self._fh.tell() if self._fh is not None else 0

    def maybe_compact(self, state: ReplicasInfo) -> bool:
        if self.size() < self.compact_bytes:
            return False
        self.snapshot(state)
        return True

    def snapshot(self, state: ReplicasInfo) -> None:
        tmp = os.path.join(self.dir, SNAPSHOT + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"format": 1, "seq": self.seq, "state": state.to_json()}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(self.dir, SNAPSHOT))
        _fsync_dir(self.dir)
        self._fh.truncate(0)
        self._fh.seek(0)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
