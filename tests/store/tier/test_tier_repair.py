"""Damage in the tier, made for real (bytes flipped in a posix tier file, or in the file behind
an S3 object so its stored checksum no longer holds): mended from the local CommitLog while it
holds the records, otherwise kept aside under ``quarantine/``, reported, and skipped by pulls as
RocketMQ skips a record it cannot read."""
from __future__ import annotations

import glob
import json
import os

import pytest

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message, decode_message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus

from ...s3server import start_s3_server
from .test_tier_cli import cli
from .test_tier_store import BROKER, CLUSTER, tier_cfg
from .tierutil import check_queue_matches, queue_dir, tier_queue

TOPIC = "RepT"


def body(i: int) -> bytes:
    return b"body-%05d-" % i + b"x" * (i % 37)


def send(store, n, start=0):
    for i in range(start, start + n):
        assert store.put_message(Message(TOPIC, body(i), tags=f"t{i % 3}", queue_id=0)).ok
    assert store.wait_dispatched(10)


def posix_cfg(tmp_path, **tier) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=8192,
                       mapped_file_size_consume_queue=400, timer_wheel_enable=False,
                       file_reserved_time=0, tier=tier_cfg(tmp_path / "tier", **tier))


def flip_body_byte(tier_base, cluster, broker, qo) -> tuple[str, bytes]:
    """Flip one byte inside queue offset ``qo``'s body in the flat COMMIT_LOG; returns the
    segment file and its bytes after the flip."""
    rows, _, _ = tier_queue(tier_base, cluster, broker, TOPIC, 0)
    _, phy, rec, _ = rows[qo]
    cl_dir = os.path.join(queue_dir(tier_base, cluster, broker, TOPIC, 0), "COMMIT_LOG")
    base, name = [x for x in sorted((int(n[8:]), n) for n in os.listdir(cl_dir)) if x[0] <= phy][-1]
    at = phy - base + rec.find(body(qo)) + 3
    assert rec.find(body(qo)) > 0
    path = os.path.join(cl_dir, name)
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0xFF]))
    with open(path, "rb") as fh:
        return path, fh.read()


def pull_all(store, start=0, end=100):
    """Every body a consumer gets from ``start`` (following next_begin_offset)."""
    got, at = [], start
    while at < end:
        r = store.get_message("g", TOPIC, 0, at, 16)
        assert r.status in (GetStatus.FOUND, GetStatus.MESSAGE_WAS_REMOVING), r.status
        got += [(m.queue_offset, m.body) for m in r.messages]
        assert r.next_begin_offset > at
        at = r.next_begin_offset
    return got


