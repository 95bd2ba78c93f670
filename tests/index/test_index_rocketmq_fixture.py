"""The index files written by Apache RocketMQ 4.9.7 (shared fixture) answer every manifest query:
RocketMQ's raw offsets byte for byte, and exact results = RocketMQ's minus collisions/duplicates.
Rebuilding the index from that store's CommitLog with our batch writer gives the same bytes."""
from __future__ import annotations

import os

import numpy as np

from rocketstore.format.message import TRANSACTION_ROLLBACK_TYPE
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.index_service import IndexService, describe_index_files

from .index_helpers import LONG_MAX, SegmentReader, fixture_config

RAW = "indexService.queryOffset(topic,key,32,0,Long.MAX_VALUE).phyOffsets"
STORE = "queryMessage(topic,key,32,0,Long.MAX_VALUE).phyOffsets"


def _service(root, store="store", **kw) -> IndexService:
    cfg = fixture_config(root, store, **kw)
    return IndexService(cfg, StoreCheckpoint(os.path.join(cfg.store_path_root_dir, "checkpoint")))


def _expected_exact(manifest, topic, key, limit=32):
    out = []
    for m in sorted(manifest["messages"], key=lambda m: -m["wroteOffset"]):
        if m["putStatus"] != "PUT_OK" or m["storedTopic"] != topic:
            continue
        if (m["sysFlag"] & 0xC) == TRANSACTION_ROLLBACK_TYPE:
            continue  # never indexed
        kp = [k for k in m["properties"].get("KEYS", "").split(" ") if k]
        if key in kp or m["properties"].get("UNIQ_KEY") == key:
            out.append(m["wroteOffset"])
    return out[:limit]


def test_raw_query_offsets_match_rocketmq(rmq_fixture):
    root, manifest = rmq_fixture
    svc = _service(root)
    svc.load(True)
    assert len(svc.files) == 12
    assert len(manifest["queryMessage"]) >= 20
    for q in manifest["queryMessage"]:
        offsets, ts, phy = svc.query_offsets(q["topic"], q["key"], 32, 0, LONG_MAX)
        assert offsets == q[RAW], q["indexKey"]
        assert (ts, phy) == (1795313364976, 518574)
    svc.shutdown()


def test_exact_results_are_rocketmq_minus_collisions_and_duplicates(rmq_fixture):
    root, manifest = rmq_fixture
    reader = SegmentReader(root / "store" / "commitlog")
    svc = _service(root)
    svc.load(True)
    for q in manifest["queryMessage"]:
        topic, key = q["topic"], q["key"]
        res = svc.query_message(topic, key, 32, 0, None, reader.read)
        got = [m.commitlog_offset for m in res.messages]
        assert got == _expected_exact(manifest, topic, key), q["indexKey"]
        assert all(m.topic == topic and (key in m.keys or m.uniq_key == key) for m in res.messages)
        # RocketMQ's store answer, filtered and de-duplicated, newest first
        rmq = []
        for off in reversed(q[STORE]):
            m = reader.read(off)
            if m.topic == topic and (key in m.keys or m.uniq_key == key) and off not in rmq:
                rmq.append(off)
        if len(q[RAW]) < 32:  # RocketMQ saw every entry: same answer
            assert got == rmq, q["indexKey"]
        else:  # RocketMQ's cap of 32 raw entries was spent partly on collisions
            assert set(rmq) <= set(got) and len(got) >= len(rmq)
        assert (res.index_last_update_timestamp, res.index_last_update_phyoffset) == \
               (q["indexLastUpdateTimestamp"], q["indexLastUpdatePhyoffset"])
    collided = svc.query_message("AaTopic", "Aa", 32, 0, None, reader.read)
    assert {m.topic for m in collided.messages} == {"AaTopic"}
    svc.shutdown()


def test_query_by_uniq_key_on_fixture(rmq_fixture):
    root, manifest = rmq_fixture
    reader = SegmentReader(root / "store" / "commitlog")
    svc = _service(root)
    svc.load(True)
    for m in manifest["messages"][::37]:
        if m["uniqKey"] is None or (m["sysFlag"] & 0xC) == TRANSACTION_ROLLBACK_TYPE:
            continue
        got = svc.query_by_uniq_key(m["storedTopic"], m["uniqKey"], reader.read)
        assert [x.commitlog_offset for x in got] == [m["wroteOffset"]]
    svc.shutdown()


def _rebuild(svc, reader, start=0):
    for recs in reader.batches():
        svc.dispatch(recs)


def _bytes(index_dir):
    out = []
    for n in sorted(os.listdir(index_dir)):
        with open(os.path.join(index_dir, n), "rb") as fh:
            out.append(fh.read())
    return out


