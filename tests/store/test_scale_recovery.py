"""Recovery touches only what it needs, and still finds every queue's end by RocketMQ's rule.

A ConsumeQueue (and, now, a CommitLog segment) is a sparse file of its full logical length:
recovery reads only the parts that may hold data (``SEEK_DATA``/``SEEK_HOLE``), so reopening
many one-message queues maps a page per queue, not the file's 5.7 MiB of holes. The unit rule
stays RocketMQ's (``offset >= 0`` and ``size > 0``; the first invalid unit ends the queue, and
valid units after it are damage that dispatch rebuilds from the CommitLog). Expected answers come
from what was put (or, for the RocketMQ-written store, from RocketMQ's own manifest)."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.consume_queue import queue_dir
from tests.conftest import fixture_config, small_config
from tests.store.test_rocketmq_fixture import _check_queues, _check_records

UNIT = 20


def _rss_file_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    return 0


def _cq_file(cfg: StoreConfig, topic: str, qid: int, index: int = -1) -> str:
    d = queue_dir(cfg.consume_queue_dir, topic, qid)
    return os.path.join(d, sorted(os.listdir(d))[index])


def _zero(path: str, pos: int, n: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(n), pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def _punch_hole(path: str, pos: int, n: int) -> bool:
    """Deallocate ``[pos, pos + n)`` (it reads as zeros after); False where the file system
    cannot (then the caller writes zeros instead)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    try:
        if libc.fallocate(fd, 0x02 | 0x01, pos, n) != 0:  # PUNCH_HOLE | KEEP_SIZE
            assert ctypes.get_errno() in (errno.EOPNOTSUPP, errno.ENOSYS), ctypes.get_errno()
            return False
        os.fsync(fd)
        return True
    finally:
        os.close(fd)


def _bodies(store, topic: str, qid: int) -> list[bytes]:
    out, off = [], store.get_min_offset_in_queue(topic, qid)
    hi = store.get_max_offset_in_queue(topic, qid)
    while off < hi:
        got = store.get_message("G", topic, qid, off, 32)
        assert got.messages, (topic, qid, off, got.status)
        out.extend(m.body for m in got.messages)
        off = got.next_begin_offset
    return out


def _put(store, topic: str, qid: int, bodies: list[bytes]) -> None:
    for b in bodies:
        assert store.put_message(Message(topic=topic, body=b, queue_id=qid)).ok


def test_commitlog_segment_is_sparse_with_its_full_length(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "s"))  # default 1 GiB segments
    with MessageStore(cfg) as store:
        assert store.put_message(Message(topic="T", body=b"x" * 1024)).ok
    seg = os.path.join(cfg.commitlog_dir, "00000000000000000000")
    assert os.path.getsize(seg) == 1 << 30  # the length RocketMQ checks when it loads
    assert os.stat(seg).st_blocks * 512 <= 1 << 20
    with MessageStore(cfg) as store:  # reopen and append behind the holes
        assert store.put_message(Message(topic="T", body=b"y")).ok
        assert store.wait_dispatched(10)
        assert _bodies(store, "T", 0) == [b"x" * 1024, b"y"]


def test_reopen_maps_a_page_per_one_message_queue_not_its_file(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "s"))  # 5.7 MiB ConsumeQueue files
    with MessageStore(cfg) as store:
        for i in range(200):
            _put(store, f"T{i // 8}", i % 8, [f"m{i}".encode()])
        assert store.wait_dispatched(10)
    before = _rss_file_kib()
    with MessageStore(cfg) as store:
        grown = _rss_file_kib() - before
        assert store.recovery_report.cq_units_dropped == {}
        assert _bodies(store, "T3", 5) == [b"m29"]
    # every file read to its end would be 200 x 5.7 MiB + the 1 GiB segment
    assert grown < 64 * 1024, f"{grown} KiB of file pages mapped by the reopen"


