"""ConsumeQueue-ext units: written beside the ConsumeQueue, read back by tag and SQL92 pulls."""
import os
import struct

from rocketstore import Message, MessageStore, GetStatus
from rocketstore.filter.bloom import BloomFilter
from rocketstore.format.cq_ext import LONG_MIN, MAX_ADDR
from rocketstore.format.hashing import java_hash
from rocketstore.broker.state.filters import ConsumerFilterRegistry, ExpressionMessageFilter

from ..conftest import small_config


def ext_config(root, **kw):
    return small_config(root, enable_consume_queue_ext=True,
                        mapped_file_size_consume_queue_ext=4096, **kw)


def cq_units(root, topic, qid):
    d = os.path.join(root, "consumequeue", topic, str(qid))
    data = b"".join(open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)))
    units = [struct.unpack_from(">qiq", data, i) for i in range(0, len(data), 20)]
    return [u for u in units if u[1] > 0]


def ext_bytes(root, topic, qid):
    d = os.path.join(root, "consumequeue_ext", topic, str(qid))
    return [open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))]


def test_units_point_at_ext_and_tag_pulls_still_filter(tmp_path):
    with MessageStore(ext_config(tmp_path)) as store:
        for i in range(300):
            store.put_message(Message(topic="T", body=b"x%d" % i, tags="A" if i % 3 == 0 else "B", queue_id=0))
        assert store.wait_dispatched(5)
        got = []
        off = 0
        while True:
            g = store.get_message("g", "T", 0, off, 32, "A")
            if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                break
            got += [m.body for m in g.messages]
            off = g.next_begin_offset
        assert got == [b"x%d" % i for i in range(0, 300, 3)]
    units = cq_units(tmp_path, "T", 0)
    assert len(units) == 300
    assert all(u[2] <= MAX_ADDR for u in units)
    files = ext_bytes(tmp_path, "T", 0)
    assert len(files) > 1  # 300 units of 20 bytes roll over 4 KiB files
    # every unit: 20 bytes, tagsCode = hash of the tag, no bitmap; addresses are consecutive
    for i, (_, _, addr) in enumerate(units):
        real = addr - LONG_MIN
        f, pos = divmod(real, 4096)
        size, tags, ts, nbits = struct.unpack_from(">hqqh", files[f], pos)
        assert (size, nbits) == (20, 0)
        assert tags == java_hash("A" if i % 3 == 0 else "B")
        assert ts > 0
    # the first file ends with the short -1 where the next unit did not fit
    first_units = 4092 // 20
    assert files[0][first_units * 20:first_units * 20 + 2] == b"\xff\xff"


def test_reopen_keeps_appending_after_the_last_unit(tmp_path):
    with MessageStore(ext_config(tmp_path)) as store:
        for i in range(10):
            store.put_message(Message(topic="T", body=b"a", tags="A", queue_id=1))
        store.wait_dispatched(5)
    with MessageStore(ext_config(tmp_path)) as store:
        for i in range(10):
            store.put_message(Message(topic="T", body=b"b", tags="A", queue_id=1))
        store.wait_dispatched(5)
    addrs = [u[2] - LONG_MIN for u in cq_units(tmp_path, "T", 1)]
    assert addrs == [20 * i for i in range(20)]


def test_bitmap_prefilter_skips_units_and_matches_exactly(tmp_path):
    reg = ConsumerFilterRegistry(None)
    assert reg.register("T", "g", "a >= 90", "SQL92", 1, now_ms=0)
    with MessageStore(ext_config(tmp_path)) as store:
        store.set_filter_bitmap_source(reg.bitmaps)
        for i in range(100):
            store.put_message(Message(topic="T", body=b"%d" % i, properties={"a": str(i)}, queue_id=0))
        assert store.wait_dispatched(5)
        flt = ExpressionMessageFilter(reg.get("T", "g"), reg.bloom)
        bodies, off = [], 0
        while True:
            g = store.get_message("g", "T", 0, off, 32, message_filter=flt)
            if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                break
            bodies += [m.body for m in g.messages]
            off = g.next_begin_offset
        assert bodies == [b"%d" % i for i in range(90, 100)]
        assert flt.bitmap_checks == 90  # ruled out without a CommitLog read
    bf = BloomFilter()
    pos = reg.get("T", "g").bloom.bit_pos
    units = cq_units(tmp_path, "T", 0)
    data = b"".join(ext_bytes(tmp_path, "T", 0))
    for i, (_, _, addr) in enumerate(units):
        real = addr - LONG_MIN
        size, _, _, nbits = struct.unpack_from(">hqqh", data, real)
        assert (size, nbits) == (20 + bf.byte_length, bf.byte_length)
        bits = data[real + 20:real + size]
        hit = all(bits[p // 8] & (1 << (p % 8)) for p in pos)
        assert hit == (i >= 90)


def test_ext_files_follow_the_consume_queue_when_old_files_go(tmp_path):
    cfg = ext_config(tmp_path, mapped_file_size_commitlog=8192)
    with MessageStore(cfg) as store:
        for i in range(600):
            store.put_message(Message(topic="T", body=b"z" * 40, tags="A", queue_id=0))
        assert store.wait_dispatched(5)
        ext = store.cq_ext.find("T", 0)
        files_before = len(ext.queue.files)
        assert files_before >= 3
        cq = store.cq_table.find("T", 0)
        # as if the CommitLog's old segments and the ConsumeQueue's old units were cleaned
        cq.min_logic_offset = 400 * 20
        assert store.cq_ext.delete_expired(store.cq_table) >= 1
        assert len(ext.queue.files) < files_before
        addr = cq.unit(cq.min_offset_in_queue())[2]
        assert ext.get(addr) is not None  # the first live unit's ext unit is kept
        g = store.get_message("g", "T", 0, 400, 32, "A")
        assert g.status is GetStatus.FOUND and len(g.messages) == 32


def test_retry_topic_filter_uses_the_original_topics_expression(tmp_path):
    from rocketstore.broker.state.filters import RetryExpressionMessageFilter
    reg = ConsumerFilterRegistry(None)
    reg.register("Orders", "g", "amount > 100", "SQL92", 1)
    with MessageStore(small_config(tmp_path)) as store:
        for amount, topic in ((50, "Orders"), (150, "Orders"), (500, "Other")):
            store.put_message(Message(topic="%RETRY%g", body=b"%d" % amount, queue_id=0,
                                      properties={"amount": str(amount), "RETRY_TOPIC": topic}))
        assert store.wait_dispatched(5)
        g = store.get_message("g", "%RETRY%g", 0, 0, 32, "*",
                              message_filter=RetryExpressionMessageFilter(reg, "g"))
        # 50 fails Orders' filter; 500 comes from a topic the group has no filter for
        assert [m.body for m in g.messages] == [b"150", b"500"]
