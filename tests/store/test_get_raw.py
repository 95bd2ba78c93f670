"""``get_message(decode=False)`` without a filter (a PULL's raw records, as zero-copy views of
the segments) returns what the general decoding path returns: the same record bytes, status,
next offset and limits — across segment boundaries and with small transfer limits."""
from __future__ import annotations

import pytest

from rocketstore import Message, MessageStore
from rocketstore.format.message import decode_message
from rocketstore.store.results import GetStatus
from tests.conftest import small_config


@pytest.mark.parametrize("limits", [{}, dict(max_transfer_count_on_message_in_memory=5),
                                    dict(max_transfer_bytes_on_message_in_memory=1500)])
def test_raw_pull_equals_the_decoding_path(tmp_path, limits):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=4096, **limits)
    with MessageStore(cfg) as store:
        bodies = [bytes([65 + i % 26]) * (50 + 37 * i % 300) for i in range(120)]
        for i, b in enumerate(bodies):
            assert store.put_message(Message("T", b, queue_id=i % 2, tags=f"t{i % 3}")).ok
        assert store.wait_dispatched(5)
        assert len(store.commitlog.queue.files) > 5  # records spread over many segments
        for qid in (0, 1):
            for start in range(0, 62, 7):
                for max_msgs in (1, 3, 32, 100):
                    raw = store.get_message("G", "T", qid, start, max_msgs, None, decode=False)
                    ref = store.get_message("G", "T", qid, start, max_msgs, None, decode=True)
                    assert raw.status is ref.status
                    assert raw.next_begin_offset == ref.next_begin_offset
                    assert (raw.min_offset, raw.max_offset) == (ref.min_offset, ref.max_offset)
                    assert [bytes(b) for b in raw.buffers] == [bytes(b) for b in ref.buffers]
                    assert [bytes(b) for b in raw.buffers] == \
                        [bytes(store.commitlog.read_record(m.commitlog_offset)) for m in ref.messages]
                    if raw.status is GetStatus.FOUND:
                        assert all(isinstance(b, memoryview) for b in raw.buffers)
        # independent check of the content: every body of queue 0, in order
        got, off = [], 0
        while True:
            g = store.get_message("G", "T", 0, off, 32, None, decode=False)
            if g.status is not GetStatus.FOUND:
                break
            got += [bytes(b) for b in g.buffers]
            off = g.next_begin_offset
        assert [decode_message(g).body for g in got] == bodies[0::2]
        assert len(got) == 60
