"""The tiered store fed off the put path: files, metadata, falling through, torn tails."""
from __future__ import annotations

import glob
import json
import os

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message, decode_message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus

from .tierutil import check_queue_matches, local_records, mask_phys, queue_dir

CLUSTER, BROKER = "TierCluster", "broker-t"


def tier_cfg(base, **kw) -> TierConfig:
    kw.setdefault("commitlog_max_size", 4096)
    kw.setdefault("consume_queue_max_size", 200)
    return TierConfig(file_path=str(base), broker_cluster_name=CLUSTER, broker_name=BROKER,
                      group_commit_timeout=20, **kw)


def store_cfg(tmp_path, tier=None, **kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commitlog", 8192)
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_consume_queue=400,
                       tier=tier or tier_cfg(tmp_path / "tier"), timer_wheel_enable=False, **kw)


def put(store, n, start=0, queues=2, topic="TierT"):
    for i in range(start, start + n):
        r = store.put_message(Message(topic, b"body-%05d-" % i + b"x" * (i % 37), tags=f"tag{i % 3}",
                                      keys=f"k{i}", queue_id=i % queues))
        assert r.ok, r
    assert store.wait_dispatched(10)


def test_tier_files_are_the_queue_records_with_flat_offsets(tmp_path):
    with MessageStore(store_cfg(tmp_path)) as s:
        put(s, 120)
        assert s.tier.wait_caught_up(30)
        for qid in (0, 1):
            check_queue_matches(str(tmp_path / "tier"), CLUSTER, BROKER, s, "TierT", qid,
                                expect_count=60)
    qd = queue_dir(str(tmp_path / "tier"), CLUSTER, BROKER, "TierT", 0)
    assert len(os.listdir(os.path.join(qd, "COMMIT_LOG"))) > 1  # rolled at 4096 bytes
    assert sorted(os.listdir(os.path.join(qd, "CONSUME_QUEUE")))  # 10 units a segment
    sizes = sorted(os.path.getsize(p) for p in glob.glob(os.path.join(qd, "CONSUME_QUEUE", "*")))
    assert sizes == [200] * 6  # 60 units, 10 a segment
    meta = json.load(open(tmp_path / "store" / "config" / "tieredStoreMetadata.json"))
    q = meta["queueMetadataTable"]["TierT"]["0"]
    assert (q["minOffset"], q["maxOffset"], q["queue"]) == (
        0, 60, {"brokerName": BROKER, "queueId": 0, "topic": "TierT"})
    path = f"{BROKER}/TierT/0"
    cl = meta["commitLogFileSegmentTable"][path]
    on_disk = {int(os.path.basename(p)[8:]): os.path.getsize(p)
               for p in glob.glob(os.path.join(qd, "COMMIT_LOG", "*"))}
    assert {int(k): v["size"] for k, v in cl.items()} == on_disk
    assert {v["type"] for v in cl.values()} == {0}
    assert set(meta["consumeQueueFileSegmentTable"][path]) == {"0", "200", "400", "600", "800", "1000"}
    assert meta["topicMetadataTable"]["TierT"]["topic"] == "TierT"


def test_queue_that_starts_later_names_its_first_cq_file_for_its_offset(tmp_path):
    """A tier that starts on a queue whose head already left: CONSUME_QUEUE's first file is
    named for first offset * 20 (RocketMQ's FlatMessageFile.initOffset)."""
    cfg = store_cfg(tmp_path, tier=None)
    cfg_plain = cfg.replace(tier=None)
    with MessageStore(cfg_plain) as s:
        put(s, 30, queues=1)
    with MessageStore(cfg) as s:  # the tier switched on later: it copies what is local
        put(s, 10, start=30, queues=1)
        assert s.tier.wait_caught_up(30)
        check_queue_matches(str(tmp_path / "tier"), CLUSTER, BROKER, s, "TierT", 0, expect_count=40)


