"""What a valid record is: RocketMQ 4.9.7's rule, one module, and recovery truncates by it only.

The oracle ``java_check`` below is written from ``CommitLog.checkMessageAndReturnSize``
(rocketmq-all-4.9.7), independently of ``format.record``: every decoder must agree with it.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore
from rocketstore.errors import CorruptRecordError
from rocketstore.format.batch import decode_records
from rocketstore.format.layouts import CQ_UNIT
from rocketstore.format.message import BLANK, decode_message, encode_message, patch_record
from rocketstore.store.verify import verify_store

from .helpers import small_config

MAGIC_V1, BLANK_MAGIC = -626843481, -875286124


def java_check(buf: bytes, check_crc: bool = True) -> int:
    """``checkMessageAndReturnSize`` on ``buf`` (one record at 0): size > 0 valid, 0 blank,
    -1 invalid. Java's ByteBuffer throws on reads past the end; the catch gives -1."""
    try:
        def i32(p):
            if p + 4 > len(buf):
                raise IndexError
            return struct.unpack_from(">i", buf, p)[0]
        total, magic = i32(0), i32(4)
        if magic == BLANK_MAGIC:
            return 0
        if magic != MAGIC_V1:
            return -1
        if total < 0:
            return -1  # new byte[totalSize] throws
        crc = i32(8)
        sys_flag = i32(36)
        p = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8
        body_len = i32(p)
        p += 4
        if body_len > 0:
            if body_len > total or p + body_len > len(buf):
                raise IndexError
            if check_crc and (zlib.crc32(buf[p:p + body_len]) & 0x7FFFFFFF) != crc:
                return -1
            p += body_len
        if p + 1 > len(buf):
            raise IndexError
        topic_len = struct.unpack_from(">b", buf, p)[0]
        p += 1
        if topic_len < 0 or topic_len > total or p + topic_len > len(buf):
            raise IndexError
        p += topic_len
        if p + 2 > len(buf):
            raise IndexError
        props_len = struct.unpack_from(">h", buf, p)[0]
        p += 2
        if props_len > 0:
            if props_len > total or p + props_len > len(buf):
                raise IndexError
        born = 20 if sys_flag & 0x10 else 8
        store = 20 if sys_flag & 0x20 else 8
        expect = (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
                  + 4 + max(body_len, 0) + 1 + topic_len + 2 + max(props_len, 0))
        return total if total == expect else -1
    except IndexError:
        return -1


def one_record(body=b"hello", props=None, topic="T") -> bytearray:
    props = {"UNIQ_KEY": "ABC", "KEYS": "k1 k2", **(props or {})}
    enc = encode_message(Message(topic, body), props, born_timestamp=1, born_host="127.0.0.1:1",
                         store_host="127.0.0.1:10911", max_body_size=1 << 20)
    buf = bytearray(enc.data)
    patch_record(buf, 0, enc.store_ts_pos, 7, 0, 123)
    return buf


def ours(buf: bytes) -> tuple[int, int]:
    """(single decoder verdict, batch decoder verdict) in java_check's terms."""
    try:
        m = decode_message(bytes(buf), 0, check_crc=True, with_body=False)
        single = 0 if m is BLANK else m.store_size
    except CorruptRecordError:
        single = -1
    recs = decode_records(bytes(buf), 0, len(buf), check_crc=True)
    batch = int(recs.size[0]) if len(recs) else (0 if recs.stop == "blank" else -1)
    return single, batch


@settings(max_examples=int(os.environ.get("ROCKETSTORE_FUZZ_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(body=st.binary(max_size=40),
       value=st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=12),
       edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3))
def test_every_decoder_agrees_with_rocketmqs_rule(body, value, edits):
    buf = one_record(body, {"p": value})
    assert java_check(bytes(buf)) == len(buf) == ours(buf)[0] == ours(buf)[1]
    for pos, byte in edits:
        if pos < len(buf):
            buf[pos] = byte
    want = java_check(bytes(buf))
    if want < 0 or want > 0:
        assert ours(buf) == (want, want), (want, ours(buf), bytes(buf).hex())


