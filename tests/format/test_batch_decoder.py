"""The vectorised batch decoder equals the single-record decoder, and stops safely."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.format import batch as fb
from rocketstore.format.message import Message, decode_message, encode_blank, encode_message, patch_record


def _segment(msgs, hosts, size=None):
    buf = bytearray()
    offs = []
    for i, (m, (born, store)) in enumerate(zip(msgs, hosts)):
        enc = encode_message(m, m.all_properties(), born_timestamp=i, born_host=born,
                             store_host=store, max_body_size=1 << 22)
        data = bytearray(enc.data)
        patch_record(data, 0, enc.store_ts_pos, i, 1000 + len(buf), 5000 + i)
        offs.append(len(buf))
        buf += data
    if size:
        buf += bytes(size - len(buf))
    return buf, offs


host = st.sampled_from([("127.0.0.1:1", "10.0.0.1:2"), ("[::1]:3", "127.0.0.1:4"),
                        ("1.2.3.4:5", "[2001:db8::1]:6"), ("[fe80::1]:7", "[::2]:8")])
msg = st.builds(Message, topic=st.sampled_from(["A", "Bb", "日志主题", "T" * 127]),
                body=st.binary(max_size=300), tags=st.one_of(st.none(), st.sampled_from(["TagA", "x"])),
                keys=st.one_of(st.none(), st.lists(st.sampled_from(["k1", "k2", "键"]), max_size=3)),
                queue_id=st.integers(0, 7))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(msg, host), max_size=30))
def test_columns_equal_single_decoder(items):
    msgs = [m for m, _ in items]
    buf, offs = _segment(msgs, [h for _, h in items])
    recs = fb.decode_records(bytes(buf), base_offset=1000, check_crc=True)
    assert len(recs) == len(msgs) and recs.stop == fb.STOP_END
    born, store = recs.hosts(buf)
    ids = recs.msg_ids(buf)
    bodies = recs.bodies(buf)
    for i, off in enumerate(offs):
        one = decode_message(bytes(buf), off)
        assert recs.topic[i] == one.topic and recs.properties[i] == one.properties
        assert int(recs.commitlog_offset[i]) == one.commitlog_offset
        assert int(recs.store_timestamp[i]) == one.store_timestamp
        assert int(recs.size[i]) == one.store_size and bodies[i] == one.body
        assert born[i] == one.born_host and store[i] == one.store_host and ids[i] == one.msg_id
        assert int(recs.tags_code[i]) == one.tags_code


def test_stops_at_blank_torn_tail_and_corruption():
    msgs = [Message("T", b"x" * 50, tags="a") for _ in range(5)]
    buf, offs = _segment(msgs, [("1.1.1.1:1", "1.1.1.1:2")] * 5)
    whole = len(buf)
    torn = bytes(buf[:whole - 10])
    r = fb.decode_records(torn)
    assert len(r) == 4 and r.stop == fb.STOP_INCOMPLETE and r.end == offs[4]
    blank = bytearray(buf) + bytearray(64)
    encode_blank(blank, whole, 64)
    r = fb.decode_records(bytes(blank))
    assert len(r) == 5 and r.stop == fb.STOP_BLANK and r.end == whole
    bad = bytearray(buf)
    bad[offs[2] + 84 + 3] ^= 0x7F  # body length of record 2
    r = fb.decode_records(bytes(bad))
    assert len(r) == 2 and r.stop == fb.STOP_CORRUPT and r.end == offs[2]
    crc = bytearray(buf)
    crc[offs[3] + 90] ^= 1  # a body byte of record 3
    assert len(fb.decode_records(bytes(crc))) == 5
    r = fb.decode_records(bytes(crc), check_crc=True)
    assert len(r) == 3 and r.stop == fb.STOP_CORRUPT and "CRC" in r.stop_reason


def test_delay_topic_tags_code_is_deliver_time():
    m = Message("SCHEDULE_TOPIC_XXXX", b"x", tags="TagA", properties={"DELAY": "3"})
    buf, _ = _segment([m], [("1.1.1.1:1", "1.1.1.1:2")])
    r = fb.decode_records(bytes(buf))
    assert int(r.tags_code[0]) == int(r.store_timestamp[0]) + 10_000
    assert fb.parse_delay_levels()[-1] == 7_200_000


def test_empty_and_zero_ranges():
    r = fb.decode_records(bytes(1024))
    assert len(r) == 0 and r.stop == fb.STOP_END and r.end == 0
    assert isinstance(r.pos, np.ndarray)


raw_props = st.lists(st.sampled_from(["TAGS", "KEYS", "a", "\x01", "\x02", "x", "UNIQ_KEY", " "]),
                     max_size=20).map("".join)


@given(st.lists(raw_props, max_size=20))
def test_extract_property_equals_full_parse(raws):
    from rocketstore.format.message import string_to_properties
    for name in ("TAGS", "KEYS", "UNIQ_KEY", "a"):
        assert fb.extract_property(raws, name) == [string_to_properties(s).get(name) for s in raws]
