"""One "valid end of the CommitLog": the Spark reader's confirmed offset (``spark.segments``)
and the store's recovery (``store.recovery_scan.segment_end``) agree, on a clean store, one
with a torn last record and one whose last record's body is still being copied in."""
from __future__ import annotations

from rocketstore.spark.segments import confirmed_offset, list_segments, tail_index
from rocketstore.store.message_store import MessageStore

from tests.durability.helpers import put_n, small_config


def _recovered_end(root) -> int:
    with MessageStore.open_read_only(str(root)) as store:
        return store.get_max_phy_offset()


def test_spark_and_recovery_find_the_same_valid_end(tmp_path):
    root = tmp_path / "s"
    with MessageStore(small_config(root)) as store:
        results = put_n(store, 800)  # several 64 KiB segments
    ends = [r.wrote_offset + r.wrote_bytes for r in results]
    segs = list_segments(str(root / "commitlog"))
    assert len(segs) > 2
    assert confirmed_offset(segs)[0] == ends[-1] == _recovered_end(root)

    # the last record's body damaged (a copy not finished): both end before it
    tail = segs[tail_index(segs)]
    last_start = ends[-2]
    with open(tail.path, "r+b") as fh:
        data = fh.read()
        body_at = data.index(b"chance for me!799", last_start - tail.base)
        fh.seek(body_at)
        fh.write(b"CHANCE")
    assert confirmed_offset(segs)[0] == last_start == _recovered_end(root)

    # a torn header after the data (TOTALSIZE and magic, then nothing): ignored by both
    with open(tail.path, "r+b") as fh:
        fh.seek(ends[-1] - tail.base)
        fh.write((400).to_bytes(4, "big") + bytes.fromhex("daa320a7") + b"x" * 30)
    assert confirmed_offset(segs)[0] == last_start == _recovered_end(root)
