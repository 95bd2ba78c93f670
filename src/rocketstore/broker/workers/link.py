"""The link between a worker process and the writer: sans-IO framing of a few message kinds.

Frame: ``[u32 payload length][u8 kind][payload]``, big-endian, over a Unix stream socket pair.
Batching is free: everything one side has to say in a loop turn goes out in one write, and
``LinkDecoder.feed`` returns every whole message of a read at once.

| kind   | from   | payload                                                              |
|--------|--------|----------------------------------------------------------------------|
| OPEN   | worker | conn u32, the client's ``host:port``                                 |
| CLOSE  | both   | conn u32, why u8 (0 closed, 1 protocol error): close that connection |
| FRAME  | both   | conn u32, a whole remoting frame as the client sent it / will get it |
| PUT    | worker | see ``PUT_HEAD``: a plain send encoded as its CommitLog record       |
| RESULT | writer | see ``RESULT_HEAD``: the put's answer, or FALLBACK (send the frame)  |
| REFRAME| worker | as FRAME: the frame of a put the writer answered FALLBACK            |
| STOP   | writer | (empty) stop accepting: the broker is shutting down                  |
| PAUSE  | writer | conn u32: stop reading that client (its requests in flight hit the   |
| RESUME | writer | conn u32: read it again                     broker's MAX_INFLIGHT)    |

A link message never exceeds ``MAX_LINK_MESSAGE``: a remoting frame is at most 16 MiB, so
anything longer means the peer is broken and the link is dropped (``LinkError``).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ...errors import ProtocolError

OPEN, CLOSE, FRAME, PUT, RESULT, STOP, PAUSE, RESUME, REFRAME = 1, 2, 3, 4, 5, 6, 7, 8, 9
FALLBACK = -1  # RESULT code: the writer cannot take this put on the fast path

HEAD = struct.Struct(">IB")
CONN = struct.Struct(">I")
CLOSE_BODY = struct.Struct(">IB")
# seq u64, conn u32, queue id i32, sys flag i32, store-timestamp position u16, body length u32,
# default queue nums i16, properties offset in the record u32, topic length u8
PUT_HEAD = struct.Struct(">QIiiHIhIB")
# seq u64, code i32, queue id i32, queue offset i64, msg id length u16 (then msg id, remark)
RESULT_HEAD = struct.Struct(">QiiqH")
MAX_LINK_MESSAGE = (16 << 20) + 4096


class LinkError(ProtocolError):
    """The other side of a link broke the framing."""


class Put(NamedTuple):
    seq: int
    conn: int
    queue_id: int
    sys_flag: int
    store_ts_pos: int
    body_len: int
    default_queue_nums: int
    props_off: int
    topic: str
    record: bytes


class Result(NamedTuple):
    seq: int
    code: int
    queue_id: int
    queue_offset: int
    msg_id: str
    remark: str


def message(kind: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload), kind) + payload


def open_msg(conn: int, peer: str) -> bytes:
    return message(OPEN, CONN.pack(conn) + peer.encode())


def conn_msg(kind: int, conn: int) -> bytes:
    return message(kind, CONN.pack(conn))


def close_msg(conn: int, protocol_error: bool = False) -> bytes:
    return message(CLOSE, CLOSE_BODY.pack(conn, 1 if protocol_error else 0))


def frame_head(conn: int, frame_len: int, kind: int = FRAME) -> bytes:
    """The link header of a FRAME (or REFRAME) message whose frame (``frame_len`` bytes)
    follows."""
    return HEAD.pack(CONN.size + frame_len, kind) + CONN.pack(conn)


def put_msg(p: Put) -> list[bytes]:
    topic = p.topic.encode()
    head = PUT_HEAD.pack(p.seq, p.conn, p.queue_id, p.sys_flag, p.store_ts_pos, p.body_len,
                         p.default_queue_nums, p.props_off, len(topic))
    return [HEAD.pack(len(head) + len(topic) + len(p.record), PUT), head, topic, p.record]


def result_msg(seq: int, code: int, queue_id: int = 0, queue_offset: int = 0,
               msg_id: str = "", remark: str = "") -> bytes:
    mid = msg_id.encode()
    payload = RESULT_HEAD.pack(seq, code, queue_id, queue_offset, len(mid)) + mid + remark.encode()
    return HEAD.pack(len(payload), RESULT) + payload


def parse_conn(payload: bytes) -> int:
    conn: int = CONN.unpack_from(payload)[0]
    return conn


def parse_open(payload: bytes) -> tuple[int, str]:
    return CONN.unpack_from(payload)[0], bytes(payload[CONN.size:]).decode()


def parse_close(payload: bytes) -> tuple[int, bool]:
    conn, why = CLOSE_BODY.unpack_from(payload)
    return conn, why == 1


def parse_put(payload: bytes) -> Put:
    (seq, conn, qid, sys_flag, ts_pos, body_len, dq, props_off,
     tlen) = PUT_HEAD.unpack_from(payload)
    start = PUT_HEAD.size
    topic = bytes(payload[start:start + tlen]).decode()
    return Put(seq, conn, qid, sys_flag, ts_pos, body_len, dq, props_off, topic,
               bytes(payload[start + tlen:]))


def parse_result(payload: bytes) -> Result:
    seq, code, qid, qoff, mlen = RESULT_HEAD.unpack_from(payload)
    start = RESULT_HEAD.size
    return Result(seq, code, qid, qoff, bytes(payload[start:start + mlen]).decode(),
                  bytes(payload[start + mlen:]).decode())


class LinkDecoder:
    """Buffers link bytes; ``feed`` returns the whole messages as (kind, payload) pairs."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        head = HEAD.size
        while n - pos >= head:
            length, kind = HEAD.unpack_from(buf, pos)
            if length > MAX_LINK_MESSAGE:
                raise LinkError(f"link message of {length} bytes (kind {kind})")
            end = pos + head + length
            if end > n:
                break
            out.append((kind, bytes(buf[pos + head:end])))
            pos = end
        if pos:
            del buf[:pos]
        return out