def test_rebuild_from_commitlog_is_byte_identical_and_idempotent(rmq_fixture, tmp_path):
    root, _ = rmq_fixture
    reader = SegmentReader(root / "store" / "commitlog")
    ours = tmp_path / "ours"
    from rocketstore.config import StoreConfig
    cfg = StoreConfig(store_path_root_dir=str(ours), max_hash_slot_num=211, max_index_num=128)
    svc = IndexService(cfg, StoreCheckpoint(str(ours / "checkpoint")))
    svc.load(True)
    _rebuild(svc, reader)
    svc.flush()
    theirs = _bytes(root / "store" / "index")
    assert _bytes(ours / "index") == theirs
    # full files were flushed and the checkpoint follows the newest full file
    assert svc.checkpoint.index_msg_timestamp == 1795313364910
    # re-dispatching everything (and the record at endPhyOffset) adds nothing
    assert svc.dispatch_from_offset() == 518574
    _rebuild(svc, reader)
    svc.shutdown()
    assert _bytes(ours / "index") == theirs


def test_unclean_copy_drops_untrusted_file_and_redispatch_restores_it(rmq_fixture):
    root, manifest = rmq_fixture
    reader = SegmentReader(root / "store-unclean" / "commitlog")
    svc = _service(root, "store-unclean")
    assert os.path.exists(root / "store-unclean" / "abort")
    svc.load(False)  # checkpoint index time 1795313364910: the last file is newer -> destroyed
    assert len(svc.files) == 11
    assert len(os.listdir(root / "store-unclean" / "index")) == 11
    start = svc.dispatch_from_offset()
    assert start == 492394
    for recs in reader.batches():
        keep = recs.commitlog_offset >= start
        if keep.any():
            svc.dispatch(recs)
    # RocketMQ's strict '<' would index the record at 492394 a second time; we do not
    last = svc.files[-1]
    assert last.entry_count == 62
    for q in manifest["queryMessage"]:
        offsets, _, _ = svc.query_offsets(q["topic"], q["key"], 32, 0, LONG_MAX)
        assert offsets == q[RAW], q["indexKey"]
        got = [m.commitlog_offset for m in svc.query_message(q["topic"], q["key"], 32, 0, None,
                                                             reader.read).messages]
        assert got == _expected_exact(manifest, q["topic"], q["key"])
    svc.shutdown()
    clean_last = _bytes(root / "store" / "index")[-1]
    assert _bytes(root / "store-unclean" / "index")[-1] == clean_last


def test_describe_index_files_on_fixture(rmq_fixture):
    root, _ = rmq_fixture
    d = describe_index_files(str(root / "store" / "index"), 211, 128)
    assert len(d) == 12
    assert [x["entries"] for x in d] == [127] * 11 + [62]
    assert d[-1]["begin_timestamp"] == 1795313364912 and d[-1]["end_timestamp"] == 1795313364976
    assert d[0]["hash_slot_count"] == 84 and d[0]["used_slots"] == 84
    assert d[0]["full"] and not d[-1]["full"]
    assert abs(d[-1]["fill"] - 62 / 127) < 1e-9
    # sizes guessed from the file when only the slot count is known
    assert describe_index_files(str(root / "store" / "index"), 211)[3]["entries"] == 127


def test_spark_style_rebuild_with_plan_index_files(rmq_fixture, tmp_path):
    """The pure split helper + bulk writer, as the Spark rebuild uses them, reproduce RocketMQ's
    files from the global key stream (each file written independently)."""
    from rocketstore.format.index_layout import index_key_hashes
    from rocketstore.store.index_file import IndexFile, index_keys, plan_index_files
    root, _ = rmq_fixture
    reader = SegmentReader(root / "store" / "commitlog")
    hashes, phys, tss = [], [], []
    for recs in reader.batches():
        keys, owner = index_keys(recs)
        hashes.append(index_key_hashes(keys))
        phys.append(recs.commitlog_offset[owner])
        tss.append(recs.store_timestamp[owner])
    h, phy, ts = np.concatenate(hashes), np.concatenate(phys), np.concatenate(tss)
    plans = plan_index_files(phy, ts, 127)
    assert len(plans) == 12 and all(p.new_file for p in plans)
    out_dir = tmp_path / "spark-index"
    out_dir.mkdir()
    for i, p in reversed(list(enumerate(plans))):  # any order: files do not depend on each other
        f = IndexFile.create(str(out_dir / f"{i:017d}"), 211, 128, p.carry_end_phy_offset,
                             p.carry_end_timestamp)
        assert f.put_batch(h[p.start:p.stop], phy[p.start:p.stop], ts[p.start:p.stop]) == p.stop - p.start
        f.close()
    assert _bytes(out_dir) == _bytes(root / "store" / "index")


def test_summarize_index_file(rmq_fixture):
    from rocketstore.store.index_service import summarize_index_file
    root, _ = rmq_fixture
    d = describe_index_files(str(root / "store" / "index"), 211, 128)
    line = summarize_index_file(d[-1])
    assert line.startswith("20261122020924913: 62/127 entries (48.8%), slots 51/211 (24.2%), ")
    assert line.endswith("phy 492634..518574")
    assert " full" in summarize_index_file(d[0])
