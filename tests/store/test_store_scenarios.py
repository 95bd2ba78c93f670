"""RocketMQ's own DefaultMessageStore scenarios, ported, plus bad input."""
import os
import time

import numpy as np
import pytest

from rocketstore import (GetStatus, Message, MessageStore, PutStatus, StoreError,
                         StoreLockedError)
from rocketstore.format.batch import decode_records
from rocketstore.format.message import BLANK_MAGIC_CODE, read_header
from tests.conftest import small_config

BODY = b"Once, there was a chance for me!"


def foobar(i=0, **kw):
    return Message("FooBar", BODY, tags="TAG1", keys=[str(1700000000000 + i)], **kw)


def test_record_size_158_and_max_offset_1580(tmp_path):
    cfg = small_config(tmp_path, generate_uniq_key=False)
    with MessageStore(cfg) as store:
        rs = [store.put_message(foobar(i)) for i in range(10)]
        assert [r.wrote_bytes for r in rs] == [158] * 10
        assert [r.wrote_offset for r in rs] == list(range(0, 1580, 158))
        assert [r.queue_offset for r in rs] == list(range(10))
        assert store.get_max_phy_offset() == 1580
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("FooBar", 0) == 10


def test_pull_size(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        for i in range(32):
            assert store.put_message(Message("pullSizeTopic", BODY, queue_id=0)).ok
        assert store.wait_dispatched(5)
        for n in (32, 20, 10):
            g = store.get_message("g", "pullSizeTopic", 0, 0, n)
            assert g.status is GetStatus.FOUND and len(g.messages) == n == len(g.buffers)
            assert g.next_begin_offset == n
            assert [m.queue_offset for m in g.messages] == list(range(n))


def test_offset_by_time_exact_skewed_far(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        rs = []
        for i in range(10):
            rs.append(store.put_message(foobar(i)))
            time.sleep(0.011)
        assert store.wait_dispatched(5)
        for i, r in enumerate(rs):
            assert store.get_offset_in_queue_by_time("FooBar", 0, r.store_timestamp) == i
            assert store.get_offset_in_queue_by_time("FooBar", 0, r.store_timestamp - 2) == i
            assert store.get_message_store_timestamp("FooBar", 0, i) == r.store_timestamp
        assert store.get_offset_in_queue_by_time("FooBar", 0, rs[0].store_timestamp - 20000) == 0
        assert store.get_offset_in_queue_by_time("FooBar", 0, rs[-1].store_timestamp + 20000) == 10
        assert store.get_offset_in_queue_by_time("FooBar", 1, rs[0].store_timestamp) == 0
        assert store.get_message_store_timestamp("FooBar", 1, 0) == -1
        assert store.get_message_store_timestamp("FooBar", 0, -1) == -1


def test_look_message_by_first_last_and_out_of_range(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        rs = []
        for i in range(10):
            kw = {} if i < 5 else {"born_host": "[1050:0:0:0:5:600:300c:326b]:0", "store_host": "[::1]:0"}
            rs.append(store.put_message(Message("FooBar", BODY + b" offset %d" % i, **kw)))
        assert store.look_message_by_offset(rs[0].wrote_offset).body == BODY + b" offset 0"
        last = store.look_message_by_offset(rs[9].wrote_offset)
        assert last.body == BODY + b" offset 9" and last.store_host == "[::1]:0"
        assert len(rs[9].msg_id) == 56 and store.view_message_by_id(rs[9].msg_id).body == last.body
        assert store.look_message_by_offset(rs[9].wrote_offset + rs[9].wrote_bytes) is None
        assert store.view_message_by_id("not-an-id") is None


def test_properties_too_long_leaves_counter(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        r = store.put_message(Message("T", b"x", properties={"test": "1" * 32768}))
        assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert store.commitlog.next_queue_offset("T", 0) == 0 and store.get_max_phy_offset() == 0
        r = store.put_message(Message("T", b"x", properties={"test": "1" * 100}))
        assert r.status is PutStatus.PUT_OK and store.commitlog.next_queue_offset("T", 0) == 1


def test_body_over_max_size_is_illegal(tmp_path):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=1 << 20, max_message_size=4096)
    with MessageStore(cfg) as store:
        assert store.put_message(Message("T", b"x" * 4097)).status is PutStatus.MESSAGE_ILLEGAL
        assert store.put_message(Message("T", b"x" * 4096)).status is PutStatus.PUT_OK
        batch = [Message("T", b"x" * 2000) for _ in range(3)]
        assert store.put_messages(batch).status is PutStatus.MESSAGE_ILLEGAL
        assert store.get_max_offset_in_queue("T", 0) <= 1


def test_segment_roll_over_whole_records_and_blank_tails(tmp_path):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=1024)
    with MessageStore(cfg) as store:
        rs = [store.put_message(Message("Roll", os.urandom(i * 7 % 300), queue_id=i % 3)) for i in range(60)]
        rs.append(store.put_messages([Message("Roll", b"b" * 60, queue_id=1) for _ in range(3)]))
        assert all(r.ok for r in rs)
        assert store.wait_dispatched(5)
        files = store.commitlog.queue.files
        assert len(files) > 5
        for r in rs:
            assert r.wrote_offset // 1024 == (r.wrote_offset + r.wrote_bytes - 1) // 1024
        for mf in files[:-1]:
            recs = decode_records(mf.mm, 0, 1024)
            assert recs.stop == "blank"
            size, magic = read_header(mf.mm, recs.end)
            assert magic == BLANK_MAGIC_CODE and size == 1024 - recs.end >= 8
        # the batch landed in one segment with consecutive queue offsets
        b = rs[-1]
        assert b.msg_num == 3 and len(set(b.msg_ids)) == 3
        total = sum(store.get_max_offset_in_queue("Roll", q) for q in range(3))
        assert total == 63
        assert store.put_message(Message("Roll", b"z" * 1020)).status is PutStatus.MESSAGE_ILLEGAL


def test_reopen_after_clean_shutdown(tmp_path):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=4096)
    with MessageStore(cfg) as store:
        first = [store.put_message(foobar(i, queue_id=i % 2)) for i in range(50)]
    assert not os.path.exists(tmp_path / "abort")
    with MessageStore(cfg) as store:
        assert store.last_exit_ok
        for r in first:
            assert store.look_message_by_offset(r.wrote_offset).queue_offset == r.queue_offset
        assert store.get_max_offset_in_queue("FooBar", 0) == 25
        r = store.put_message(foobar(99, queue_id=0))
        assert r.queue_offset == 25 and r.wrote_offset == first[-1].wrote_offset + first[-1].wrote_bytes
        g = store.get_message("g", "FooBar", 1, 0, 32)
        assert [m.queue_offset for m in g.messages] == list(range(25))


def test_get_message_status_table(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        assert store.get_message("g", "None", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
        for i in range(5):
            store.put_message(Message("S", b"m%d" % i, tags="TagA" if i % 2 else "TagB"))
        store.wait_dispatched(5)
        g = store.get_message("g", "S", 0, 5)
        assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 5)
        g = store.get_message("g", "S", 0, 9)
        assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)
        g = store.get_message("g", "S", 0, 0, 32, subscription="TagA")
        assert [m.body for m in g.messages] == [b"m1", b"m3"] and g.next_begin_offset == 5
        g = store.get_message("g", "S", 0, 0, 32, subscription="TagX || TagY")
        assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 5
        g = store.get_message("g", "S", 0, 0, 32, subscription="*")
        assert len(g.messages) == 5
        assert store.get_message("g", "S", -1, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_tag_hash_collision_never_leaks(tmp_path):
    # "Aa" and "BB" share a Java hash: the unit filter passes both, the exact check does not
    with MessageStore(small_config(tmp_path)) as store:
        store.put_message(Message("C", b"aa", tags="Aa"))
        store.put_message(Message("C", b"bb", tags="BB"))
        store.wait_dispatched(5)
        g = store.get_message("g", "C", 0, 0, 32, subscription="BB")
        assert [m.body for m in g.messages] == [b"bb"]


def test_offset_too_small_after_pre_blank(tmp_path):
    # a queue whose first unit is above 0: filler units, min offset at the first unit
    from rocketstore.store.consume_queue import ConsumeQueue
    cq = ConsumeQueue("T", 0, str(tmp_path / "cq"), 200)
    cq.put_units(np.array([13]), np.array([500]), np.array([100]), np.array([7]))
    assert (cq.min_offset_in_queue(), cq.max_offset_in_queue()) == (13, 14)
    mf = cq.queue.files[0]
    assert mf.name == "00000000000000000200" and mf.mm[0:20] == (0).to_bytes(8, "big") + b"\x7f\xff\xff\xff" + bytes(8)
    assert cq.put_units(np.array([13]), np.array([500]), np.array([100]), np.array([7])) == 0  # idempotent
    assert cq.read_units(12, 1) is None


def test_bad_input_gives_status_and_writes_nothing(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        bad = [Message("", b"x"), Message("a/b", b"x"), Message("T" * 128, b"x"),
               Message("T", b"x", queue_id=-1), Message("T", "not bytes"),  # type: ignore[arg-type]
               Message(123, b"x"), Message("T", b"x", properties={"": "v"}),  # type: ignore[arg-type]
               Message("..", b"x")]
        for m in bad:
            assert store.put_message(m).status is PutStatus.MESSAGE_ILLEGAL, m
        assert store.put_message("nope").status is PutStatus.MESSAGE_ILLEGAL  # type: ignore[arg-type]
        assert store.put_messages([Message("A", b"x"), Message("B", b"x")]).status is PutStatus.MESSAGE_ILLEGAL
        assert store.put_messages([]).status is PutStatus.MESSAGE_ILLEGAL
        assert store.get_max_phy_offset() == 0
        assert not os.path.exists(tmp_path / "consumequeue" / "a")


def test_wrong_size_file_names_the_file(tmp_path):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=4096)
    with MessageStore(cfg) as store:
        for _ in range(40):
            store.put_message(Message("T", b"x" * 200))
    seg = tmp_path / "commitlog" / "00000000000000000000"  # not the last segment
    with open(seg, "r+b") as fh:
        fh.truncate(1000)
    with pytest.raises(StoreError, match="00000000000000000000"):
        MessageStore(cfg)
    assert not os.path.exists(tmp_path / "abort")
    assert os.path.getsize(seg) == 1000  # refused, nothing changed


def test_opening_with_other_sizes_is_refused(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        store.put_message(Message("T", b"x"))
    with pytest.raises(StoreError, match="mapped_file_size_commitlog"):
        MessageStore(small_config(tmp_path, mapped_file_size_commitlog=1 << 20))


def test_second_store_on_same_directory_is_refused(tmp_path):
    cfg = small_config(tmp_path)
    with MessageStore(cfg) as store:
        with pytest.raises(StoreLockedError):
            MessageStore(cfg)
        assert store.put_message(Message("T", b"x")).ok


def test_shutdown_store_refuses_puts(tmp_path):
    store = MessageStore(small_config(tmp_path))
    store.shutdown()
    assert store.put_message(Message("T", b"x")).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_sync_flush_reput_waits_for_flush(tmp_path):
    cfg = small_config(tmp_path, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        rs = [store.put_message(foobar(i)) for i in range(10)]
        assert all(r.status is PutStatus.PUT_OK for r in rs)
        assert store.commitlog.flushed_offset() >= rs[-1].wrote_offset + rs[-1].wrote_bytes
        assert store.wait_dispatched(5) and store.get_max_offset_in_queue("FooBar", 0) == 10


def test_transaction_records_skip_the_consume_queue(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        store.put_message(Message("X", b"normal"))
        p = store.put_message(Message("X", b"prepared", sys_flag=0x4))
        store.put_message(Message("X", b"rollback", sys_flag=0xC, prepared_transaction_offset=p.wrote_offset))
        c = store.put_message(Message("X", b"commit", sys_flag=0x8, prepared_transaction_offset=p.wrote_offset))
        assert p.queue_offset == 0 and c.queue_offset == 1
        store.wait_dispatched(5)
        g = store.get_message("g", "X", 0, 0)
        assert [m.body for m in g.messages] == [b"normal", b"commit"]


def test_delay_level_goes_to_schedule_topic(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        r = store.put_message(Message("Real", b"later", tags="TagA", properties={"DELAY": "3"}, queue_id=2))
        m = store.look_message_by_offset(r.wrote_offset)
        assert (m.topic, m.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
        assert m.properties["REAL_TOPIC"] == "Real" and m.properties["REAL_QID"] == "2"
        store.wait_dispatched(5)
        unit = store.cq_table.find("SCHEDULE_TOPIC_XXXX", 2).unit(0)
        assert unit[2] == m.store_timestamp + 10_000


def test_damaged_record_mid_log_is_reported_not_raised(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        rs = [store.put_message(Message("D", b"body-%d" % i, tags="t")) for i in range(5)]
        store.wait_dispatched(5)
        mf = store.commitlog.segment_at(rs[2].wrote_offset)
        # break record 2's topic length (the body CRC does not cover it): IPv4 hosts put the
        # topic length byte at 88 + body length; 200 is negative as Java's signed byte
        m = store.look_message_by_offset(rs[2].wrote_offset)
        tpos = rs[2].wrote_offset - mf.file_from_offset + 88 + len(m.body)
        mf.mm[tpos] = 200
        assert store.look_message_by_offset(rs[2].wrote_offset) is None
        g = store.get_message("g", "D", 0, 0, 32)
        assert g.status is GetStatus.FOUND
        assert [x.body for x in g.messages] == [b"body-0", b"body-1", b"body-3", b"body-4"]
        assert g.next_begin_offset == 5


def test_get_message_raw_only(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        for i in range(6):
            store.put_message(Message("R", b"r%d" % i, tags="A" if i % 2 else "B"))
        store.wait_dispatched(5)
        full = store.get_message("g", "R", 0, 0, 32)
        raw = store.get_message("g", "R", 0, 0, 32, decode=False)
        assert raw.buffers == full.buffers and raw.messages == [] and raw.next_begin_offset == 6
        tagged = store.get_message("g", "R", 0, 0, 32, "A", decode=False)
        assert len(tagged.buffers) == 3 and tagged.status is GetStatus.FOUND
