"""Roll-over with a tiny max_index_num: queries span files newest first, time windows hold,
file names, checkpoint, expiry, crash reload and restart-point idempotence."""
from __future__ import annotations

import os
import struct

from rocketstore.format.index_layout import index_file_name, parse_index_file_name

from .index_helpers import LONG_MAX, MiniLog, index_bytes, make_service

T0 = 1_700_000_000_000


def _build(n=30, step_ms=1000):
    log = MiniLog()
    model = []
    for i in range(n):
        key = f"k{i % 3}"
        off = log.append("Topic", [key], uniq=f"U{i}", ts=T0 + i * step_ms)
        model.append((off, key, f"U{i}", T0 + i * step_ms))
    return log, model


def _offs(res):
    return [m.commitlog_offset for m in res.messages]


def test_queries_span_files_newest_first_with_time_windows(tmp_path):
    log, model = _build()
    fixed = lambda: 1_700_000_000.0  # every roll in the same ms: names step 1 ms
    svc = make_service(tmp_path, slots=7, num=5, clock=fixed)  # 4 entries = 2 messages per file
    svc.dispatch(log.records())
    assert len(svc.files) == 15
    names = [f.name for f in svc.files]
    assert names == sorted(names) and len(set(names)) == 15
    assert names[0] == index_file_name(1_700_000_000_000)
    assert [parse_index_file_name(n) for n in names] == [1_700_000_000_000 + i for i in range(15)]
    for key in ("k0", "k1", "k2"):
        exp = [m[0] for m in reversed(model) if m[1] == key]
        assert _offs(svc.query_message("Topic", key, 64, 0, None, log.read)) == exp
        raw, ts, phy = svc.query_offsets("Topic", key, 64, 0, LONG_MAX)
        assert raw == exp and (ts, phy) == (model[-1][3], model[-1][0])
        for lo, hi in [(T0 + 5000, T0 + 17_000), (T0 + 17_000, T0 + 17_000), (T0 + 29_500, LONG_MAX)]:
            exp_w = [m[0] for m in reversed(model) if m[1] == key and lo <= m[3] <= hi]
            assert _offs(svc.query_message("Topic", key, 64, lo, hi, log.read)) == exp_w
        assert _offs(svc.query_message("Topic", key, 3, 0, None, log.read)) == exp[:3]
    # every header carries the previous file's end into its begin (roll-over rule)
    for prev, f in zip(svc.files, svc.files[1:]):
        assert prev.is_write_full()
        assert f.begin_phy_offset >= prev.end_phy_offset
    svc.shutdown()


def test_sub_second_times_are_exact(tmp_path):
    """timeDiff is in seconds; query windows still cut at the real store time (ms)."""
    log, model = _build(n=40, step_ms=137)
    svc = make_service(tmp_path, slots=7, num=9)
    svc.dispatch(log.records())
    for lo, hi in [(T0 + 300, T0 + 1200), (T0 + 1233, T0 + 1233), (T0 + 999, T0 + 4000)]:
        for key in ("k0", "k1", "k2"):
            exp = [m[0] for m in reversed(model) if m[1] == key and lo <= m[3] <= hi]
            assert _offs(svc.query_message("Topic", key, 64, lo, hi, log.read)) == exp, (lo, hi, key)
    svc.shutdown()


def test_full_file_flush_sets_checkpoint_and_eager_roll(tmp_path):
    log = MiniLog()
    log.append("T", ["a"], uniq="u1", ts=T0)
    log.append("T", ["b"], uniq="u2", ts=T0 + 5)   # fills 4 entries: file full
    empty = log.append("T", None, ts=T0 + 9)      # no keys at all
    svc = make_service(tmp_path, slots=7, num=5)
    svc.dispatch(log.records(0, empty))
    assert len(svc.files) == 1 and svc.files[0].is_write_full()
    svc.dispatch(log.records(empty))  # like buildIndex: the next record rolls the full file
    assert len(svc.files) == 2
    new = svc.files[1]
    assert (new.begin_timestamp, new.end_timestamp, new.begin_phy_offset, new.end_phy_offset) == \
           (T0 + 5, T0 + 5, svc.files[0].end_phy_offset, svc.files[0].end_phy_offset)
    svc.flush()
    assert svc.checkpoint.index_msg_timestamp == T0 + 5
    with open(svc.checkpoint.path, "rb") as fh:
        assert struct.unpack_from(">q", fh.read(), 16)[0] == T0 + 5
    svc.shutdown()