def test_nul_and_bad_utf8_in_properties_are_valid_records():
    for props in ({"p": "a\x00b"}, {"KEYS": "k\x00 x"}, {"p": "\x00"}):
        buf = one_record(b"b", props)
        assert java_check(bytes(buf)) == len(buf) == ours(buf)[0] == ours(buf)[1]
    buf = one_record(b"b", {"p": "zz"})
    i = bytes(buf).rindex(b"zz")
    buf[i] = 0xFF  # invalid UTF-8: Java decodes it with a replacement character
    assert java_check(bytes(buf)) == len(buf) == ours(buf)[0] == ours(buf)[1]


NUL_MESSAGES = [
    ("before", {}, ["kb"]),
    ("nul-prop", {"p": "x\x00y"}, ["kp"]),
    ("nul-key", {}, ["k\x00n", "kn"]),
    ("nul-only", {"z": "\x00\x00\x00\x00"}, ["kz"]),
    ("after", {}, ["ka"]),
]


def _put_nul_messages(store, n=40):
    rs = []
    for i in range(n):
        body, props, keys = NUL_MESSAGES[i % len(NUL_MESSAGES)]
        r = store.put_message(Message("N", f"{body}-{i}".encode(), keys=keys, properties=props))
        assert r.ok, r
        rs.append(r)
    return rs


def _check_all_there(store, n=40):
    assert store.recovery_report.truncated_at is None, store.recovery_report.summary()
    assert store.wait_dispatched(30)
    got, off = [], 0
    while True:
        g = store.get_message("g", "N", 0, off, 32)
        if not g.messages:
            break
        got += g.messages
        off = g.next_begin_offset
    assert [m.body.decode() for m in got] == [f"{NUL_MESSAGES[i % 5][0]}-{i}" for i in range(n)]
    for m, i in zip(got, range(n)):
        for k, v in NUL_MESSAGES[i % 5][1].items():
            assert m.properties[k] == v
    hits = store.query_message("N", "k\x00n", max_num=64).messages
    assert sorted(m.body.decode() for m in hits) == sorted(f"nul-key-{i}" for i in range(2, n, 5))


