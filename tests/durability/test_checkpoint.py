"""The checkpoint file (reference §5.1): RocketMQ's StoreCheckpointTest, the 4096-byte layout,
atomic rewrite, and the index checkpoint on load after an unclean exit (seed 001)."""
from __future__ import annotations

import os
import struct
import time

from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.message_store import MessageStore

from .helpers import put_n, small_config, touch_abort


def test_store_checkpoint_write_and_read(tmp_path):
    path = str(tmp_path / "0000")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = 0xAABB
    cp.logics_msg_timestamp = 0xCCDD
    cp.flush()
    assert cp.physic_msg_timestamp - cp.min_timestamp() == 3000
    again = StoreCheckpoint(path)
    assert (again.physic_msg_timestamp, again.logics_msg_timestamp) == (0xAABB, 0xCCDD)
    data = open(path, "rb").read()
    assert len(data) == 4096 and data[40:] == bytes(4056)
    assert struct.unpack(">qqq", data[:24]) == (0xAABB, 0xCCDD, 0)
    assert not os.path.exists(path + ".tmp")


def test_logics_written_capped_at_what_was_flushed(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "cp"))
    cp.logics_msg_timestamp = 100
    cp.flush()
    cp.track_logics_durability()
    cp.logics_msg_timestamp = 500  # dispatch ran ahead of the ConsumeQueue flush
    cp.flush()
    assert StoreCheckpoint(str(tmp_path / "cp")).logics_msg_timestamp == 100
    cp.mark_logics_durable(400)
    cp.flush()
    assert StoreCheckpoint(str(tmp_path / "cp")).logics_msg_timestamp == 400


def test_index_files_newer_than_index_checkpoint_are_rebuilt_after_crash(tmp_path):
    root = tmp_path / "s"
    cfg = small_config(root, max_index_num=40)  # ~20 messages per index file (KEYS + UNIQ_KEY)
    with MessageStore(cfg) as store:
        for k in range(10):
            put_n(store, 10, "I", start=10 * k)
            time.sleep(0.005)  # distinct end times per index file
        assert store.wait_dispatched(10)
        ends = [(f.name, f.end_timestamp) for f in store.index_service.files]
    names_before = [n for n, _ in ends]
    assert len(names_before) >= 5
    # pretend only the first two files were known flushed when the process died
    keep_ts = ends[1][1]
    kept = [n for n, ts in ends if ts <= keep_ts]
    assert len(kept) < len(ends)
    cp = StoreCheckpoint(str(root / "checkpoint"))
    cp.index_msg_timestamp = keep_ts
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = 1  # walk back to the first segment
    cp.flush()
    touch_abort(root)
    with MessageStore(cfg) as store:
        assert not store.recovery_report.normal
        assert store.wait_dispatched(10)
        names_after = [f.name for f in store.index_service.files]
        assert names_after[:len(kept)] == kept
        assert set(names_after[len(kept):]).isdisjoint(names_before)  # destroyed and rebuilt
        for i in (0, 30, 55, 99):
            got = store.query_message("I", f"k{i}").messages
            assert [m.queue_offset for m in got] == [i]