def test_delete_expired_never_the_last(tmp_path):
    log, model = _build()
    svc = make_service(tmp_path, slots=7, num=5)
    svc.dispatch(log.records())
    n = len(svc.files)
    cut = model[10][0]  # CommitLog min offset after cleaning
    deleted = svc.delete_expired_file(cut)
    assert deleted == 5 and len(svc.files) == n - 5
    assert all(f.end_phy_offset >= cut for f in svc.files)
    assert len(os.listdir(svc.index_dir)) == n - 5
    assert svc.delete_expired_file(0) == 0
    left = len(svc.files)
    assert svc.delete_expired_file(LONG_MAX) == left - 1 and len(svc.files) == 1
    svc.shutdown()


def test_crash_reload_redispatch_is_complete_without_duplicates(tmp_path):
    log, model = _build(n=41)
    ref = make_service(tmp_path / "ref", slots=7, num=5)
    ref.dispatch(log.records())
    ref.shutdown()
    ref = make_service(tmp_path / "ref", slots=7, num=5)
    svc = make_service(tmp_path / "crash", slots=7, num=5)
    svc.dispatch(log.records(0, model[25][0]))
    svc.flush()  # full files flushed, checkpoint written
    cp = svc.checkpoint.index_msg_timestamp
    assert cp == model[23][3]
    svc.dispatch(log.records(model[25][0], model[33][0]))  # rolls flush full files in the background
    svc._join_flushers()
    for f in svc.files:  # then the process is "killed": the last file is never flushed
        f.close()
    from rocketstore.store.checkpoint import StoreCheckpoint
    cp_disk = StoreCheckpoint(svc.checkpoint.path).index_msg_timestamp
    assert cp_disk == model[31][3]  # the newest full file (entries of messages 30, 31)
    again = make_service(tmp_path / "crash", slots=7, num=5, last_exit_ok=False)
    assert len(again.files) == 16 and all(f.end_timestamp <= cp_disk for f in again.files)
    start = again.dispatch_from_offset()
    assert start == model[31][0]
    # the reput restarts a little earlier still (segment start): nothing must be doubled
    again.dispatch(log.records(model[20][0]))
    assert index_bytes(again)[:len(index_bytes(ref))] == index_bytes(ref)
    for key in ("k0", "k1", "k2", "U3", "U40"):
        exp = [m[0] for m in reversed(model) if key in (m[1], m[2])]
        assert _offs(again.query_message("Topic", key, 64, 0, None, log.read)) == exp
    again.shutdown()
    ref.shutdown()


def test_redispatch_at_end_offset_adds_nothing(tmp_path):
    """RocketMQ's strict '<' re-indexes the record at endPhyOffset; we do not."""
    log, model = _build(n=6)
    svc = make_service(tmp_path, slots=7, num=100)
    svc.dispatch(log.records())
    before = index_bytes(svc)
    assert svc.dispatch_from_offset() == model[-1][0]
    svc.dispatch(log.records(model[-1][0]))
    svc.dispatch(log.records())
    assert index_bytes(svc) == before
    assert svc.files[-1].entry_count == 12
    svc.shutdown()


def test_record_at_offset_zero_is_indexed_once(tmp_path):
    log = MiniLog()
    log.append("T", ["only"], ts=T0)
    svc = make_service(tmp_path, slots=7, num=100)
    assert svc.dispatch_from_offset() == 0
    svc.dispatch(log.records())
    svc.dispatch(log.records())
    assert svc.files[-1].entry_count == 1
    svc.shutdown()


def test_truncate_dirty_files_and_disabled_index(tmp_path):
    log, model = _build()
    svc = make_service(tmp_path / "a", slots=7, num=5)
    svc.dispatch(log.records())
    n = len(svc.files)
    assert svc.truncate_dirty_files(model[-3][0]) == 2
    assert len(svc.files) == n - 2 and svc.dispatch_from_offset() < model[-3][0]
    svc.shutdown()
    off = make_service(tmp_path / "b", slots=7, num=5, message_index_enable=False)
    off.dispatch(log.records())
    assert off.files == [] and off.dispatch_from_offset() == LONG_MAX
    off.shutdown()


