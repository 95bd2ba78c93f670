"""The epoch file of controller mode (RocketMQ 5's ``EpochFileCache`` over a ``CheckpointFile``).

Every time a broker becomes master it appends ``(masterEpoch, startOffset)``: from
``startOffset`` on, the CommitLog's bytes were written by the master of that epoch. An entry's
end is the next entry's start; the last one is open (``MAX_END``), or ends at the CommitLog's
max offset when two replicas compare their histories.

The file (``storePathEpochFile``, default ``<store>/epochFileCheckpoint``) is text, byte for
byte as RocketMQ 5.3.3 writes it::

    <number of entries>\\n
    <crc32 of the entry lines, & 0x7fffffff, as a decimal int>\\n
    <epoch>-<startOffset>\\n      (one line per entry)

Before each write the previous content is copied to ``<file>.bak``; a reader takes the main
file, else (missing, empty, wrong count or CRC) the ``.bak``. A CRC of 0 is not checked.

``find_consistent_point``: walking the local entries from the newest, the first epoch the other
side also has *with the same start offset* is shared history; the consistent point is the lower
of the two ends of that epoch. -1: no common epoch (nothing can be trusted).
"""
from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass

MAX_END = 2**63 - 1  # Long.MAX_VALUE: the open end of the last entry


class EpochFileError(ValueError):
    """An epoch file that cannot be read (count or CRC wrong, a line that is no entry)."""


@dataclass
class EpochEntry:
    epoch: int
    start_offset: int
    end_offset: int = MAX_END

    def line(self) -> str:
        return f"{self.epoch}-{self.start_offset}"


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF


def encode(entries: list[EpochEntry]) -> bytes:
    body = "".join(e.line() + "\n" for e in entries)
    return f"{len(entries)}\n{_crc(body)}\n{body}".encode("utf-8")


def decode(data: bytes) -> list[EpochEntry]:
    """The entries of one checkpoint file's bytes (``EpochFileError`` when they are not)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EpochFileError(f"not text: {exc}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise EpochFileError("no count and CRC lines")
    try:
        count, crc = int(lines[0]), int(lines[1])
    except ValueError:
        raise EpochFileError(f"count/CRC lines {lines[:2]!r} are not numbers") from None
    out = []
    for ln in lines[2:]:
        parts = ln.split("-")
        if len(parts) != 2:
            continue  # RocketMQ skips a line that is no entry (it still counts in the CRC)
        try:
            out.append(EpochEntry(int(parts[0]), int(parts[1])))
        except ValueError:
            raise EpochFileError(f"entry line {ln!r} is not <epoch>-<offset>") from None
    if len(out) != count:
        raise EpochFileError(f"expected {count} entries, found {len(out)}")
    body = "".join(ln + "\n" for ln in lines[2:])
    if crc != 0 and _crc(body) != crc:
        raise EpochFileError(f"entries CRC {_crc(body)} does not match {crc}")
    return out


def read_file(path: str) -> list[EpochEntry]:
    """RocketMQ's ``CheckpointFile.read``: the file, else its ``.bak``; [] when neither exists."""
    def one(p: str) -> list[EpochEntry]:
        if not os.path.exists(p):
            return []
        with open(p, "rb") as fh:
            return decode(fh.read())
    try:
        got = one(path)
        if got:
            return got
    except (EpochFileError, OSError):
        pass
    return one(path + ".bak")


def write_file(path: str, entries: list[EpochEntry]) -> None:
    """The previous content to ``.bak``, then the new one (each fsynced); nothing for []."""
    if not entries:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if os.path.exists(path):
        with open(path, "rb") as fh:
            prev = fh.read()
        _write(path + ".bak", prev)
    _write(path, encode(entries))


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class EpochCache:
    """The epoch entries of one replica, kept in order; ``path`` None: in memory only."""

    def __init__(self, path: str | None = None, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        if entries is not None:
            self._set(entries)
        elif path is not None:
            self._set(read_file(path))

    def _set(self, entries: list[EpochEntry]) -> None:
        es = sorted((EpochEntry(e.epoch, e.start_offset) for e in entries), key=lambda e: e.epoch)
        for a, b in zip(es, es[1:]):
            a.end_offset = b.start_offset
        self._entries = es

    def _flush(self) -> None:
        if self.path is not None:
            write_file(self.path, self._entries)

    # -- reads ----------------------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return [EpochEntry(e.epoch, e.start_offset, e.end_offset) for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def last_epoch(self) -> int:
        with self._lock:
            return self._entries[-1].epoch if self._entries else -1

    def last(self) -> EpochEntry | None:
        with self._lock:
            return self.entries()[-1] if self._entries else None

    def first(self) -> EpochEntry | None:
        with self._lock:
            return self.entries()[0] if self._entries else None

    def get(self, epoch: int) -> EpochEntry | None:
        for e in self.entries():
            if e.epoch == epoch:
                return e
        return None

    def find_by_offset(self, offset: int) -> EpochEntry | None:
        for e in self.entries():
            if e.start_offset <= offset < e.end_offset:
                return e
        return None

    def next_entry(self, epoch: int) -> EpochEntry | None:
        for e in self.entries():
            if e.epoch > epoch:
                return e
        return None

    # -- writes ---------------------------------------------------------------------------------
    def append(self, epoch: int, start_offset: int) -> bool:
        """False (nothing changed) unless both the epoch and the start grow."""
        with self._lock:
            if self._entries:
                last = self._entries[-1]
                if last.epoch >= epoch or last.start_offset >= start_offset:
                    return False  # as RocketMQ: a new master that wrote nothing adds no entry
                last.end_offset = start_offset
            self._entries.append(EpochEntry(epoch, start_offset))
            self._flush()
            return True

    def set_last_end(self, end_offset: int) -> None:
        with self._lock:
            if self._entries and self._entries[-1].start_offset <= end_offset:
                self._entries[-1].end_offset = end_offset

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Drop entries starting at or after ``offset``; the last one left is open again."""
        with self._lock:
            self._entries = [e for e in self._entries if e.start_offset < offset]
            if self._entries:
                self._entries[-1].end_offset = MAX_END
            self._flush_always()

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        with self._lock:
            self._entries = [e for e in self._entries if e.epoch < epoch]
            if self._entries:
                self._entries[-1].end_offset = MAX_END
            self._flush_always()

    def _flush_always(self) -> None:
        if self.path is None:
            return
        if self._entries:
            write_file(self.path, self._entries)
        else:  # RocketMQ writes nothing for []; we must not leave the old entries readable
            for p in (self.path, self.path + ".bak"):
                if os.path.exists(p):
                    os.replace(p, p + ".dropped")

    def find_consistent_point(self, other: "EpochCache") -> int:
        for mine in reversed(self.entries()):
            theirs = other.get(mine.epoch)
            if theirs is not None and theirs.start_offset == mine.start_offset:
                return min(mine.end_offset, theirs.end_offset)
        return -1


def consistent_point(local: list[EpochEntry], local_end: int, master: list[EpochEntry],
                     master_end: int) -> int:
    """The slave's truncation point (``AutoSwitchHAClient.doTruncate``): both histories with
    their last entry ended at the side's max offset, compared from the newest epoch."""
    a = EpochCache(entries=local)
    a.set_last_end(local_end)
    b = EpochCache(entries=master)
    b.set_last_end(master_end)
    return a.find_consistent_point(b)