def truncate_segment_of(tier_base, cluster, broker, qo) -> int:
    """Cut the COMMIT_LOG segment holding ``qo``'s record just inside that record; returns how
    many of the queue's records lost bytes (that one and those after it in the segment)."""
    rows, _, _ = tier_queue(tier_base, cluster, broker, TOPIC, 0)
    _, phy, rec, _ = rows[qo]
    cl_dir = os.path.join(queue_dir(tier_base, cluster, broker, TOPIC, 0), "COMMIT_LOG")
    segs = sorted((int(n[8:]), n) for n in os.listdir(cl_dir))
    i = max(k for k, (base, _) in enumerate(segs) if base <= phy)
    assert i + 1 < len(segs), "a sealed segment"
    (base, name), end = segs[i], segs[i + 1][0]
    os.truncate(os.path.join(cl_dir, name), phy - base + len(rec) // 2)
    return sum(1 for _, p, _, _ in rows if phy <= p < end)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_posix_damage_with_local_bytes_is_rewritten_from_them(tmp_path, damage):
    cfg = posix_cfg(tmp_path, storage_level="FORCE")  # every pull reads the tier
    tier = str(tmp_path / "tier")
    with MessageStore(cfg) as s:
        send(s, 100)
        assert s.tier.wait_caught_up(30)
        if damage == "flip":
            flip_body_byte(tier, CLUSTER, BROKER, 7)
            hurt = 1
        else:
            hurt = truncate_segment_of(tier, CLUSTER, BROKER, 7)
            assert hurt >= 1
        assert pull_all(s) == [(i, body(i)) for i in range(100)]
        assert s.tier.metrics()["repaired_records"] == hurt
        check_queue_matches(tier, CLUSTER, BROKER, s, TOPIC, 0, expect_count=100)
    assert not os.path.exists(os.path.join(tier, "quarantine"))
    r = cli("verify", "--store", str(tmp_path / "store"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_posix_damage_without_local_bytes_is_kept_aside_and_skipped(tmp_path):
    cfg = posix_cfg(tmp_path)
    tier = str(tmp_path / "tier")
    with MessageStore(cfg) as s:
        send(s, 100)
        assert s.tier.wait_caught_up(30)
    seg, damaged = flip_body_byte(tier, CLUSTER, BROKER, 7)
    with MessageStore(cfg) as s:
        assert s.clean_expired_files(force=True) > 0
        assert s.cq_table.find(TOPIC, 0).min_offset_in_queue() > 7  # only the tier has it
        r = s.get_message("g", TOPIC, 0, 7, 1)  # RocketMQ's answer for an unreadable record
        assert (r.status, r.buffers, r.next_begin_offset) == (GetStatus.MESSAGE_WAS_REMOVING, [], 8)
        assert pull_all(s) == [(i, body(i)) for i in range(100) if i != 7]
        st = s.tier.status()
        assert [(d["topic"], d["queueId"], d["queueOffsets"]) for d in st["damaged"]] == \
            [(TOPIC, 0, [7])]
    with open(seg, "rb") as fh:
        assert fh.read() == damaged  # the original stays where it was
    kept = glob.glob(os.path.join(tier, "quarantine", "**", "COMMIT_LOG", "*"), recursive=True)
    copies = [k for k in kept if not k.endswith(".json")]
    assert len(copies) == 1 and open(copies[0], "rb").read() == damaged
    manifest = json.load(open(copies[0] + ".json"))
    assert (manifest["topic"], manifest["queueId"], manifest["queueOffsets"]) == (TOPIC, 0, [7])
    with MessageStore(cfg) as s:  # after a restart: still known, not copied again
        assert pull_all(s) == [(i, body(i)) for i in range(100) if i != 7]
    assert len(glob.glob(os.path.join(tier, "quarantine", "**", "*.json"), recursive=True)) == 1
    for cmd in ("status", "verify"):
        r = cli(cmd, "--store", str(tmp_path / "store"), "--json")
        doc = json.loads(r.stdout)
        assert [(d["topic"], d["queueOffsets"], d["quarantine"]) for d in doc["damaged"]] == \
            [(TOPIC, [7], manifest["quarantine"])]
        assert r.returncode == (1 if cmd == "verify" else 0)
    assert any("queue offset 7" in p for p in doc["problems"]), doc["problems"]


# -- S3: the bytes behind an object flipped, so its stored whole-object checksum fails ----------

@pytest.fixture
def s3(tmp_path):
    srv = start_s3_server(str(tmp_path / "s3root"))
    yield srv
    srv.stop()


def s3_cfg(tmp_path, srv) -> StoreConfig:
    keys = {"tieredBackendServiceProvider": "s3", "tieredStoreFilePath": "p",
            "brokerClusterName": "RepCluster", "brokerName": "broker-r",
            "tieredStoreGroupCommitTimeout": "600000", "tieredStoreGroupCommitCount": "1000000",
            "tieredStoreCommitLogMaxSize": "4096", "tieredStoreConsumeQueueMaxSize": "200",
            "objectStoreEndpoint": srv.endpoint, "objectStoreBucket": "tier",
            "objectStoreAccessKey": srv.access_key, "objectStoreSecretKey": srv.secret_key,
            "objectStoreMaxAttempts": "2"}
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=8192,
                       mapped_file_size_consume_queue=400, tier=TierConfig.from_conf(keys),
                       timer_wheel_enable=False, file_reserved_time=0)


def last_segment_qo(tier_base, cluster, broker) -> int:
    """A queue offset whose record lies in the last (open) COMMIT_LOG segment."""
    rows, _, _ = tier_queue(tier_base, cluster, broker, TOPIC, 0)
    cl_dir = os.path.join(queue_dir(tier_base, cluster, broker, TOPIC, 0), "COMMIT_LOG")
    last = max(int(n[8:]) for n in os.listdir(cl_dir))
    return next(qo for qo, phy, _, _ in rows if phy >= last)


def test_s3_object_failing_its_checksum_is_rewritten_from_local_bytes(tmp_path, s3):
    tier = os.path.join(s3.root, "tier", "p")
    with MessageStore(s3_cfg(tmp_path, s3)) as s:
        send(s, 60)
        assert s.tier.upload_round(force=True) == 60
        qo = last_segment_qo(tier, "RepCluster", "broker-r")
        flip_body_byte(tier, "RepCluster", "broker-r", qo)  # behind the server's back
        send(s, 20, 60)
        # appending rewrites the open segment: its GET fails the object's checksum, the
        # segment is mended from the local CommitLog and the upload goes on
        assert s.tier.upload_round(force=True) == 20
        assert s.tier.metrics()["repaired_records"] == 1
        check_queue_matches(tier, "RepCluster", "broker-r", s, TOPIC, 0, expect_count=80)
        assert s.tier.verify_and_repair() == {}


def test_s3_damage_without_local_bytes_is_kept_aside_and_skipped(tmp_path, s3):
    tier = os.path.join(s3.root, "tier", "p")
    cfg = s3_cfg(tmp_path, s3)
    with MessageStore(cfg) as s:
        send(s, 100)
        assert s.tier.upload_round(force=True) == 100
        assert s.clean_expired_files(force=True) > 0
        lmin = s.cq_table.find(TOPIC, 0).min_offset_in_queue()
        assert lmin > 10
        seg, damaged = flip_body_byte(tier, "RepCluster", "broker-r", 5)
        assert s.tier.verify_and_repair() == {f"broker-r/{TOPIC}/0": ([], [5])}
        assert pull_all(s) == [(i, body(i)) for i in range(100) if i != 5]
        st = s.tier.status()
        assert [(d["topic"], d["queueOffsets"]) for d in st["damaged"]] == [(TOPIC, [5])]
    copies = [p for p in glob.glob(os.path.join(tier, "quarantine", "**", "*"), recursive=True)
              if os.path.isfile(p) and not p.endswith(".json")]
    assert len(copies) == 1 and open(copies[0], "rb").read() == damaged
    with open(seg, "rb") as fh:
        assert fh.read() == damaged  # rewritten with its own bytes: only its checksum is new


def test_tier_verify_repair_mends_from_the_stopped_store(tmp_path):
    cfg = posix_cfg(tmp_path)
    tier, store = str(tmp_path / "tier"), str(tmp_path / "store")
    with MessageStore(cfg) as s:
        send(s, 60)
        assert s.tier.wait_caught_up(30)
    flip_body_byte(tier, CLUSTER, BROKER, 12)
    r = cli("verify", "--store", store)
    assert r.returncode == 1 and "queue offset 12" in r.stdout, r.stdout + r.stderr
    r = cli("verify", "--store", store, "--repair")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 record(s) rewritten from the local CommitLog, 0 beyond repair" in r.stdout
    with MessageStore(cfg) as s:
        check_queue_matches(tier, CLUSTER, BROKER, s, TOPIC, 0, expect_count=60)
