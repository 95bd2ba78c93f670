"""Flush modes (reference §7.5): SYNC group commit, FLUSH_DISK_TIMEOUT, WAIT=false, the ASYNC
least-pages rule and thorough flush, payload-first checkpoint, the abort file at shutdown."""
from __future__ import annotations

import os
import threading

from rocketstore.format.layouts import CHECKPOINT
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import PutStatus

from .helpers import put_n, small_config


def test_sync_put_returns_only_when_durable_and_putters_share_fsyncs(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20)
    threads, per = 16, 40
    errors = []
    with MessageStore(cfg) as store:
        base = store.flush_service.flush_count
        barrier = threading.Barrier(threads)

        def putter(t):
            barrier.wait()
            for i in range(per):
                r = store.put_message(Message(topic="G", body=b"b" * 100, keys=[f"{t}-{i}"], queue_id=t % 4))
                if r.status is not PutStatus.PUT_OK:
                    errors.append(r.status)
                elif store.commitlog.flushed_offset() < r.wrote_offset + r.wrote_bytes:
                    errors.append("returned before durable")

        ts = [threading.Thread(target=putter, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        syncs = store.flush_service.flush_count - base
        total = threads * per
        assert not errors, errors[:5]
        # group commit: concurrent putters are covered by shared syncs
        assert 0 < syncs < total * 0.75, (syncs, total)
        assert store.commitlog.flushed_offset() == store.get_max_phy_offset()


def test_single_putter_one_sync_per_put(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        base = store.flush_service.flush_count
        put_n(store, 20, "G")
        assert store.flush_service.flush_count - base == 20


def test_flush_disk_timeout_and_wait_false(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH", sync_flush_timeout=0)
    with MessageStore(cfg) as store:
        r = store.put_message(Message(topic="T", body=b"late"))
        assert r.status is PutStatus.FLUSH_DISK_TIMEOUT  # written, durability not confirmed in 0 ms
        assert store.look_message_by_offset(r.wrote_offset).body == b"late"
        r2 = store.put_message(Message(topic="T", body=b"nowait", properties={"WAIT": "false"}))
        assert r2.status is PutStatus.PUT_OK  # did not wait at all
        store.flush_service.flush_once()  # SYNC dispatch only reads durable bytes
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("T", 0) == 2


def test_async_least_pages_and_thorough_flush(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="ASYNC_FLUSH", mapped_file_size_commitlog=1 << 20,
                       flush_interval_commitlog=3_600_000, flush_interval_consume_queue=3_600_000)
    now = [1000.0]
    with MessageStore(cfg) as store:
        fs = store.flush_service
        fs.clock = lambda: now[0]
        fs._last_thorough = now[0]
        start = store.commitlog.flushed_offset()
        put_n(store, 10, "A", body=b"x" * 100)  # ~1.7 KiB: fewer than 4 dirty pages
        assert fs.flush_once() == start
        put_n(store, 150, "A", body=b"x" * 100, start=10)  # > 16 KiB dirty
        assert fs.flush_once() == store.get_max_phy_offset()
        assert store.checkpoint.physic_msg_timestamp == store.commitlog.last_store_timestamp()
        put_n(store, 1, "A", start=200)
        assert fs.flush_once() < store.get_max_phy_offset()
        now[0] += 10.0  # flush_commitlog_thorough_interval
        assert fs.flush_once() == store.get_max_phy_offset()


def test_checkpoint_written_after_payload(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="ASYNC_FLUSH",
                       flush_interval_commitlog=3_600_000, flush_interval_consume_queue=3_600_000)
    with MessageStore(cfg) as store:
        rs = put_n(store, 5, "A")
        assert store.wait_dispatched(5)
        path = tmp_path / "s" / "checkpoint"
        on_disk = CHECKPOINT.unpack(path.read_bytes()[:CHECKPOINT.size]) if path.exists() else (0, 0)
        assert on_disk[0] < rs[-1].store_timestamp  # CommitLog not flushed yet
        assert on_disk[1] < rs[-1].store_timestamp  # nor the ConsumeQueues
        store.flush_service.flush_once(thorough=True)
        store.flush_service.flush_logics_once(thorough=True)
        on_disk = CHECKPOINT.unpack(path.read_bytes()[:CHECKPOINT.size])
        assert on_disk[0] == rs[-1].store_timestamp
        assert on_disk[1] == rs[-1].store_timestamp
    assert os.path.getsize(tmp_path / "s" / "checkpoint") == 4096


def test_abort_file_lifecycle_and_kept_when_dispatch_behind(tmp_path):
    root = tmp_path / "s"
    cfg = small_config(root)
    with MessageStore(cfg) as store:
        assert os.path.exists(root / "abort")
        assert open(root / "abort").read() == str(os.getpid())
        put_n(store, 3, "A")
    assert not os.path.exists(root / "abort")
    # dispatch stopped: the new message is behind at shutdown (which waits 10 s for it), so the
    # abort file stays and the next open takes the abnormal path and dispatches it
    with MessageStore(cfg) as store:
        store.reput.stop()
        r = put_n(store, 1, "A", start=10)[0]
        assert store.dispatch_behind_bytes() == r.wrote_bytes
    assert os.path.exists(root / "abort")
    with MessageStore(cfg) as store:
        assert not store.recovery_report.normal
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("A", 0) == 4
        assert store.get_message("g", "A", 0, 3).messages[0].commitlog_offset == r.wrote_offset
    assert not os.path.exists(root / "abort")


def test_sync_error_propagates_and_stops_puts(tmp_path):
    """A failing sync (here: fdatasync on a pipe -> EINVAL, a real OS error) is not swallowed:
    the put that needed it gets FLUSH_DISK_TIMEOUT, later puts SERVICE_NOT_AVAILABLE, the error
    is kept, the abort file stays, and the next open recovers every message."""
    root = tmp_path / "s"
    cfg = small_config(root, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        put_n(store, 5, "E")
        seg = store.commitlog.queue.last()
        r_fd, w_fd = os.pipe()
        real_fd, seg._fd = seg._fd, r_fd
        try:
            r = store.put_message(Message(topic="E", body=b"unsynced", keys=["u"]))
            assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
            assert isinstance(store.flush_service.last_error, OSError)
            r2 = store.put_message(Message(topic="E", body=b"refused"))
            assert r2.status is PutStatus.SERVICE_NOT_AVAILABLE and "flush failed" in r2.error
        finally:
            seg._fd = real_fd
            os.close(r_fd)
            os.close(w_fd)
    assert os.path.exists(root / "abort")
    with MessageStore(cfg) as store:
        assert not store.recovery_report.normal
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("E", 0) == 6  # the unsynced one survived the process
        assert store.query_message("E", "u").messages[0].body == b"unsynced"


def test_consume_queue_least_pages_and_thorough_logics_flush(tmp_path):
    cfg = small_config(tmp_path / "s", flush_interval_commitlog=3_600_000, flush_interval_consume_queue=3_600_000,
                       mapped_file_size_consume_queue=20 * 2000)
    with MessageStore(cfg) as store:
        rs = put_n(store, 10, "Q")  # 200 bytes of units: under 2 dirty pages
        assert store.wait_dispatched(5)
        fs = store.flush_service
        fs.flush_once(thorough=True)
        cq_file = store.cq_table.find("Q", 0).queue.last()
        fs.flush_logics_once(thorough=False)
        assert cq_file.flushed_position == 0  # least-pages rule: left for later
        on_disk = CHECKPOINT.unpack((tmp_path / "s" / "checkpoint").read_bytes()[:CHECKPOINT.size])
        assert on_disk[0] == rs[-1].store_timestamp and on_disk[1] < rs[-1].store_timestamp
        fs.flush_logics_once(thorough=True)
        assert cq_file.flushed_position == 10 * 20
        on_disk = CHECKPOINT.unpack((tmp_path / "s" / "checkpoint").read_bytes()[:CHECKPOINT.size])
        assert on_disk[1] == rs[-1].store_timestamp
