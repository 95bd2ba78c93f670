"""The compiled CommitLog append step (``store/_speedups.pyx``) against its pure-Python twin.

``commitlog.write_records`` is the specification: the compiled twin must leave the same bytes in
the segment, advance the queue-offset table the same way and return the same (queue offsets,
sizes), and raise the same exception type where the pure function does — over batches hypothesis
draws (IPv4/IPv6 records, transaction types, several queues, odd inputs), into a ``bytearray``
and into a real mapped segment file. Skipped, visibly, where the compiled module was not built or
``ROCKETSTORE_PURE_PYTHON`` is set.
"""
from __future__ import annotations

import mmap
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import _native
from rocketstore.format import message as M
from rocketstore.format.message import Message
from rocketstore.store import commitlog
from tests.conftest import compiled_or_skip

fast = compiled_or_skip("rocketstore.store._speedups", "append step")


def test_commitlog_uses_the_compiled_function():
    assert commitlog.write_records is fast.write_records
    assert commitlog.feed_item is fast.feed_item
    from rocketstore.store import put_path
    assert put_path.check_messages is fast.check_messages
    assert _native.active()["rocketstore.store._speedups"] is True


def outcome(fn, buf, *args):
    try:
        r = fn(buf, *args)
    except Exception as exc:  # the comparison is over types
        return ("raise", type(exc))
    return ("ok", r)


@st.composite
def records(draw) -> list:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        msg = Message(topic=draw(st.sampled_from(["A", "B", "é"])), body=draw(st.binary(max_size=30)),
                      queue_id=draw(st.integers(0, 2)),
                      sys_flag=draw(st.sampled_from([0, 0x4, 0x8, 0xC, 0x1])))
        born, store = draw(st.sampled_from([("1.2.3.4:5", "6.7.8.9:10"), ("[::1]:5", "1.2.3.4:1"),
                                            ("1.2.3.4:1", "[::2]:3"), ("[::1]:1", "[::2]:2")]))
        out.append(M.encode_message_py(msg, {"K": "v"}, born_timestamp=draw(st.integers(0, 1 << 41)),
                                       born_host=born, store_host=store, max_body_size=100))
    return out


@settings(max_examples=300, deadline=None)
@given(recs=records(), pad=st.integers(0, 40), slack=st.integers(-3, 20),
       phys=st.integers(0, 1 << 40), now=st.integers(0, 1 << 42),
       table=st.dictionaries(st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 2)),
                             st.integers(0, 1 << 40), max_size=3))
def test_write_records_matches(recs, pad, slack, phys, now, table):
    total = sum(len(r.data) for r in recs)
    size = max(0, pad + total + slack)
    buf_fast, buf_pure = bytearray(size), bytearray(size)
    t_fast, t_pure = dict(table), dict(table)
    got = outcome(fast.write_records, buf_fast, pad, phys, recs, t_fast, now)
    assert got == outcome(commitlog.write_records_py, buf_pure, pad, phys, recs, t_pure, now)
    assert bytes(buf_fast) == bytes(buf_pure) and t_fast == t_pure
    if got[0] == "ok":  # an independent reading of what went in
        off = pad
        for rec, qo in zip(recs, got[1][0]):
            back = M.decode_message(bytes(buf_fast), off, check_crc=True)
            assert (back.commitlog_offset, back.store_timestamp, back.queue_offset) == \
                (phys + off - pad, now, qo)
            tran = rec.sys_flag & M.TRANSACTION_MASK
            assert (qo == 0) if tran in (M.TRANSACTION_PREPARED_TYPE,
                                         M.TRANSACTION_ROLLBACK_TYPE) else True
            off += len(rec.data)


@settings(max_examples=100, deadline=None)
@given(recs=records(), odd=st.sampled_from(["records-tuple", "data-bytearray", "ts-pos", "pos",
                                            "now", "empty", "table-list", "readonly"]))
def test_write_records_odd_input_goes_to_the_pure_function(recs, odd):
    pos, now, table, phys = 0, 7, {}, 100
    size = sum(len(r.data) for r in recs) + 8
    args_rec = list(recs)
    if odd == "records-tuple":
        args_rec = tuple(recs)
    elif odd == "data-bytearray":
        args_rec[0] = M.EncodedMessage(bytearray(recs[0].data), recs[0].store_ts_pos, recs[0].topic,
                                       recs[0].queue_id, recs[0].sys_flag, recs[0].properties)
    elif odd == "ts-pos":
        args_rec[-1] = M.EncodedMessage(recs[-1].data, len(recs[-1].data) - 4, recs[-1].topic,
                                        recs[-1].queue_id, recs[-1].sys_flag, recs[-1].properties)
    elif odd == "pos":
        pos = -1
    elif odd == "now":
        now = 1 << 64
    elif odd == "empty":
        args_rec = []
    elif odd == "table-list":
        table = []
    bufs = [bytearray(size), bytearray(size)]
    if odd == "readonly":
        bufs = [bytes(size), bytes(size)]
    tables = [table.copy(), table.copy()]
    a = outcome(fast.write_records, bufs[0], pos, phys, args_rec, tables[0], now)
    b = outcome(commitlog.write_records_py, bufs[1], pos, phys, args_rec, tables[1], now)
    assert a == b and bufs[0] == bufs[1] and tables[0] == tables[1]


