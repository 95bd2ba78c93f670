"""The tier when the object store misbehaves (a proxy the test steers in front of a real S3
server: connections refused, HTTP 503, stalls, PUTs whose answer is lost), large segments
going up as multipart uploads (damaged records: test_tier_repair.py)."""
from __future__ import annotations

import logging
import os

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.tier.s3 import TierBackendError

from ...s3server import start_s3_server
from .s3proxy import S3Proxy
from .test_tier_store import BROKER as PBROKER, CLUSTER as PCLUSTER, put, store_cfg
from .tierutil import check_queue_matches, local_records, mask_phys, queue_dir, tier_queue

CLUSTER, BROKER = "FaultCluster", "broker-f"


@pytest.fixture
def s3(tmp_path):
    srv = start_s3_server(str(tmp_path / "s3root"))
    proxy = S3Proxy(int(srv.endpoint.rsplit(":", 1)[1]))
    yield srv, proxy
    proxy.close()
    srv.stop()


def cfg_for(tmp_path, srv, proxy, **conf) -> StoreConfig:
    keys = {"tieredBackendServiceProvider": "s3", "tieredStoreFilePath": "p",
            "brokerClusterName": CLUSTER, "brokerName": BROKER,
            # uploads only when the test says (upload_round): no race with the service thread
            "tieredStoreGroupCommitTimeout": "600000", "tieredStoreGroupCommitCount": "1000000",
            "tieredStoreCommitLogMaxSize": "4096", "tieredStoreConsumeQueueMaxSize": "200",
            "objectStoreEndpoint": proxy.endpoint, "objectStoreBucket": "tier",
            "objectStoreAccessKey": srv.access_key, "objectStoreSecretKey": srv.secret_key,
            "objectStoreRequestTimeout": "2", "objectStoreMaxAttempts": "3"}
    keys.update(conf)
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=8192,
                       mapped_file_size_consume_queue=400, tier=TierConfig.from_conf(keys),
                       timer_wheel_enable=False)


def send(store, n, start):
    for i in range(start, start + n):
        r = store.put_message(Message("FaultT", b"f-%05d-" % i + b"z" * (i % 41), keys=f"k{i}",
                                      queue_id=i % 2))
        assert r.ok, r  # the local store takes every send, whatever the object store does
    assert store.wait_dispatched(10)


@pytest.mark.parametrize("mode", ["refuse", "error", "stall", "lose_put", "lose_later_put"])
def test_misbehaving_object_store_no_gap_no_duplicate(tmp_path, s3, mode, caplog):
    srv, proxy = s3
    caplog.set_level(logging.DEBUG)
    root = os.path.join(srv.root, "tier", "p")
    with MessageStore(cfg_for(tmp_path, srv, proxy)) as s:
        send(s, 40, 0)
        assert s.tier.upload_round(force=True) == 40
        proxy.set(mode)
        send(s, 30, 40)
        with pytest.raises(TierBackendError, match=r"failed 3 time\(s\)") as err:
            s.tier.upload_round(force=True)
        if mode.startswith("lose_"):
            assert proxy.lost_puts >= 3  # the same PUT, done upstream each time
        send(s, 10, 70)  # still accepted
        proxy.set("pass")
        assert s.tier.wait_caught_up(30)
        for q in (0, 1):
            check_queue_matches(root, CLUSTER, BROKER, s, "FaultT", q, expect_count=40)
        assert len(s.query_message("FaultT", "k55", 4).messages) == 1
        s.tier.seal_index()
    text = caplog.text + str(err.value)
    assert "object store" in str(err.value)
    assert srv.secret_key not in text and srv.access_key not in text
    with MessageStore(cfg_for(tmp_path, srv, proxy)) as s:  # and after a restart
        for q in (0, 1):
            check_queue_matches(root, CLUSTER, BROKER, s, "FaultT", q, expect_count=40)


def test_large_segment_goes_up_as_a_multipart_upload(tmp_path, s3):
    srv, proxy = s3
    cfg = cfg_for(tmp_path, srv, proxy, tieredStoreCommitLogMaxSize=str(64 << 20))
    cfg = cfg.replace(mapped_file_size_commitlog=32 << 20)
    with MessageStore(cfg) as s:
        for i in range(12):  # 12 MiB in one append: above pyarrow's 10 MiB part size
            assert s.put_message(Message("BigT", bytes([65 + i]) * (1 << 20), queue_id=0)).ok
        assert s.wait_dispatched(10)
        assert s.tier.upload_round(force=True) == 12
        check_queue_matches(os.path.join(srv.root, "tier", "p"), CLUSTER, BROKER, s, "BigT", 0,
                            expect_count=12)
    assert any(r.startswith("POST ") and "uploads" in r for r in proxy.requests), proxy.requests
    assert any(r.startswith("PUT ") and "partNumber=2" in r for r in proxy.requests)


def test_s3_segments_are_capped_at_64_mib():
    """An append rewrites the object on S3: a 1 GiB COMMIT_LOG segment there would be rewritten
    whole on every append, so S3 segments stop at 64 MiB (posix keeps the configured size)."""
    from rocketstore.store.tier.service import segment_sizes
    big = dict(commitlog_max_size=1 << 30, consume_queue_max_size=100 << 20)
    assert segment_sizes(TierConfig(backend="s3", object_store_bucket="b", **big)) == \
        (64 << 20, 64 << 20)
    assert segment_sizes(TierConfig(file_path="/t", **big)) == (1 << 30, 100 << 20)
    assert segment_sizes(TierConfig(backend="s3", object_store_bucket="b", commitlog_max_size=4096,
                                    consume_queue_max_size=200)) == (4096, 200)


def test_read_ahead_serves_sequential_pulls_with_fewer_requests(tmp_path, s3):
    """readAheadCacheEnable: pulls of 8 from the bucket, counted at the proxy — the same
    records with read-ahead on and off, and far fewer object store requests with it on."""
    srv, proxy = s3
    got, requests = {}, {}
    for ahead in ("false", "true"):
        cfg = cfg_for(tmp_path, srv, proxy, readAheadCacheEnable=ahead)
        cfg = cfg.replace(file_reserved_time=0)
        with MessageStore(cfg) as s:
            if ahead == "false":
                send(s, 200, 0)
                assert s.tier.upload_round(force=True) == 200
                want = [r for _, r, _ in local_records(s, "FaultT", 0)]
                assert s.clean_expired_files(force=True) > 0
            assert s.cq_table.find("FaultT", 0).min_offset_in_queue() > 0  # pulls hit the tier
            before = len(proxy.requests)
            out, at = [], 0
            while at < 100:
                r = s.get_message("g", "FaultT", 0, at, 8, decode=False)
                assert r.buffers
                out += [bytes(b) for b in r.buffers]
                at = r.next_begin_offset
            requests[ahead] = len(proxy.requests) - before
            got[ahead] = out
    assert got["true"] == got["false"] and len(got["true"]) == 100
    assert [mask_phys(x) for x in got["true"]] == [mask_phys(x) for x in want]
    # (tiny segments here: each read is a HEAD and a GET per segment either way)
    assert requests["true"] * 2 < requests["false"], requests
