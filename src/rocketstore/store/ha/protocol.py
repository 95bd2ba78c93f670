"""The RocketMQ 4.9 HA wire format, sans-IO: what a slave reports and what a master sends.

Theory of operation. There is no handshake, version or authentication. A slave sends only
8-byte big-endian CommitLog offsets (its max offset: the first one is where it wants the stream
to start, every later one is an acknowledgement). A master sends only frames: an 8-byte
big-endian CommitLog offset, a 4-byte big-endian body size, then that many raw CommitLog bytes
(a slice of one segment, at most ``haTransferBatchSize``; size 0 is a heartbeat). A frame may
cut a message anywhere; the slave writes the bytes where the offset says, so its CommitLog stays
byte-identical to the master's.

``ReportReader`` (master side) keeps, as RocketMQ's reader does, only the last complete report
of what has arrived (reports are 8-byte aligned from the start of the connection).
``FrameReader`` (slave side) splits the byte stream into ``(offset, body)`` frames and rejects a
header that cannot be a frame (``HAProtocolError``): a negative offset, a negative size or a
body larger than a CommitLog segment.
"""
from __future__ import annotations

import struct

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size  # 8
HEADER_SIZE = HEADER.size  # 12


class HAProtocolError(ValueError):
    """The peer sent bytes that are not HA protocol."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


class ReportReader:
    """Master side: bytes from a slave in, its latest report out."""

    def __init__(self) -> None:
        self._tail = b""  # an incomplete report carried to the next read

    def feed(self, data: bytes) -> int | None:
        """The last complete report among everything fed so far (None: none completed now)."""
        buf = self._tail + data
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._tail = buf[whole:]
        if whole == 0:
            return None
        value = REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        if value < 0:
            raise HAProtocolError(f"slave reported a negative offset {value}")
        return value


class FrameReader:
    """Slave side: bytes from a master in, ``(offset, body)`` frames out."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_frame(self) -> tuple[int, bytes] | None:
        buf = self._buf
        if len(buf) < HEADER_SIZE:
            return None
        offset, size = HEADER.unpack_from(buf, 0)
        if offset < 0 or size < 0 or size > self.max_body:
            raise HAProtocolError(f"not an HA frame header: offset {offset}, size {size}")
        end = HEADER_SIZE + size
        if len(buf) < end:
            return None
        body = bytes(buf[HEADER_SIZE:end])
        del buf[:end]
        return offset, body