def test_get_message_falls_through_to_the_tier_after_local_segments_go(tmp_path):
    cfg = store_cfg(tmp_path)
    with MessageStore(cfg) as s:
        put(s, 200)
        expected = {q: [(qo, rec) for qo, rec, _ in local_records(s, "TierT", q)] for q in (0, 1)}
        assert s.tier.wait_caught_up(30)
    segs = sorted(glob.glob(str(tmp_path / "store" / "commitlog" / "*")))
    assert len(segs) > 3
    for p in segs[:-1]:  # removed by hand while stopped
        os.unlink(p)
    with MessageStore(cfg) as s:
        for q in (0, 1):
            # the local store alone cannot serve offset 0 any more
            assert s.cq_table.find("TierT", q).min_offset_in_queue() > 0 or \
                s.commitlog.read_record(s.read_consume_queue("TierT", q, 0, 1)[0][0]) is None
            assert s.get_min_offset_in_queue("TierT", q) == 0
            got, at = [], 0
            while True:
                r = s.get_message("g", "TierT", q, at, 16, decode=False)
                if r.status != GetStatus.FOUND:
                    assert r.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE)
                    break
                got += [bytes(b) for b in r.buffers]
                at = r.next_begin_offset
            assert len(got) == len(expected[q]) == 100
            # the same records: only PHYSICALOFFSET differs for the ones served from the tier
            assert [mask_phys(g) for g in got] == [mask_phys(e) for _, e in expected[q]]
            assert sum(g != e for g, (_, e) in zip(got, expected[q])) > 0
            # a tag subscription is filtered in the tier too
            r = s.get_message("g", "TierT", q, 0, 8, "tag1", decode=True)
            assert r.status == GetStatus.FOUND and {m.tags for m in r.messages} == {"tag1"}
            assert r.messages[0].body == decode_message(expected[q][[decode_message(e, 0).tags for _, e in expected[q]].index("tag1")][1], 0).body


def test_torn_tail_is_cut_and_overwritten_on_open(tmp_path):
    cfg = store_cfg(tmp_path)
    with MessageStore(cfg) as s:
        put(s, 50, queues=1)
        assert s.tier.wait_caught_up(30)
    qd = queue_dir(str(tmp_path / "tier"), CLUSTER, BROKER, "TierT", 0)
    last_cl = sorted(glob.glob(os.path.join(qd, "COMMIT_LOG", "*")), key=lambda p: int(p[-20:]))[-1]
    last_cq = sorted(glob.glob(os.path.join(qd, "CONSUME_QUEUE", "*")), key=lambda p: int(p[-20:]))[-1]
    cl_size = os.path.getsize(last_cl) + int(last_cl[-20:])
    with open(last_cl, "ab") as fh:  # half a record, as a killed upload leaves it
        fh.write(b"\x00\x00\x01\x00" + b"\xda\xa3\x20\xa7" + b"z" * 40)
    with open(last_cq, "ab") as fh:  # a whole unit for that record, then 7 bytes of the next
        fh.write(cl_size.to_bytes(8, "big") + (256).to_bytes(4, "big") + bytes(8) + b"\x01" * 7)
    with MessageStore(cfg) as s:
        assert s.tier.cut_on_recover[f"{BROKER}/TierT/0"] == (48, 27)
        put(s, 30, start=50, queues=1)
        assert s.tier.wait_caught_up(30)
        check_queue_matches(str(tmp_path / "tier"), CLUSTER, BROKER, s, "TierT", 0, expect_count=80)


def test_broker_conf_turns_the_tier_on(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"""brokerClusterName={CLUSTER}
brokerName={BROKER}
storePathRootDir={tmp_path / 'store'}
messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore
tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment
tieredStoreFilePath={tmp_path / 'tier'}
tieredStoreGroupCommitTimeout=50
tieredStoreGroupCommitCount=10
tieredStoreCommitLogMaxSize=4096
""")
    cfg = StoreConfig.from_properties(str(conf))
    t = cfg.tier_config()
    assert (t.backend, t.file_path, t.broker_name, t.group_commit_count) == (
        "posix", str(tmp_path / "tier"), BROKER, 10)
    with MessageStore(cfg.replace(timer_wheel_enable=False)) as s:
        put(s, 20, queues=1)
        assert s.tier.wait_caught_up(30)
        check_queue_matches(str(tmp_path / "tier"), CLUSTER, BROKER, s, "TierT", 0, expect_count=20)
    assert StoreConfig.from_properties(str(conf)).replace(extra={}).tier_config() is None


def test_get_message_falls_through_after_cleanup_removes_segments(tmp_path):
    """The store's own cleanup (expired segments) on a live store: offset 0 from the tier."""
    with MessageStore(store_cfg(tmp_path, file_reserved_time=0)) as s:
        put(s, 200, queues=1)
        expected = [rec for _, rec, _ in local_records(s, "TierT", 0)]
        assert s.tier.wait_caught_up(30)
        assert s.clean_expired_files(force=True) > 0
        assert s.cq_table.find("TierT", 0).min_offset_in_queue() > 0  # local head gone
        got, at = [], 0
        while True:
            r = s.get_message("g", "TierT", 0, at, 32, decode=False)
            if r.status != GetStatus.FOUND:
                break
            got += [bytes(b) for b in r.buffers]
            at = r.next_begin_offset
        assert [mask_phys(g) for g in got] == [mask_phys(e) for e in expected]
