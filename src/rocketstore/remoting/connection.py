"""``RemotingConnection``: the sans-IO frame codec of one TCP connection.

Frame, big-endian::

    off  size  field
      0     4  length = 4 + H + B          (does not count itself; at most 16 MiB)
      4     4  (serializeType << 24) | H   serializeType 0 JSON, 1 ROCKETMQ
      8     H  header                      see ``header``
    8+H     B  body

Theory of operation (after h11): the connection owns no socket. ``receive_data(bytes)`` only
buffers (``b""`` means the peer closed); ``next_command()`` returns the next whole
``RemotingCommand``, ``NEED_DATA`` when more bytes are needed, or ``CLOSED`` after a clean end of
stream; ``send(cmd)`` returns the bytes to write. Any violation — a length under 4 or over the
frame limit (a length of 2**31 reads as negative), a header length past the frame, an unknown
serialize type, a header that is not JSON — raises ``RemoteProtocolError`` and leaves the
connection in the ``ERROR`` state, where every later ``next_command`` raises again: the peer can
no longer be trusted to be at a frame boundary, so the only safe move is to close. Bytes are
never interpreted before a whole frame has arrived, so any chunking of the same stream yields the
same commands.
"""
from __future__ import annotations

import struct

from .. import _native
from ..errors import LocalProtocolError, RemoteProtocolError
from .codes import FRAME_MAX_LENGTH, SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from .command import RemotingCommand
from .header import decode_header, encode_header

FRAME_PREFIX = struct.Struct(
    ">"
    "i"  # frame length (excluding these 4 bytes)
    "i"  # serialize type << 24 | header length
)
PREFIX_SIZE = FRAME_PREFIX.size


def cut_frame_py(buf: bytearray, pos: int, max_frame: int) -> tuple[int, int, bytes, bytes] | None:
    """The frame at ``buf[pos:]`` as (end, serialize type, header bytes, body bytes), or None
    while it is incomplete; raises ``RemoteProtocolError`` as soon as the bytes present break a
    rule (the length is checked from its first 4 bytes, before the rest has arrived)."""
    avail = len(buf) - pos
    if avail >= 4:
        (length,) = struct.unpack_from(">i", buf, pos)
        if length < 4 or length > max_frame:
            raise RemoteProtocolError(f"frame length {length & 0xFFFFFFFF} outside 4..{max_frame}")
    if avail < PREFIX_SIZE:
        return None
    length, word = FRAME_PREFIX.unpack_from(buf, pos)
    stype = (word >> 24) & 0xFF
    hlen = word & 0xFFFFFF
    if stype not in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        raise RemoteProtocolError(f"unknown serialize type {stype}")
    if hlen > length - 4:
        raise RemoteProtocolError(f"header length {hlen} exceeds frame length {length}")
    if avail < 4 + length:
        return None
    start = pos + PREFIX_SIZE
    end = pos + 4 + length
    return end, stype, bytes(buf[start:start + hlen]), bytes(buf[start + hlen:end])


cut_frame = cut_frame_py
_speedups = _native.load("rocketstore.remoting._speedups")
if _speedups is not None:
    cut_frame = _speedups.cut_frame


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
CLOSED = _Sentinel("CLOSED")


class RemotingConnection:
    """Buffers incoming bytes and cuts them into commands; encodes outgoing commands."""

    def __init__(self, max_frame: int = FRAME_MAX_LENGTH) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._error: RemoteProtocolError | None = None

    @property
    def state(self) -> str:
        if self._error is not None:
            return "ERROR"
        return "CLOSED" if self._eof else "OPEN"

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes) -> None:
        if not data:
            self._eof = True
            return
        if self._eof:
            raise LocalProtocolError("receive_data after end of stream")
        if self._pos and self._pos * 2 >= len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def next_command(self) -> RemotingCommand | _Sentinel:
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _next(self) -> RemotingCommand | _Sentinel:
        cut = cut_frame(self._buf, self._pos, self.max_frame)
        if cut is None:
            return self._starved(len(self._buf) - self._pos)
        self._pos, stype, header, body = cut
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return decode_header(header, stype, body)

    def _starved(self, avail: int) -> _Sentinel:
        if not self._eof:
            return NEED_DATA
        if avail:
            raise RemoteProtocolError(f"connection closed inside a frame ({avail} bytes pending)")
        return CLOSED

    def send_parts(self, cmd: RemotingCommand) -> list[bytes]:
        """The frame of ``cmd`` as a list of byte strings (for ``writelines``, no body copy)."""
        header = encode_header(cmd)
        body = cmd.body or b""
        length = 4 + len(header) + len(body)
        if len(header) > 0xFFFFFF:
            raise LocalProtocolError(f"header of {len(header)} bytes exceeds 16 MiB - 1")
        if length > self.max_frame:
            raise LocalProtocolError(f"frame of {length} bytes exceeds {self.max_frame}")
        prefix = FRAME_PREFIX.pack(length, (cmd.serialize_type << 24) | len(header))
        return [prefix + header, body] if body else [prefix + header]

    def send(self, cmd: RemotingCommand) -> bytes:
        return b"".join(self.send_parts(cmd))
