"""The CommitLog record codec: reference values, round trips, corruption."""
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.errors import CorruptRecordError
from rocketstore.format.hashing import (crc32_masked, index_key_hash, java_hash, java_hash_many,
                                       java_hash_many_py)
from rocketstore.format.layouts import offset_to_name
from rocketstore.format.message import (BLANK, BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE,
                                        MESSAGE_MAGIC_CODE_V2, Message, PropertiesTooLarge,
                                        UniqKeyGenerator, create_message_id, decode_message,
                                        encode_blank, encode_message, parse_message_id,
                                        patch_record, properties_to_string, record_length,
                                        string_to_properties)

# §10 of the format reference: values computed with OpenJDK 17
JAVA_HASHES = {"Aa": 2112, "BB": 2112, "AaTopic#Aa": -10606476, "BBTopic#BB": -10606476,
               "AaTopic#BB": -10606476, "polygenelubricants": -2147483648,
               "StoreTest#Hello": -1707377374, "FooBar#Hello": -101609924, "TAG1": 2567159,
               "TagA": 2598919, "TagB": 2598920, "TagC": 2598921, "abc": 96354,
               "été": 227742, "😀": 1772899}


@pytest.mark.parametrize("s,h", sorted(JAVA_HASHES.items()))
def test_java_hash_reference_values(s, h):
    assert java_hash(s) == h
    assert int(java_hash_many([s])[0]) == h
    assert int(java_hash_many_py([s])[0]) == h


def test_index_hash_min_value_rule_and_slots():
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("AaTopic#Aa") == 10606476 and 10606476 % 5_000_000 == 606476
    assert index_key_hash("StoreTest#Hello") % 5_000_000 == 2377374
    assert index_key_hash("StoreTest#Hello") % 100 == 74
    assert index_key_hash("FooBar#Hello") % 5_000_000 == 1609924


def test_crc_and_names_reference_values():
    assert crc32_masked(b"") == 0
    assert crc32_masked(b"Once, there was a chance for me!") == 151131488
    assert crc32_masked(b"body") == 1537739698
    assert crc32_masked(b"123456789") == 1274296614
    assert offset_to_name(1073741824) == "00000000001073741824"
    assert offset_to_name(6000000) == "00000000000006000000"
    assert (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE) == (-626843481, -626843477, -875286124)


@given(st.lists(st.text(max_size=20), max_size=30))
def test_vectorised_hash_equals_scalar(strings):
    assert java_hash_many(strings).tolist() == [java_hash(s) for s in strings]
    assert java_hash_many_py(strings).tolist() == [java_hash(s) for s in strings]


def _encode(msg, born="127.0.0.1:0", store="127.0.0.1:8123", qo=0, phys=0, ts=1):
    enc = encode_message(msg, msg.all_properties(), born_timestamp=7, born_host=born,
                         store_host=store, max_body_size=4 << 20)
    data = bytearray(enc.data)
    patch_record(data, 0, enc.store_ts_pos, qo, phys, ts)
    return bytes(data)


def test_foobar_record_is_158_bytes_and_ipv6_182():
    m = Message("FooBar", b"Once, there was a chance for me!", tags="TAG1", keys="1700000000000")
    assert len(properties_to_string(m.all_properties()).encode()) == 29
    assert len(_encode(m)) == 158
    assert len(_encode(m, born="[1050:0:0:0:5:600:300c:326b]:0", store="[::1]:0")) == 182
    assert record_length(4, 10, 9) == 114  # AppendCallbackTest


def test_golden_bytes_of_a_record():
    m = Message("T", b"ab", tags="X", queue_id=3, flag=5)
    data = _encode(m, born="1.2.3.4:5", store="6.7.8.9:10", qo=11, phys=12, ts=13)
    props = b"TAGS\x01X\x02"
    want = (struct.pack(">iiiiiqqiq", len(data), MESSAGE_MAGIC_CODE, crc32_masked(b"ab"), 3, 5, 11, 12, 0, 7)
            + bytes([1, 2, 3, 4]) + struct.pack(">i", 5) + struct.pack(">q", 13)
            + bytes([6, 7, 8, 9]) + struct.pack(">i", 10) + struct.pack(">iqi", 0, 0, 2) + b"ab"
            + b"\x01T" + struct.pack(">h", len(props)) + props)
    assert data == want


hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 65535)).map(lambda t: f"{t[0]}:{t[1]}"),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 65535)).filter(
        lambda t: t[0].ipv4_mapped is None).map(lambda t: f"[{t[0]}]:{t[1]}"))
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                    min_size=1, max_size=20)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(topic=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=127).filter(
           lambda t: len(t.encode()) <= 127),
       body=st.binary(max_size=64 * 1024), props=st.dictionaries(prop_text, prop_text, max_size=8),
       born=hosts, store=hosts, qo=st.integers(0, 2**62), phys=st.integers(0, 2**62),
       flag=st.integers(-2**31, 2**31 - 1), reconsume=st.integers(0, 2**31 - 1))
def test_round_trip(topic, body, props, born, store, qo, phys, flag, reconsume):
    m = Message(topic, body, properties=props, queue_id=7, flag=flag, reconsume_times=reconsume)
    data = _encode(m, born=born, store=store, qo=qo, phys=phys, ts=99)
    got = decode_message(data, 0, check_crc=True)
    assert (got.topic, got.body, got.properties, got.queue_offset, got.commitlog_offset) == (
        topic, body, props, qo, phys)
    assert (got.flag, got.reconsume_times, got.store_timestamp, got.store_size) == (flag, reconsume, 99, len(data))
    assert got.msg_id == create_message_id(store, phys)
    assert parse_message_id(got.msg_id)[1] == phys
    assert len(got.msg_id) == (56 if "[" in store else 32)


def test_v2_record_is_read():
    m = Message("T" * 10, b"xyz", tags="A")
    v1 = bytearray(_encode(m))
    # rebuild as v2: 2-byte topic length, magic V2, size + 1
    tpos = len(v1) - 2 - len(b"TAGS\x01A\x02") - 10 - 1
    v2 = v1[:tpos] + struct.pack(">h", 10) + v1[tpos + 1:]
    struct.pack_into(">ii", v2, 0, len(v2), MESSAGE_MAGIC_CODE_V2)
    got = decode_message(bytes(v2), 0, check_crc=True)
    assert got.topic == "T" * 10 and got.body == b"xyz" and got.tags == "A"


def test_properties_parse_drops_empty_entries():
    assert string_to_properties("a\x01b\x02\x01x\x02c\x01\x02d\x01e\x01f") == {"a": "b", "d": "e\x01f"}
    assert properties_to_string({}) == ""


def test_illegal_property_and_oversize_rejected():
    with pytest.raises(ValueError):
        encode_message(Message("T", properties={"a\x01": "b"}), {"a\x01": "b"}, born_timestamp=0,
                       born_host="1.1.1.1:1", store_host="1.1.1.1:1", max_body_size=10)
    big = {"test": "1" * 32768}
    with pytest.raises(PropertiesTooLarge):
        encode_message(Message("T"), big, born_timestamp=0, born_host="1.1.1.1:1",
                       store_host="1.1.1.1:1", max_body_size=10)


def test_blank_record_and_corruption_never_crash():
    buf = bytearray(16)
    encode_blank(buf, 0, 16)
    assert decode_message(bytes(buf), 0) is BLANK
    data = _encode(Message("Topic", b"hello world", tags="t"))
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode_message(data[:cut], 0)


@given(st.integers(0, 200), st.integers(1, 255))
def test_byte_flips_give_record_or_corrupt_error(pos, xor):
    data = bytearray(_encode(Message("Topic", b"hello world" * 10, tags="t", keys="k")))
    pos %= len(data)
    data[pos] ^= xor
    try:
        decode_message(bytes(data), 0, check_crc=True)
    except CorruptRecordError:
        pass


def test_uniq_key_layout():
    k = UniqKeyGenerator("127.0.0.1").next()
    k2 = UniqKeyGenerator("127.0.0.1").next()
    assert len(k) == 32 and k.isupper() or k.isdigit()
    assert k.startswith("7F000001") and k != k2
    assert int(k[-4:], 16) == 0  # the counter starts at 0
