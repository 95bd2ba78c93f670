"""RocketMQ's ``DefaultMessageStoreCleanFilesTest``, ported (reference §8.3).

55 one-message CommitLog segments of 128 bytes (one 120-byte record + an 8-byte blank), 7 CQ
units per 140-byte ConsumeQueue file, 7 index entries per index file (max_index_num 8); rounds
of at most 10 deletions. The clock and the disk usage are injected, so the rounds are exact.
"""
from __future__ import annotations

import os
import time

import pytest

from rocketstore.format.message import Message
from rocketstore.store.clean import is_time_to_delete
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus, PutStatus

from .helpers import commitlog_files, cq_files, index_files, small_config

TOPIC = "test"
MSG_COUNT = 55
EXPIRED = 15


def _other_hour(now: float) -> str:
    return f"{(time.localtime(now).tm_hour + 12) % 24:02d}"


def _open(tmp_path, now: float, usage: float, **kw):
    root = tmp_path / "store"
    cfg = small_config(root, mapped_file_size_commitlog=128, mapped_file_size_consume_queue=128,
                       max_hash_slot_num=100, max_index_num=8, file_reserved_time=1,
                       generate_uniq_key=False, **{"delete_when": _other_hour(now), **kw})
    store = MessageStore(cfg)
    store.clean_service.stop()  # rounds are driven by the test
    store.clean_service.clock = lambda: now
    store.clean_service.disk_usage = lambda path: usage
    for i in range(MSG_COUNT):
        r = store.put_message(Message(topic=TOPIC, body=b"x" * 14, keys=["hello"]))
        assert r.status is PutStatus.PUT_OK and r.wrote_bytes == 120, r
        assert r.wrote_offset == 128 * i
    assert store.wait_dispatched(10)
    store.index_service.flush()
    assert len(commitlog_files(root)) == MSG_COUNT
    assert len(cq_files(root, TOPIC)) == 8
    assert len(index_files(root)) == 8
    expire_time = now - 2 * 3600
    for name in commitlog_files(root)[:EXPIRED]:
        os.utime(root / "commitlog" / name, (expire_time, expire_time))
    return store, root


def _check_counts(root, deleted):
    assert len(commitlog_files(root)) == MSG_COUNT - deleted
    assert len(cq_files(root, TOPIC)) == 8 - deleted // 7
    assert len(index_files(root)) == 8 - deleted // 7


def _expired_rounds(store, root, run):
    deleted = 0
    for expect in (10, 5, 0, 0):
        assert run() == expect
        deleted += expect
        _check_counts(root, deleted)
    assert deleted == EXPIRED
    # what is left reads fine; what is gone is OFFSET_TOO_SMALL, never an exception
    assert store.get_min_phy_offset() == 128 * EXPIRED
    assert store.get_min_offset_in_queue(TOPIC, 0) == EXPIRED
    g = store.get_message("g", TOPIC, 0, 0, 32)
    assert g.status is GetStatus.OFFSET_TOO_SMALL and g.next_begin_offset == EXPIRED
    g = store.get_message("g", TOPIC, 0, EXPIRED, 32)
    assert g.status is GetStatus.FOUND and g.messages[0].commitlog_offset == 128 * EXPIRED
    got = store.query_message(TOPIC, "hello", max_num=64).messages
    assert sorted(m.queue_offset for m in got) == list(range(EXPIRED, MSG_COUNT))


def test_delete_expired_files_by_time_up(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.0)
    try:
        store.cfg.delete_when = time.strftime("%H", time.localtime(now))
        _expired_rounds(store, root, store.clean_service.run_once)
    finally:
        store.shutdown()


def test_delete_expired_files_by_space_full(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.5, disk_max_used_space_ratio=1)
    try:
        _expired_rounds(store, root, store.clean_service.run_once)
        assert store.put_path.writeable  # 50 % is under the 85 % line
    finally:
        store.shutdown()


def test_delete_expired_files_manually(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.0)
    try:
        assert store.clean_service.run_once() == 0  # not the hour, no pressure: nothing
        _expired_rounds(store, root, lambda: store.clean_expired_files(force=True))
    finally:
        store.shutdown()


def test_manual_request_runs_rounds(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.0)
    try:
        store.clean_service.request_manual_delete(2)
        assert store.clean_service.run_once() == 10
        assert store.clean_service.run_once() == 5
        assert store.clean_service.run_once() == 0  # the two manual rounds are used up
        _check_counts(root, EXPIRED)
    finally:
        store.shutdown()