def test_write_records_into_a_mapped_segment(tmp_path):
    """Into real segment files (``mmap`` as the CommitLog maps them): the same bytes, and a batch
    that does not fit is refused with the pure function's error before anything is written."""
    recs = [M.encode_message_py(Message("T", os.urandom(50 + i), queue_id=i % 2), {"a": "b"},
                                born_timestamp=i, born_host="1.2.3.4:5", store_host="[::1]:6",
                                max_body_size=100) for i in range(8)]
    total = sum(len(r.data) for r in recs)
    maps = []
    for name in ("fast", "pure"):
        path = tmp_path / name
        path.write_bytes(bytes(4096))
        fh = open(path, "r+b")
        maps.append((fh, mmap.mmap(fh.fileno(), 4096)))
    try:
        (_, mf), (_, mp) = maps
        ta, tb = {}, {}
        ra = fast.write_records(mf, 100, 1 << 30, recs, ta, 123)
        rb = commitlog.write_records_py(mp, 100, 1 << 30, recs, tb, 123)
        assert ra == rb and ta == tb == {("T", 0): 4, ("T", 1): 4}
        assert mf[:] == mp[:]
        assert ra[1] == [len(r.data) for r in recs] and sum(ra[1]) == total
        before = mf[:]
        a = outcome(fast.write_records, mf, 4096 - total + 1, 0, recs, {}, 1)
        assert a == outcome(commitlog.write_records_py, mp, 4096 - total + 1, 0, recs, {}, 1)
        assert a[0] == "raise" and mf[:] == before
    finally:
        for fh, mm in maps:
            mm.close()
            fh.close()


tag_values = st.none() | st.sampled_from(["", "TagA", "é", "😀", "\ud800", "a" * 40, 5])


@settings(max_examples=300, deadline=None)
@given(recs=records(), tags=st.lists(tag_values, min_size=5, max_size=5),
       schedule=st.booleans(), first=st.integers(0, 1 << 40) | st.sampled_from([-1, 1 << 70]),
       now=st.integers(0, 1 << 42), odd_size=st.booleans())
def test_feed_item_matches(recs, tags, schedule, first, now, odd_size):
    """The reput's columns (offsets, queues, tagsCode by Java's String.hashCode, …) on both paths;
    a SCHEDULE_TOPIC record's tagsCode is its delivery time (the pure rule)."""
    for rec, tag in zip(recs, tags):
        rec.properties = {"K": "v"} if tag is None else {"TAGS": tag, "DELAY": "2"}
    if schedule:
        recs[0].topic = M.SCHEDULE_TOPIC
    sizes = [len(r.data) for r in recs]
    if odd_size:
        sizes[-1] = 1.5
    delays = [1000, 5000, 10000]
    a = outcome(fast.feed_item, recs, first, sizes, [0] * len(recs), now, delays)
    b = outcome(commitlog.feed_item_py, recs, first, sizes, [0] * len(recs), now, delays)
    assert a == b
    if a[0] == "ok" and not schedule:
        from rocketstore.format.hashing import java_hash
        for code, rec in zip(a[1].tags_code, recs):
            tag = rec.properties.get("TAGS")
            assert code == (java_hash(tag) if tag else 0)


def test_feed_item_reference_tags_codes():
    recs = [M.encode_message_py(Message("T", b"x"), {"TAGS": t}, born_timestamp=1,
                                born_host="1.2.3.4:5", store_host="1.2.3.4:6", max_body_size=9)
            for t in ("TagA", "TAG1", "été", "😀")]
    item = fast.feed_item(recs, 100, [len(r.data) for r in recs], [0, 1, 2, 3], 7, [1000])
    assert item.tags_code == [2598919, 2567159, 227742, 1772899]  # OpenJDK 17's hashCode
    assert item.commitlog_offset[0] == 100 and item.end == 100 + sum(len(r.data) for r in recs)


@settings(max_examples=300, deadline=None)
@given(msgs=st.lists(st.builds(
    Message, topic=st.sampled_from(["A", "B", "", "a/b", "..", "T" * 128, "é" * 64, 5]),
    body=st.sampled_from([b"x", bytearray(b"y"), memoryview(b"z"), "s", None]),
    queue_id=st.sampled_from([0, 1, -1, True, 1.0, 1 << 70]),
    sys_flag=st.sampled_from([0, 4, 8, 12, 1, 1 << 70])) | st.sampled_from(["not a message"]),
    max_size=4), batch=st.sampled_from([True, False, 1, None]))
def test_check_messages_matches(msgs, batch):
    from rocketstore.store import put_path
    assert outcome(fast.check_messages, msgs, batch) == \
        outcome(put_path.check_messages_py, msgs, batch)
    assert fast.check_messages(msgs, batch) == put_path.check_messages_py(msgs, batch)
