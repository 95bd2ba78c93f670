"""The proxy's pure pieces: Guava's consistent hash for message groups, the gRPC <-> store
message mapping and its validation."""
from __future__ import annotations

import zlib

import pytest

from rocketstore.format.hashing import java_hash
from rocketstore.format.message import MessageExt
from rocketstore.proxy.convert import (ValidationError, delay_level_for, to_grpc_message,
                                       to_store_message)
from rocketstore.proxy.protocol import pb, to_timestamp
from rocketstore.proxy.service import consistent_hash

BUCKETS = (1, 2, 3, 4, 8, 16, 100)
# Hashing.consistentHash(key.hashCode(), buckets) printed by Guava 32.1.3 (Java 17)
GUAVA = {
    'group-0': [0, 1, 1, 1, 1, 1, 67],
    'group-1': [0, 1, 1, 1, 7, 15, 36],
    'group-2': [0, 0, 0, 0, 0, 13, 49],
    'order-42': [0, 0, 2, 3, 3, 10, 25],
    '': [0, 0, 0, 0, 0, 0, 0],
    'Aa': [0, 1, 1, 1, 5, 14, 14],
    'BB': [0, 1, 1, 1, 5, 14, 14],
    '中文': [0, 0, 0, 3, 3, 3, 80],
}


@pytest.mark.parametrize("key", list(GUAVA))
def test_consistent_hash_matches_guava(key):
    assert [consistent_hash(java_hash(key), b) for b in BUCKETS] == GUAVA[key]


def test_delay_level_covers_the_wait():
    levels = [1000, 5000, 10000]
    assert delay_level_for(10_000, 10_000, levels) == 0  # due now: no level
    assert delay_level_for(10_500, 10_000, levels) == 1
    assert delay_level_for(12_000, 10_000, levels) == 2  # 2 s -> the 5 s level
    assert delay_level_for(99_000, 10_000, levels) == 3  # longer than every level: the last


def _grpc(**sp):
    sp.setdefault("message_id", "UNIQ-1")
    m = pb.Message(topic=pb.Resource(name="T"), body=b"hello",
                   system_properties=pb.SystemProperties(**sp))
    m.user_properties["color"] = "red"
    return m


def test_store_message_carries_rocketmq_property_names():
    m = _grpc(tag="TagA", keys=["k1", "k2"], message_group="g1",
              born_timestamp=to_timestamp(1_700_000_000_123))
    sm = to_store_message(m, producer_group="T", born_host="ipv4:10.0.0.1:5555",
                          max_body=100, levels_ms=[1000], now_ms=1_700_000_000_200)
    assert (sm.topic, sm.body, sm.tags, sm.keys) == ("T", b"hello", "TagA", ["k1", "k2"])
    p = sm.properties
    assert p["UNIQ_KEY"] == "UNIQ-1" and p["__SHARDINGKEY"] == "g1" and p["PGROUP"] == "T"
    assert p["color"] == "red" and p["__BORNHOST"] == "10.0.0.1"
    assert sm.born_host == "10.0.0.1:5555" and sm.born_timestamp == 1_700_000_000_123


def test_back_to_grpc_with_digest_attempt_and_user_properties():
    ext = MessageExt(topic="T", body=b"hello", properties={
        "UNIQ_KEY": "UNIQ-1", "TAGS": "TagA", "KEYS": "k1 k2", "__SHARDINGKEY": "g1",
        "color": "red", "PGROUP": "T"}, queue_id=2, queue_offset=7, commitlog_offset=99,
        store_size=1, body_crc=0, flag=0, sys_flag=0, born_timestamp=1, born_host="1.2.3.4:5",
        store_timestamp=2, store_host="127.0.0.1:10911", reconsume_times=2,
        prepared_transaction_offset=0, msg_id="OFFSETID")
    g = to_grpc_message(ext, receipt_handle="rh", invisible_ms=30_000)
    sp = g.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == \
        ("UNIQ-1", "TagA", ["k1", "k2"], "g1")
    assert sp.message_type == pb.FIFO and sp.delivery_attempt == 3
    assert sp.body_digest.checksum == format(zlib.crc32(b"hello"), "08X")
    assert (sp.queue_id, sp.queue_offset, sp.receipt_handle) == (2, 7, "rh")
    assert dict(g.user_properties) == {"color": "red"}  # system properties stay hidden


@pytest.mark.parametrize("change, code", [
    (dict(body=b""), pb.MESSAGE_BODY_EMPTY),
    (dict(body=b"x" * 101), pb.MESSAGE_BODY_TOO_LARGE),
    (dict(message_id=""), pb.ILLEGAL_MESSAGE_ID),
    (dict(tag="a|b"), pb.ILLEGAL_MESSAGE_TAG),
    (dict(keys=[" "]), pb.ILLEGAL_MESSAGE_KEY),
    (dict(message_group="g" * 65), pb.ILLEGAL_MESSAGE_GROUP),
    (dict(prop=("KEYS", "x")), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (dict(prop=("a\x01", "x")), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (dict(delivery_timestamp=to_timestamp(10**13)), pb.ILLEGAL_DELIVERY_TIME),
])
def test_bad_messages_get_the_proxys_codes(change, code):
    body = change.pop("body", b"ok")
    prop = change.pop("prop", None)
    m = _grpc(**change)
    m.body = body
    if prop:
        m.user_properties[prop[0]] = prop[1]
    with pytest.raises(ValidationError) as e:
        to_store_message(m, producer_group="T", born_host="", max_body=100, levels_ms=[1000])
    assert e.value.code == code