def test_delete_files_immediately_by_space_full(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.5, disk_max_used_space_ratio=1,
                        disk_space_clean_forcibly_ratio=1)
    try:
        deleted = 0
        for expect in (10, 10, 10, 10, 10, 4, 0):
            assert store.clean_service.run_once() == expect
            deleted += expect
            _check_counts(root, deleted)
        assert len(commitlog_files(root)) == 1  # never the last segment
        assert store.get_min_offset_in_queue(TOPIC, 0) == MSG_COUNT - 1
        r = store.put_message(Message(topic=TOPIC, body=b"x" * 14, keys=["hello"]))
        assert r.ok and r.queue_offset == MSG_COUNT
    finally:
        store.shutdown()


def test_reader_of_removed_range_gets_message_was_removing(tmp_path):
    """Between the CommitLog deletion and the ConsumeQueue correction a reader sees units whose
    records are gone: MESSAGE_WAS_REMOVING, not an exception."""
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.0)
    try:
        assert store.clean_service.delete_commitlog_files(manual=True) == 10
        g = store.get_message("g", TOPIC, 0, 0, 32)
        assert g.status is GetStatus.MESSAGE_WAS_REMOVING
        g = store.get_message("g", TOPIC, 0, 10, 32)
        assert g.status is GetStatus.FOUND and g.messages[0].queue_offset == 10
        assert store.look_message_by_offset(0) is None
        store.clean_service.delete_logic_files()
        assert store.get_message("g", TOPIC, 0, 0, 32).status is GetStatus.OFFSET_TOO_SMALL
    finally:
        store.shutdown()


def test_disk_full_flag_blocks_puts_until_space_returns(tmp_path):
    now = time.time()
    usage = {"v": 0.95}
    store, root = _open(tmp_path, now, usage=0.0)
    store.clean_service.disk_usage = lambda path: usage["v"]
    try:
        store.clean_service.run_once()
        assert store.clean_service.disk_full and not store.put_path.writeable
        r = store.put_message(Message(topic=TOPIC, body=b"y"))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
        # over 90 % also cleans immediately (regardless of age)
        assert len(commitlog_files(root)) == MSG_COUNT - 10
        usage["v"] = 0.87  # between 85 % and 90 %: still not writeable (hysteresis)
        store.clean_service.run_once()
        assert not store.put_path.writeable
        usage["v"] = 0.5
        store.clean_service.run_once()
        assert store.put_path.writeable
        assert store.put_message(Message(topic=TOPIC, body=b"y")).ok
    finally:
        store.shutdown()
    # RocketMQ keeps the abort file when the store was not writeable at shutdown; here it was
    assert not os.path.exists(root / "abort")


def test_shutdown_while_disk_full_keeps_abort(tmp_path):
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.95)
    store.clean_service.run_once()
    assert not store.put_path.writeable
    store.shutdown()
    assert os.path.exists(root / "abort")
    with MessageStore(store.cfg) as again:
        assert not again.recovery_report.normal
        assert again.get_max_offset_in_queue(TOPIC, 0) == MSG_COUNT


@pytest.mark.parametrize("spec,hour,expect", [("04", 4, True), ("04", 5, False),
                                              ("04;16", 16, True), (" 16 ; 4", 4, True)])
def test_is_time_to_delete(spec, hour, expect):
    t = time.mktime((2026, 1, 2, hour, 30, 0, 0, 0, -1))
    assert is_time_to_delete(spec, t) is expect


def test_reopen_after_cleanup_keeps_min_offsets_and_verifies(tmp_path):
    from rocketstore.store.verify import verify_store
    now = time.time()
    store, root = _open(tmp_path, now, usage=0.0)
    cfg = store.cfg
    try:
        assert store.clean_service.run_once(manual=True) == 10
    finally:
        store.shutdown()
    for abnormal in (False, True):
        if abnormal:
            (root / "abort").write_text("1")
        with MessageStore(cfg) as again:
            assert again.recovery_report.normal is (not abnormal)
            assert again.get_min_phy_offset() == 128 * 10
            assert again.get_min_offset_in_queue(TOPIC, 0) == 10
            assert again.get_max_offset_in_queue(TOPIC, 0) == MSG_COUNT
            assert again.get_message("g", TOPIC, 0, 0).status is GetStatus.OFFSET_TOO_SMALL
            g = again.get_message("g", TOPIC, 0, 10)
            assert g.status is GetStatus.FOUND and g.messages[0].commitlog_offset == 1280
        report = verify_store(root, cfg)
        assert report.ok and not report.problems, [str(p) for p in report.problems]