@pytest.mark.parametrize("tear", ["size-and-tags-zero", "file-cut-mid-unit"])
@pytest.mark.parametrize("abort", [False, True])
def test_torn_last_unit_is_rebuilt(tmp_path, tear, abort):
    cfg = small_config(tmp_path / "s")
    want0 = [f"a{i}".encode() for i in range(5)]
    want1 = [f"b{i}".encode() for i in range(5)]
    with MessageStore(cfg) as store:
        _put(store, "T", 0, want0)
        _put(store, "T", 1, want1)  # a later queue: the reput restart is not simply queue 0's end
        assert store.wait_dispatched(10)
    path = _cq_file(cfg, "T", 0)
    if tear == "size-and-tags-zero":
        _zero(path, 4 * UNIT + 8, 12)  # the offset reached the disk, size and tagsCode did not
    else:
        os.truncate(path, 4 * UNIT + 7)
    if abort:
        open(os.path.join(cfg.store_path_root_dir, "abort"), "w").close()
    with MessageStore(cfg) as store:
        assert store.wait_dispatched(10)
        assert _bodies(store, "T", 0) == want0
        assert _bodies(store, "T", 1) == want1
        assert store.put_message(Message(topic="T", body=b"a5", queue_id=0)).queue_offset == 5


def test_hole_in_the_middle_is_damage_and_rebuilt(tmp_path):
    cfg = small_config(tmp_path / "s", mapped_file_size_consume_queue=UNIT * 1000)
    want = [f"m{i}".encode() for i in range(600)]  # units 0..599: pages 0, 1 and 2 of the file
    with MessageStore(cfg) as store:
        _put(store, "T", 0, want)
        assert store.wait_dispatched(10)
    path = _cq_file(cfg, "T", 0)
    if not _punch_hole(path, 4096, 4096):
        _zero(path, 4096, 4096)
    with MessageStore(cfg) as store:
        # unit 204 spans the hole's start: its offset and size survive (tagsCode 0 either way),
        # unit 205 is the first zero unit; the valid units after it are counted as damage
        dropped = store.recovery_report.cq_units_dropped.get("T/0", 0)
        assert dropped >= 600 - (8192 // UNIT + 1), store.recovery_report.summary()
        assert store.wait_dispatched(10)
        assert _bodies(store, "T", 0) == want


def test_queue_spanning_several_files(tmp_path):
    cfg = small_config(tmp_path / "s", mapped_file_size_consume_queue=UNIT * 10)
    want = [f"m{i}".encode() for i in range(35)]
    with MessageStore(cfg) as store:
        _put(store, "T", 0, want)
        _put(store, "T", 1, [b"other"])
        assert store.wait_dispatched(10)
    assert len(os.listdir(queue_dir(cfg.consume_queue_dir, "T", 0))) == 4
    with MessageStore(cfg) as store:  # clean: nothing dropped, the end is unit 35
        assert store.recovery_report.cq_units_dropped == {}
        assert store.get_max_offset_in_queue("T", 0) == 35
        assert _bodies(store, "T", 0) == want
    # the last file's units all lost (zeros, as after a crash before its pages were written)
    _zero(_cq_file(cfg, "T", 0), 0, UNIT * 10)
    open(os.path.join(cfg.store_path_root_dir, "abort"), "w").close()
    with MessageStore(cfg) as store:
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue("T", 0) == 35
        assert _bodies(store, "T", 0) == want
        assert _bodies(store, "T", 1) == [b"other"]


def test_rocketmq_written_store_with_torn_queue_tails(rocketmq_store, rocketmq_manifest):
    """RocketMQ 4.9.7's own store, every queue's last unit torn and one queue holed in the
    middle: the reopen rebuilds them, and every answer is RocketMQ's again."""
    root = rocketmq_store[0]
    cfg = fixture_config(root, rocketmq_manifest)
    torn = 0
    for q in rocketmq_manifest["queues"]:
        if q["maxOffset"] <= q["minOffset"]:
            continue
        d = queue_dir(cfg.consume_queue_dir, q["topic"], q["queueId"])
        last = (q["maxOffset"] - 1) * UNIT
        path = os.path.join(d, f"{last - last % cfg.cq_file_size:020d}")
        pos = last % cfg.cq_file_size
        _zero(path, pos + 8, 12)
        if torn == 0 and q["maxOffset"] - q["minOffset"] >= 3 and pos >= 2 * UNIT:
            _zero(path, pos - 2 * UNIT, UNIT)  # and a unit before it: a hole in the middle
        torn += 1
    assert torn >= 3
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert len(report.cq_units_dropped) == 1 and len(report.cq_behind) == torn, report
        assert store.wait_dispatched(10)
        _check_records(store, rocketmq_manifest)
        _check_queues(store, rocketmq_manifest)
