"""tieredStoreFileReservedTime (segments and their metadata deleted as RocketMQ's
destroyExpiredFile does) and tieredStorageLevel (which reads the tier serves)."""
from __future__ import annotations

import json
import os
import time

import pytest

from rocketstore.config import TierConfig
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus
from rocketstore.store.tier.check import tier_report

from .test_tier_store import BROKER, CLUSTER, put, store_cfg, tier_cfg
from .tierutil import local_records, mask_phys, queue_dir, tier_queue

HOUR = 3_600_000


def test_reserved_time_deletes_expired_segments_and_their_metadata(tmp_path):
    tier = str(tmp_path / "tier")
    with MessageStore(store_cfg(tmp_path, tier=tier_cfg(tmp_path / "tier", file_reserved_time=1,
                                                        index_max_hash_slot_num=16))) as s:
        put(s, 200, queues=1)
        assert s.tier.wait_caught_up(30) and s.tier.seal_index()
        expected = local_records(s, "TierT", 0)
        qd = queue_dir(tier, CLUSTER, BROKER, "TierT", 0)
        cl_bases = sorted(int(n[8:]) for n in os.listdir(os.path.join(qd, "COMMIT_LOG")))
        rows, _, _ = tier_queue(tier, CLUSTER, BROKER, "TierT", 0)
        assert len(cl_bases) > 3
        now = int(time.time() * 1000)
        assert s.tier.clean_now(now + HOUR // 2) == 0  # nothing is an hour old yet
        assert s.tier.clean_now(now + 2 * HOUR) > 0
        # what must be left, from the files as they were: the newest COMMIT_LOG segment and
        # the CONSUME_QUEUE segments (10 units each) holding a unit that points into it
        first_kept = min(qo for qo, phy, _, _ in rows if phy >= cl_bases[-1])
        assert sorted(int(n[8:]) for n in os.listdir(os.path.join(qd, "COMMIT_LOG"))) == cl_bases[-1:]
        assert sorted(int(n[8:]) for n in os.listdir(os.path.join(qd, "CONSUME_QUEUE"))) == \
            list(range(first_kept // 10 * 200, 200 * 20, 200))
        assert s.tier.bounds("TierT", 0) == (first_kept, 200)
        assert not os.listdir(os.path.join(os.path.dirname(os.path.dirname(qd)), "rmq_sys_INDEX", "0",
                                           "INDEX"))
        meta = json.load(open(tmp_path / "store" / "config" / "tieredStoreMetadata.json"))
        assert list(meta["commitLogFileSegmentTable"][f"{BROKER}/TierT/0"]) == [str(cl_bases[-1])]
        assert meta["indexFileSegmentTable"] == {}
        # what is left serves reads, and the tier still verifies
        r = s.tier.get_message("TierT", 0, first_kept, 500, None, False, 200)
        assert [mask_phys(bytes(b)) for b in r.buffers] == \
            [mask_phys(rec) for qo, rec, _ in expected if qo >= first_kept]
        assert s.tier.get_message("TierT", 0, first_kept - 1, 5, None, False, 200) is None
        rep = tier_report(s.tier.tcfg, verify=True)
        assert rep["ok"], rep["problems"]
        assert rep["queues"][0]["minOffset"] == first_kept
    with MessageStore(store_cfg(tmp_path, tier=tier_cfg(tmp_path / "tier"))) as s:
        assert s.tier.bounds("TierT", 0) == (first_kept, 200)  # after a restart too


def source_of(store, offset, tier_rows):
    """'tier' or 'local': PHYSICALOFFSET of the record returned at ``offset`` is the flat
    offset in the tier or the local CommitLog offset."""
    r = store.get_message("g", "TierT", 1, offset, 1, decode=False)
    if r.status != GetStatus.FOUND:
        return None
    phys = int.from_bytes(bytes(r.buffers[0])[28:36], "big")
    local = store.read_consume_queue("TierT", 1, offset, 1)
    flat = tier_rows[offset][1]
    assert flat != (local[0][0] if local else None)
    return "tier" if phys == flat else "local" if local and phys == local[0][0] else "?"


@pytest.mark.parametrize("level,ratio,intact,gone", [
    ("DISABLE", 40, "local", None),
    ("NOT_IN_DISK", 40, "local", "tier"),
    ("NOT_IN_MEM", 0, "tier", "tier"),  # ratio 0: nothing counts as in memory
    ("NOT_IN_MEM", 100, "local", "tier"),
    ("FORCE", 40, "tier", "tier"),
])
def test_storage_level_decides_who_serves(tmp_path, level, ratio, intact, gone):
    cfg = store_cfg(tmp_path, tier=tier_cfg(tmp_path / "tier", storage_level=level),
                    access_message_in_memory_max_ratio=ratio, file_reserved_time=0)
    with MessageStore(cfg) as s:
        put(s, 200, queues=2)  # queue 1: its flat offsets differ from its local ones
        assert s.tier.wait_caught_up(30)
        rows, _, _ = tier_queue(str(tmp_path / "tier"), CLUSTER, BROKER, "TierT", 1)
        for off in (0, 90):
            assert source_of(s, off, rows) == intact
        assert s.clean_expired_files(force=True) > 0  # the local head goes
        assert s.cq_table.find("TierT", 1).min_offset_in_queue() > 0
        assert source_of(s, 0, rows) == gone
        assert s.get_min_offset_in_queue("TierT", 1) == (0 if gone else
                                                        s.cq_table.find("TierT", 1).min_offset_in_queue())


def test_storage_level_keys():
    conf = {"tieredStoreFilePath": "/x", "tieredStorageLevel": "2"}
    assert TierConfig.from_conf(conf).storage_level == "NOT_IN_MEM"
    assert TierConfig.from_conf(dict(conf, tieredStorageLevel="FORCE")).storage_level == "FORCE"
    with pytest.raises(ValueError, match="tieredStorageLevel"):
        TierConfig.from_conf(dict(conf, tieredStorageLevel="SOMETIMES"))


def test_emptied_tier_is_reported_never_started_over(tmp_path):
    import shutil
    cfg = store_cfg(tmp_path)
    with MessageStore(cfg) as s:
        put(s, 40, queues=2)
        assert s.tier.wait_caught_up(30)
    shutil.rmtree(tmp_path / "tier")  # emptied by hand
    with MessageStore(cfg) as s:
        assert s.tier.status()["missing"] == [
            {"topic": "TierT", "queueId": q, "minOffset": 0, "maxOffset": 20} for q in (0, 1)]
        assert "no files in the tier" in s.tier.status()["error"]
        put(s, 10, start=40, queues=2)  # sends go on
        s.tier.upload_round(force=True)
        assert not (tmp_path / "tier").exists() or not list((tmp_path / "tier").rglob("TierT"))
    with MessageStore(cfg) as s:  # still reported after a restart (the metadata keeps them)
        assert len(s.tier.status()["missing"]) == 2
    os.unlink(tmp_path / "store" / "config" / "tieredStoreMetadata.json")  # the operator decides
    with MessageStore(cfg) as s:
        assert s.tier.status()["missing"] == [] and s.tier.wait_caught_up(30)
        assert s.tier.bounds("TierT", 0) == (0, 25)


def test_per_topic_reserved_time(tmp_path):
    """tieredStoreTopicReservedTime (ours): a topic kept 1000 hours outlives the broker-wide
    hour; the metadata's reserveTime says so; INDEX segments follow the longest retention."""
    t = tier_cfg(tmp_path / "tier", file_reserved_time=1, topic_reserved_time="Keep:1000",
                 index_max_hash_slot_num=16)
    with MessageStore(store_cfg(tmp_path, tier=t)) as s:
        put(s, 150, queues=1)
        put(s, 150, queues=1, topic="Keep")
        assert s.tier.wait_caught_up(30) and s.tier.seal_index()
        before = {tp: s.tier.bounds(tp, 0) for tp in ("TierT", "Keep")}
        assert s.tier.clean_now(int(time.time() * 1000) + 2 * HOUR) > 0
        assert s.tier.bounds("TierT", 0)[0] > 0 and s.tier.bounds("Keep", 0) == before["Keep"]
        assert s.tier.index.segs  # kept for Keep's 1000 hours
        meta = json.load(open(tmp_path / "store" / "config" / "tieredStoreMetadata.json"))
        assert meta["topicMetadataTable"]["Keep"]["reserveTime"] == 1000
        assert meta["topicMetadataTable"]["TierT"]["reserveTime"] == -1
        assert len(s.query_message("Keep", "k3", 4).messages) == 1
    with pytest.raises(ValueError, match="tieredStoreTopicReservedTime"):
        TierConfig.from_conf({"tieredStoreFilePath": "/x", "tieredStoreTopicReservedTime": "Keep"})