def test_record_straddling_a_roll_is_completed_after_crash(tmp_path):
    """A record's keys can straddle two files; a crash that destroys the second file must not
    lose its tail keys (the restart point is that very record)."""
    log = MiniLog()
    log.append("T", ["a"], uniq="u1", ts=T0)                       # entries 1-2 of file A
    r2 = log.append("T", ["b", "c", "d"], uniq="u2", ts=T0 + 10)  # 2 in A, 2 in B
    log.append("T", None, uniq="u3", ts=T0 + 20)                   # B (3 of 4 entries)
    ref = make_service(tmp_path / "ref", slots=7, num=5)
    ref.dispatch(log.records())
    svc = make_service(tmp_path / "crash", slots=7, num=5)
    svc.dispatch(log.records())
    svc.flush()
    svc.files[-1].close()
    # simulate an unflushed last file: reload after a crash with the checkpoint of file A
    assert svc.checkpoint.index_msg_timestamp == T0 + 10
    again = make_service(tmp_path / "crash", slots=7, num=5, last_exit_ok=False)
    assert len(again.files) == 1 and again.dispatch_from_offset() == r2
    again.dispatch(log.records())
    assert index_bytes(again) == index_bytes(ref)
    for key in ["b", "c", "d", "u3"]:
        assert len(again.query_message("T", key, 8, 0, None, log.read).messages) == 1
    again.shutdown()
    ref.shutdown()


def test_truncate_drops_empty_rolled_file_carrying_a_dirty_end(tmp_path):
    log = MiniLog()
    log.append("T", ["a"], uniq="u1", ts=T0)
    cut = log.append("T", ["b"], uniq="u2", ts=T0 + 5)  # fills the file (4 entries)
    svc = make_service(tmp_path, slots=7, num=5)
    svc.dispatch(log.records())
    svc.last_file()  # eager roll: an empty file carrying end = cut
    assert len(svc.files) == 2 and svc.files[-1].entry_count == 0
    assert svc.truncate_dirty_files(cut) == 2  # CommitLog now ends at `cut`
    assert svc.files == [] and svc.dispatch_from_offset() == 0
    svc.dispatch(log.records(0, cut))
    assert svc.files[-1].entry_count == 2
    svc.shutdown()


def test_periodic_flush_leaves_the_writable_file_shutdown_flushes_it(tmp_path):
    log = MiniLog()
    for i in range(3):
        log.append("T", ["a", "b"], ts=T0 + i)  # 6 entries: one full file + 2 in the next
    svc = make_service(tmp_path, slots=7, num=5)
    svc.dispatch(log.records())
    svc.flush()
    full, last = svc.files
    assert not full.dirty and last.dirty
    assert svc.checkpoint.index_msg_timestamp == full.end_timestamp
    svc.shutdown()
    assert not last.dirty
    again = make_service(tmp_path, slots=7, num=5)
    assert [f.entry_count for f in again.files] == [4, 2]
    again.shutdown()


def test_wrong_size_files_on_load(tmp_path):
    import pytest
    from rocketstore.errors import CorruptFileError
    log, _ = _build(n=6)
    svc = make_service(tmp_path, slots=7, num=5)
    svc.dispatch(log.records())
    svc.shutdown()
    names = sorted(os.listdir(tmp_path / "index"))
    with open(tmp_path / "index" / names[-1], "r+b") as fh:
        fh.truncate(100)  # a damaged newest file
    with pytest.raises(CorruptFileError, match=names[-1]):
        make_service(tmp_path, slots=7, num=5)  # clean exit: refuse, naming the file
    again = make_service(tmp_path, slots=7, num=5, last_exit_ok=False)  # crash: drop, rebuild
    assert [f.name for f in again.files] == names[:-1]
    again.dispatch(log.records(again.dispatch_from_offset()))
    assert sum(f.entry_count for f in again.files) == 12
    again.shutdown()
    with open(tmp_path / "index" / names[0], "r+b") as fh:
        fh.truncate(100)  # an older file: never silently dropped
    with pytest.raises(CorruptFileError, match=names[0]):
        make_service(tmp_path, slots=7, num=5, last_exit_ok=False)
