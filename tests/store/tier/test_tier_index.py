"""The tier's INDEX flat file (RocketMQ 5.3.3's IndexStoreFile, sealed): its bytes, and queries
by key answered from it once the local copy is gone."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import struct

import pytest

from rocketstore.format.message import Message, decode_message
from rocketstore.store.message_store import MessageStore

from .test_tier_store import BROKER, CLUSTER, store_cfg, tier_cfg
from .tierutil import queue_dir, read_flat

SLOTS = 64


def java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(ch, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def cfg(tmp_path, **kw):
    return store_cfg(tmp_path, tier=tier_cfg(tmp_path / "tier", index_max_hash_slot_num=SLOTS,
                                             index_max_index_num=10_000, **kw))


def put_keyed(store, n, start=0):
    """Message i: KEYS "k<i>" plus "even" on even i; queue i % 2. Returns {key: {bodies}}."""
    want: dict[str, set[bytes]] = {}
    for i in range(start, start + n):
        body = b"body-%05d" % i
        keys = f"k{i} even" if i % 2 == 0 else f"k{i}"
        r = store.put_message(Message("TierIx", body, keys=keys, queue_id=i % 2))
        assert r.ok, r
        for k in keys.split():
            want.setdefault(k, set()).add(body)
    assert store.wait_dispatched(10)
    return want


def drop_local(tmp_path):
    """Remove every local CommitLog segment but the newest and the local index files."""
    segs = sorted(glob.glob(str(tmp_path / "store" / "commitlog" / "*")))
    for p in segs[:-1]:
        os.unlink(p)
    for p in glob.glob(str(tmp_path / "store" / "index" / "*")):
        os.unlink(p)


def index_segments(tier):
    d = os.path.join(tier, f"{hashlib.md5(CLUSTER.encode()).hexdigest()[:8]}_{CLUSTER}", BROKER,
                     "rmq_sys_INDEX", "0", "INDEX")
    return sorted((int(p[-20:]), open(p, "rb").read()) for p in glob.glob(os.path.join(d, "*")))


def parse_index(data):
    """header, {slot: [(hash, topicId, queueId, offset, size, timeDiff)]}; checked against the
    layout: header 28 bytes, SLOTS slots of (position, length), 28-byte items."""
    magic, begin, end, used, count = struct.unpack_from(">iqqii", data, 0)
    assert magic == ((0xCCDDEEFF ^ (1880681586 + 8)) ^ 0x80000000) - 0x80000000
    assert len(data) == 28 + SLOTS * 8 + count * 28
    runs = {}
    for s in range(SLOTS):
        pos, length = struct.unpack_from(">ii", data, 28 + s * 8)
        if length:
            runs[s] = [struct.unpack_from(">iiiqii", data, pos + i) for i in range(0, length, 28)]
    assert sum(len(r) for r in runs.values()) == count and len(runs) == used
    return (begin, end), runs


def test_index_segment_bytes_point_at_each_key_in_the_flat_commitlog(tmp_path):
    with MessageStore(cfg(tmp_path)) as s:
        want = put_keyed(s, 40)
        assert s.tier.wait_caught_up(30)
        uniq = {decode_message(bytes(s.commitlog.read_record(off)), 0).uniq_key
                for q in (0, 1) for off, _, _ in s.read_consume_queue("TierIx", q, 0, 100)}
        assert s.tier.seal_index()
        topic_id = s.tier.topic_ids["TierIx"]
    segs = index_segments(str(tmp_path / "tier"))
    assert [b for b, _ in segs] == [0]
    (begin, end), runs = parse_index(segs[0][1])
    flat = {q: read_flat(os.path.join(queue_dir(str(tmp_path / "tier"), CLUSTER, BROKER, "TierIx", q),
                                      "COMMIT_LOG"))[1] for q in (0, 1)}
    found: dict[str, set[bytes]] = {}
    for slot, items in runs.items():
        for h, tid, qid, off, size, diff in items:
            assert h % SLOTS == slot and tid == topic_id
            m = decode_message(flat[qid][off:off + size], 0)
            assert begin + diff * 1000 <= m.store_timestamp <= end
            for k in ([m.uniq_key] + m.keys):
                if abs(java_hash(f"TierIx#{k}")) == h:
                    found.setdefault(k, set()).add(m.body)
    assert {k: v for k, v in found.items() if k not in uniq} == want
    assert uniq <= set(found)
    meta = json.load(open(tmp_path / "store" / "config" / "tieredStoreMetadata.json"))
    seg = meta["indexFileSegmentTable"][f"{BROKER}/rmq_sys_INDEX/0"]["0"]
    assert (seg["type"], seg["size"], seg["beginTimestamp"], seg["endTimestamp"]) == (
        2, len(segs[0][1]), begin, end)


def test_query_by_key_from_the_tier_after_local_copies_go(tmp_path):
    c = cfg(tmp_path)
    with MessageStore(c) as s:
        want = put_keyed(s, 200)
        s.put_message(Message("TierIx", b"collides", keys="Aa", queue_id=0))
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
        assert s.tier.seal_index()
    drop_local(tmp_path)
    with MessageStore(c) as s:
        assert s.index_service.query_message(
            "TierIx", "k3", 8, 0, None, s.commitlog.look_message).messages == []
        for k in ("k3", "k150", "even"):
            got = s.query_message("TierIx", k, 500).messages
            assert {m.body for m in got} == want[k] and len(got) == len(want[k])
            assert all(m.topic == "TierIx" for m in got)
        # "BB" has the hash of "Aa": the item matches, the record does not
        assert java_hash("TierIx#BB") == java_hash("TierIx#Aa")
        assert [m.body for m in s.query_message("TierIx", "Aa", 8).messages] == [b"collides"]
        assert s.query_message("TierIx", "BB", 8).messages == []
        assert s.query_message("OtherTopic", "k3", 8).messages == []
        assert len(s.query_message("TierIx", "even", 7).messages) == 7


@pytest.mark.parametrize("chunk", [4 << 20, 100])  # 100: every record longer than a read
def test_unsealed_keys_survive_a_restart_once_each(tmp_path, monkeypatch, chunk):
    from rocketstore.store.tier import index
    monkeypatch.setattr(index, "CATCH_UP_CHUNK", chunk)
    c = cfg(tmp_path)
    with MessageStore(c) as s:
        want = put_keyed(s, 30)
        assert s.tier.wait_caught_up(30)
        assert s.tier.seal_index()
        want2 = put_keyed(s, 30, start=30)
        assert s.tier.wait_caught_up(30)  # these keys are pending only, in memory
    with MessageStore(c) as s:  # read back from the tier's COMMIT_LOG past the mark
        assert len(s.tier.index.pending) == 30 + 15 + 30  # KEYS, "even", UNIQ_KEY
        assert s.tier.seal_index()
    with MessageStore(c) as s:
        assert len(s.tier.index.pending) == 0
    segs = index_segments(str(tmp_path / "tier"))
    assert [b for b, _ in segs] == [0, len(segs[0][1])]
    counts = [sum(len(r) for r in parse_index(d)[1].values()) for _, d in segs]
    assert counts == [30 + 15 + 30, 30 + 15 + 30]
    drop_local(tmp_path)
    with MessageStore(c) as s:
        for k in ("k1", "k45", "even"):
            got = s.query_message("TierIx", k, 500).messages
            assert sorted(m.body for m in got) == sorted(want.get(k, set()) | want2.get(k, set()))


def test_torn_index_segment_is_dropped_and_rebuilt(tmp_path):
    c = cfg(tmp_path)
    with MessageStore(c) as s:
        put_keyed(s, 20)
        assert s.tier.wait_caught_up(30)
    # a killed upload: a segment shorter than its header says, the mark not moved
    d = os.path.dirname(glob.glob(str(tmp_path / "tier" / "*" / BROKER / "TierIx"))[0])
    ix = os.path.join(d, "rmq_sys_INDEX", "0", "INDEX")
    os.makedirs(ix)
    name = hashlib.md5(b"0").hexdigest()[:8] + "%020d" % 0
    with open(os.path.join(ix, name), "wb") as fh:
        fh.write(struct.pack(">iqqii", 0, 1, 2, 3, 4) + b"\0" * 40)
    with MessageStore(c) as s:
        assert not os.path.exists(os.path.join(ix, name))
        assert s.tier.seal_index()
        assert {m.body for m in s.query_message("TierIx", "even", 100).messages} == \
            {b"body-%05d" % i for i in range(0, 20, 2)}


def test_batch_indexing_gives_the_keys_record_by_record_indexing_gives(tmp_path):
    """The upload indexes a whole batch at once (``add_written``); ``add`` (the catch-up after a
    crash) goes record by record. Same keys, same order, whatever KEYS holds: repeated keys,
    runs of spaces, a KEYS piece equal to the UNIQ_KEY. Each slot's run is newest first."""
    odd_keys = ["a a", "  b   c ", "dup dup dup", "", "x", "solo"]
    with MessageStore(cfg(tmp_path)) as s:
        for i, k in enumerate(odd_keys * 4):
            r = s.put_message(Message("TierIx", b"b%d" % i, keys=k or None, queue_id=0))
            assert r.ok, r
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
        sent = [decode_message(bytes(s.commitlog.read_record(s.read_consume_queue(
            "TierIx", 0, qo, 1)[0][0])), 0).uniq_key for qo in range(len(odd_keys) * 4)]
        batch = [tuple(it) for it in s.tier.index.pending]
        fq = s.tier.queues[("TierIx", 0)]
        s.tier.index.pending = type(s.tier.index.pending)()
        s.tier.index.pending_marks[fq.path] = 0
        assert s.tier.index.catch_up(fq, s.tier.topic_ids["TierIx"]) == len(odd_keys) * 4
        one_by_one = [tuple(it) for it in s.tier.index.pending]
        assert batch == one_by_one
        # expected independently: UNIQ_KEY, then each distinct non-blank KEYS piece, per message
        want = []
        for i, k in enumerate(odd_keys * 4):
            ks = [sent[i]] + [p for p in dict.fromkeys(k.split()) if p != sent[i]]
            want += [abs(java_hash(f"TierIx#{x}")) for x in ks]
        assert [b[0] for b in batch] == want
        assert s.tier.seal_index()
    (_, _), runs = parse_index(index_segments(str(tmp_path / "tier"))[0][1])
    for items in runs.values():  # newest first: flat offsets descend along a run
        offs = [it[3] for it in items]
        assert offs == sorted(offs, reverse=True)
