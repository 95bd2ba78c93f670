"""The S3 tier against a real S3-compatible server on 127.0.0.1 (versitygw, tests/s3server):
the same layout as object keys, reads falling through, recovery from the objects."""
from __future__ import annotations

import glob
import os

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus

from ...s3server import start_s3_server
from .tierutil import check_queue_matches, local_records, mask_phys

CLUSTER, BROKER = "S3Cluster", "broker-s3"


@pytest.fixture
def s3(tmp_path):
    srv = start_s3_server(str(tmp_path / "s3root"))
    yield srv
    srv.stop()


def cfg_for(tmp_path, s3) -> StoreConfig:
    t = TierConfig.from_conf({
        "tieredBackendServiceProvider": "s3", "tieredStoreFilePath": "pre/fix",
        "brokerClusterName": CLUSTER, "brokerName": BROKER, "tieredStoreGroupCommitTimeout": "20",
        "tieredStoreCommitLogMaxSize": "4096", "tieredStoreConsumeQueueMaxSize": "200",
        "objectStoreEndpoint": s3.endpoint, "objectStoreBucket": "tier",
        "objectStoreAccessKey": s3.access_key, "objectStoreSecretKey": s3.secret_key,
        "objectStoreRegion": "us-east-1"})
    assert s3.secret_key not in repr(t) and s3.access_key not in repr(t)
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=8192,
                       mapped_file_size_consume_queue=400, tier=t, timer_wheel_enable=False)


def test_s3_tier_objects_have_the_posix_layout_and_serve_reads(tmp_path, s3):
    cfg = cfg_for(tmp_path, s3)
    with MessageStore(cfg) as s:
        for i in range(120):
            assert s.put_message(Message("S3T", b"s3-%04d" % i + b"q" * (i % 30), tags="a",
                                         queue_id=i % 2)).ok
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
        expected = {q: [rec for _, rec, _ in local_records(s, "S3T", q)] for q in (0, 1)}
        # the objects, read as the server's files: <bucket>/<prefix>/<posix layout>
        for q in (0, 1):
            check_queue_matches(os.path.join(s3.root, "tier", "pre", "fix"), CLUSTER, BROKER, s,
                                "S3T", q, expect_count=60)
    segs = sorted(glob.glob(str(tmp_path / "store" / "commitlog" / "*")))
    for p in segs[:-1]:
        os.unlink(p)
    with MessageStore(cfg) as s:  # reopened: the queues are found again by listing the bucket
        for q in (0, 1):
            assert s.get_min_offset_in_queue("S3T", q) == 0
            got, at = [], 0
            while True:
                r = s.get_message("g", "S3T", q, at, 32, decode=False)
                if r.status != GetStatus.FOUND:
                    break
                got += [bytes(b) for b in r.buffers]
                at = r.next_begin_offset
            assert [mask_phys(g) for g in got] == [mask_phys(e) for e in expected[q]]


def test_s3_credentials_from_the_environment(tmp_path, s3, monkeypatch):
    """No options: AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (what Spark's
    tier source falls back to)."""
    from rocketstore.spark.tier_source import list_tier_segments, open_tier_backend
    with MessageStore(cfg_for(tmp_path, s3)) as s:
        for i in range(20):
            assert s.put_message(Message("S3Env", b"e%d" % i, queue_id=0)).ok
        assert s.wait_dispatched(10) and s.tier.wait_caught_up(30)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
    segs = list_tier_segments(open_tier_backend({"path": "s3://tier/pre/fix"}))
    on_disk = glob.glob(os.path.join(s3.root, "tier", "pre", "fix", "*", BROKER, "S3Env", "0",
                                     "COMMIT_LOG", "*"))
    assert [(s.topic, s.queue_id, s.size) for s in segs if s.topic == "S3Env"] == \
        [("S3Env", 0, os.path.getsize(p)) for p in sorted(on_disk)]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(OSError):
        list_tier_segments(open_tier_backend({"path": "s3://tier/pre/fix"}))
