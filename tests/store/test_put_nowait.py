"""``put_message(nowait=True)``: the event loop's in-place put. It writes exactly what a blocking
put writes, or returns None having written nothing when it would have to wait (the CommitLog lock
is held, a new segment is needed, or SYNC_FLUSH)."""
from __future__ import annotations

import time

from rocketstore import Message, MessageStore, PutStatus
from tests.conftest import small_config


def _until_taken(put):
    """A nowait put that may meet the flush thread's snapshot holding the lock for a moment:
    try again (None means nothing was written), for at most a second."""
    for _ in range(1000):
        r = put()
        if r is not None:
            return r
        time.sleep(0.001)
    raise AssertionError("a nowait put never went in, with no segment to create")


def test_nowait_put_is_a_put(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        assert store.put_message(Message("T", b"first"), nowait=True) is None  # no segment yet
        assert store.put_message(Message("T", b"first")).status is PutStatus.PUT_OK
        r = _until_taken(lambda: store.put_message(Message("T", b"inline", keys=["k"]), nowait=True))
        assert r.status is PutStatus.PUT_OK and r.queue_offset == 1
        rb = _until_taken(lambda: store.put_messages([Message("T", b"b0"), Message("T", b"b1")],
                                                     nowait=True))
        assert rb.status is PutStatus.PUT_OK and rb.queue_offset == 2
        assert store.wait_dispatched(5)
        g = store.get_message("G", "T", 0, 0, 32, None)
        assert [m.body for m in g.messages] == [b"first", b"inline", b"b0", b"b1"]
        assert [m.body for m in store.query_message("T", "k").messages] == [b"inline"]


def test_nowait_put_returns_none_and_writes_nothing_while_the_lock_is_held(tmp_path):
    with MessageStore(small_config(tmp_path)) as store:
        assert store.put_message(Message("T", b"w")).status is PutStatus.PUT_OK
        before = store.get_max_phy_offset()
        with store.commitlog.lock:  # a putter or the flush thread's snapshot
            assert store.put_message(Message("T", b"x"), nowait=True) is None
            assert store.put_messages([Message("T", b"y")], nowait=True) is None
        assert store.get_max_phy_offset() == before
        r = store.put_message(Message("T", b"x"))
        assert r.status is PutStatus.PUT_OK and r.wrote_offset == before and r.queue_offset == 1


def test_nowait_put_leaves_a_new_segment_to_the_blocking_put(tmp_path):
    seg = 4096
    with MessageStore(small_config(tmp_path, mapped_file_size_commitlog=seg)) as store:
        body = b"z" * 500
        assert store.put_message(Message("T", body)).status is PutStatus.PUT_OK
        n = 1
        while True:
            r = store.put_message(Message("T", body), nowait=True)
            if r is None:
                if store.commitlog.queue.last().remaining >= 600:
                    continue  # the flush thread held the lock for a moment: try again
                break
            assert r.status is PutStatus.PUT_OK and r.wrote_offset + r.wrote_bytes <= seg
            n += 1
        assert n >= 5
        end = store.get_max_phy_offset()
        assert end < seg and len(store.commitlog.queue.files) == 1  # nothing written, no file
        r = store.put_message(Message("T", body))
        assert r.status is PutStatus.PUT_OK and r.wrote_offset == seg and r.queue_offset == n
        r = _until_taken(lambda: store.put_message(Message("T", body), nowait=True))
        assert r.status is PutStatus.PUT_OK and r.wrote_offset > seg
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("T", 0) == n + 2


def test_nowait_put_under_sync_flush_is_always_deferred(tmp_path):
    with MessageStore(small_config(tmp_path, flush_disk_type="SYNC_FLUSH")) as store:
        assert store.put_message(Message("T", b"x"), nowait=True) is None
        assert store.get_max_phy_offset() == 0
        assert store.put_message(Message("T", b"x")).status is PutStatus.PUT_OK
