"""The body of SEND_BATCH_MESSAGE: messages encoded one after another (``MessageBatch``).

Each entry, big-endian (``MessageDecoder.encodeMessage``)::

    off  size  field
      0     4  TOTALSIZE   of this entry
      4     4  MAGICCODE   0 (unused)
      8     4  BODYCRC     0 (unused)
     12     4  FLAG
     16   4+B  BODY length, BODY
   20+B   2+P  PROPERTIES length, PROPERTIES (name\\x01value\\x02 ...)

Theory of operation: the topic and queue come from the request header; each entry carries
only flag, body and properties. ``encode_batch`` is what a producer sends; ``decode_batch`` walks
the sizes, checks every length against the entry and the buffer before slicing, and raises
``ValueError`` naming the entry for anything malformed (the broker answers it, the store never
sees it).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

from ..format.message import properties_to_string, string_to_properties

ENTRY_HEAD = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE (0)
    "i"  # BODYCRC (0)
    "i"  # FLAG
    "i"  # BODY length
)
_H16 = struct.Struct(">h")


@dataclass(slots=True)
class BatchEntry:
    body: bytes
    properties: dict[str, str]
    flag: int = 0


def encode_batch(entries: Iterable[BatchEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        props = properties_to_string(e.properties).encode("utf-8")
        if len(props) > 0x7FFF:
            raise ValueError(f"properties of {len(props)} bytes exceed 32767")
        size = ENTRY_HEAD.size + len(e.body) + 2 + len(props)
        out += ENTRY_HEAD.pack(size, 0, 0, e.flag, len(e.body))
        out += e.body
        out += _H16.pack(len(props))
        out += props
    return bytes(out)


def decode_batch(data: bytes, max_bytes: int | None = None) -> list[BatchEntry]:
    """The entries of a batch body; ``max_bytes`` caps the whole body, as RocketMQ's broker
    caps it at ``maxMessageSize`` (4 MiB) before it reads a single entry."""
    out: list[BatchEntry] = []
    pos, n = 0, len(data)
    if max_bytes is not None and n > max_bytes:
        raise ValueError(f"message body size exceeded: a batch of {n} bytes, "
                         f"maxMessageSize {max_bytes}")
    while pos < n:
        idx = len(out)
        if n - pos < ENTRY_HEAD.size + 2:
            raise ValueError(f"batch entry {idx}: {n - pos} trailing bytes, not an entry")
        size, _, _, flag, blen = ENTRY_HEAD.unpack_from(data, pos)
        if size < ENTRY_HEAD.size + 2 or pos + size > n:
            raise ValueError(f"batch entry {idx}: size {size} does not fit")
        p = pos + ENTRY_HEAD.size
        if blen < 0 or p + blen + 2 > pos + size:
            raise ValueError(f"batch entry {idx}: body length {blen} does not fit")
        body = data[p:p + blen]
        p += blen
        (plen,) = _H16.unpack_from(data, p)
        p += 2
        if plen < 0 or p + plen != pos + size:
            raise ValueError(f"batch entry {idx}: properties length {plen} does not fit")
        try:
            props = string_to_properties(data[p:p + plen].decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"batch entry {idx}: properties are not UTF-8") from exc
        out.append(BatchEntry(body, props, flag))
        pos += size
    return out
