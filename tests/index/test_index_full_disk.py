"""A full disk and the index: files are sparse (their full length, blocks allocated as they
fill, as RocketMQ's own), so a full disk fails with DiskFullError when a file is created (its
header page) or when a write needs blocks — never as a SIGBUS in the mapping — nothing half-made
is left behind, and a retried dispatch completes the index exactly. Needs root to mount a small
tmpfs; skipped otherwise."""
from __future__ import annotations

import os

import pytest

from rocketstore.errors import DiskFullError
from rocketstore.store.index_file import IndexFile

from ..conftest import fill_disk
from .index_helpers import MiniLog, index_bytes, make_service


@pytest.fixture
def tmpfs(tmpfs_factory):
    return tmpfs_factory("1m")


def test_create_on_full_disk_raises_and_leaves_nothing(tmpfs):
    path = tmpfs / "20240101000000000"
    ballast = tmpfs / "ballast"
    fill_disk(ballast)
    with pytest.raises(DiskFullError, match="no space"):
        IndexFile.create(str(path), 1000, 100_000)  # not even its header page fits
    assert not path.exists()
    ballast.unlink()


def test_a_file_larger_than_the_disk_fills_until_a_clean_disk_full_error(tmpfs):
    import numpy as np
    path = tmpfs / "20240101000000000"
    f = IndexFile.create(str(path), 1000, 100_000)  # 2 MB on a 1 MiB disk: sparse
    assert os.path.getsize(path) == f.file_size  # the full logical length RocketMQ expects
    assert os.stat(path).st_blocks * 512 < 64 * 1024  # but blocks only for what is used
    put = 0
    with pytest.raises(DiskFullError, match="no space"):
        for i in range(100):  # 1,000 keys a batch: 20 KB of entries; ~50 batches fill 1 MiB
            hashes = np.arange(i * 1000, (i + 1) * 1000, dtype=np.int64) * 7919
            put += f.put_batch(hashes, np.arange(1000, dtype=np.int64) + i * 1000,
                               np.full(1000, 1_700_000_000_000, dtype=np.int64))
    assert 10_000 < put < 100_000  # this process is alive: no SIGBUS; what went in reads back
    assert f.entry_count == put
    assert f.entry(put)[1] == put - 1  # the last entry's phyOffset
    f.close()


def test_dispatch_retried_after_disk_full_is_exact(tmpfs, tmp_path):
    """A roll fails mid-batch (the disk filled): the keys before it stay, the reput retries
    from ``dispatch_from_offset()`` once space is back, and the files equal an undisturbed
    build byte for byte (no key lost, none doubled)."""
    log = MiniLog()
    offs = [log.append("T", [f"k{i % 5}", "all"], uniq=f"U{i}", ts=1_700_000_000_000 + i)
            for i in range(60)]
    ref = make_service(tmp_path / "ref", slots=7, num=5)  # 4 entries per file
    ref.dispatch(log.records())
    tiny = make_service(tmpfs / "t", slots=7, num=5)
    tiny.dispatch(log.records(0, offs[3]))  # 9 entries: 2 full files + 1 entry
    ballast = tmpfs / "ballast"
    fill_disk(ballast)
    with pytest.raises(DiskFullError):
        tiny.dispatch(log.records(offs[3]))  # fills the third file, then cannot roll
    assert tiny.files[-1].is_write_full()
    ballast.unlink()
    tiny.dispatch(log.records(tiny.dispatch_from_offset()))  # the reput retries
    assert index_bytes(tiny) == index_bytes(ref)
    for key in ("k1", "all", "U7"):
        exp = [o for i, o in reversed(list(enumerate(offs)))
               if key in (f"k{i % 5}", "all", f"U{i}")][:64]
        got = tiny.query_message("T", key, 64, 0, None, log.read).messages
        assert [m.commitlog_offset for m in got] == exp
    ref.shutdown()
    tiny.shutdown()