def test_nul_in_properties_and_keys_survives_clean_reopen(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as s:
        _put_nul_messages(s)
    before = open(os.path.join(tmp_path, "commitlog", f"{0:020d}"), "rb").read()
    for _ in range(2):
        with MessageStore(cfg) as s:
            _check_all_there(s)
    assert open(os.path.join(tmp_path, "commitlog", f"{0:020d}"), "rb").read() == before


def test_nul_in_properties_and_keys_survives_a_killed_process(tmp_path):
    code = f"""
import os, signal, sys
sys.path.insert(0, {os.getcwd()!r})
from tests.durability.helpers import small_config
from tests.durability.test_record_validity import _put_nul_messages
from rocketstore import MessageStore
s = MessageStore(small_config({str(tmp_path)!r}))
_put_nul_messages(s)
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code], timeout=120)
    assert p.returncode == -signal.SIGKILL
    assert os.path.exists(tmp_path / "abort")
    with MessageStore(small_config(tmp_path)) as s:
        assert not s.last_exit_ok
        _check_all_there(s)
        assert any("NUL" in n for n in s.recovery_report.notes)  # reported, not cut
    with MessageStore(small_config(tmp_path)) as s:
        _check_all_there(s)


def test_nul_in_properties_through_the_broker(tmp_path):
    from rocketstore.client import Producer, PullConsumer
    from tests.broker.conftest import start_server
    store = str(tmp_path / "store")

    def pull_all(srv):
        c = PullConsumer("CG", srv.namesrv)
        try:
            out, off = [], 0
            while True:
                r = c.pull("NulT", 0, off, 32)
                if not r.messages:
                    return out
                out += r.messages
                off = r.next_begin_offset
        finally:
            c.shutdown()

    srv = start_server(store)
    try:
        with Producer("PG", srv.namesrv) as p:
            for i in range(12):
                props = {"p": f"v\x00{i}"} if i % 3 == 1 else None
                keys = ["n\x00k"] if i % 3 == 2 else [f"k{i}"]
                assert p.send("NulT", f"m{i}".encode(), keys=keys, properties=props,
                              queue_id=0).status == "SEND_OK"
    finally:
        assert srv.stop() == 0, srv.log()
    for how in ("clean", "kill"):
        srv = start_server(store)
        try:
            msgs = pull_all(srv)
            assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(12)], how
            assert [m.properties.get("p") for m in msgs if m.properties.get("p")] == \
                [f"v\x00{i}" for i in range(1, 12, 3)]
            assert sum(1 for m in msgs if m.keys == ["n\x00k"]) == 4
        finally:
            if how == "kill":
                srv.proc.send_signal(signal.SIGKILL)
                srv.proc.wait(30)
            else:
                assert srv.stop() == 0, srv.log()
    srv = start_server(store)  # after the kill: the unclean reopen
    try:
        assert [m.body for m in pull_all(srv)] == [f"m{i}".encode() for i in range(12)]
    finally:
        assert srv.stop() == 0, srv.log()


# -- a store whose queue offsets restart at 0 (topic deleted and re-created) ------------------
def _write_store_with_restarted_queue(root, seg_size=64 * 1024, cq_size=20 * 64):
    """Files written byte by byte: T/0 gets offsets 0..9 (old topic), then, after the topic was
    deleted and re-created (its ConsumeQueue removed), 0..5 again; U/0 runs through. Returns the
    expected (topic, queue offset, body, CommitLog offset) of every record."""
    os.makedirs(os.path.join(root, "commitlog"))
    seg = bytearray(seg_size)
    pos, ts, records = 0, 1_700_000_000_000, []
    plan = [("T", i, f"old-{i}") for i in range(10)] + [("U", i, f"u-{i}") for i in range(3)] + \
           [("T", i, f"new-{i}") for i in range(6)] + [("U", i, f"u-{i}") for i in range(3, 5)]
    for topic, qo, body in plan:
        enc = encode_message(Message(topic, body.encode()), {"UNIQ_KEY": f"{topic}{body}"},
                             born_timestamp=ts, born_host="127.0.0.1:5", store_host="127.0.0.1:10911",
                             max_body_size=1 << 20)
        seg[pos:pos + len(enc.data)] = enc.data
        patch_record(seg, pos, enc.store_ts_pos, qo, pos, ts)
        records.append((topic, qo, body, pos, len(enc.data)))
        pos += len(enc.data)
        ts += 1
    with open(os.path.join(root, "commitlog", f"{0:020d}"), "wb") as fh:
        fh.write(seg)
    # ConsumeQueues as RocketMQ leaves them: T/0 only has the re-created topic's units
    for topic, which in (("T", "new-"), ("U", "u-")):
        d = os.path.join(root, "consumequeue", topic, "0")
        os.makedirs(d)
        cq = bytearray(cq_size)
        for t, qo, body, off, size in records:
            if t == topic and body.startswith(which):
                CQ_UNIT.pack_into(cq, qo * 20, off, size, 0)
        with open(os.path.join(d, f"{0:020d}"), "wb") as fh:
            fh.write(cq)
    return records, bytes(seg)


def test_queue_offsets_restarting_at_zero_truncate_nothing(tmp_path):
    root = str(tmp_path / "s")
    records, seg = _write_store_with_restarted_queue(root)
    end = records[-1][3] + records[-1][4]
    newest = []
    for clean in (True, False):
        if not clean:
            open(os.path.join(root, "abort"), "w").close()
        with MessageStore(small_config(root)) as s:
            rep = s.recovery_report
            assert rep.truncated_at is None and not rep.cq_units_dropped, rep.summary()
            assert s.get_max_phy_offset() == end
            g = s.get_message("g", "T", 0, 0, 32)
            assert [m.body.decode() for m in g.messages] == [f"new-{i}" for i in range(6)] + newest
            assert s.get_max_offset_in_queue("U", 0) == 5
            for _t, _qo, body, off, _size in records:  # every record is still there
                assert s.look_message_by_offset(off).body.decode() == body
            assert any("restarts" in n for n in rep.notes)
            r = s.put_message(Message("T", b"newest"))
            assert r.ok and r.queue_offset == 6 + len(newest)
            newest.append("newest")
            end = r.wrote_offset + r.wrote_bytes
        with open(os.path.join(root, "commitlog", f"{0:020d}"), "rb") as fh:
            assert fh.read(len(seg))[:records[-1][3] + records[-1][4]] == \
                seg[:records[-1][3] + records[-1][4]]
        report = verify_store(root, small_config(root))
        assert report.ok, [str(p) for p in report.problems]
