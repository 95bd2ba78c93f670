"""``MessageStore.append``: the records a worker link delivers in one read go in as one append, and
each still gets the answer a put of its own would get — its queue offset, its offset and msgId,
its own durability offset under SYNC_FLUSH, its own refusal. Expected values are counted here
from the records, not taken from the store."""
from __future__ import annotations

import time

from rocketstore import Message, MessageStore, PutStatus
from rocketstore.format.message import EncodedMessage, encode_message, parse_message_id
from tests.conftest import small_config

HOST = "127.0.0.1:10911"


def _record(topic: str, qid: int, body: bytes, props: dict[str, str] | None = None) -> EncodedMessage:
    return encode_message(Message(topic, body, queue_id=qid), props or {"UNIQ_KEY": f"u{body!r}"},
                          born_timestamp=int(time.time() * 1000), born_host="127.0.0.1:5000",
                          store_host=HOST, max_body_size=4 * 1024 * 1024)


PLACES = [("A", 0), ("B", 1), ("A", 0), ("A", 1), ("B", 1), ("A", 0)]


def _body(i: int) -> bytes:
    t, q = PLACES[i]
    return f"{t}-{q}-{i}|".encode() * (i + 1)


def _mixed() -> list[EncodedMessage]:
    return [_record(t, q, _body(i)) for i, (t, q) in enumerate(PLACES)]


def test_one_append_answers_each_record_as_its_own_put(tmp_path):
    recs = _mixed()
    with MessageStore(small_config(tmp_path / "many")) as store:
        assert store.put_message(Message("A", b"before")).ok  # A/0 starts at queue offset 1
        start = store.get_max_phy_offset()
        rs = store.append(recs)
        seen: dict[tuple[str, int], int] = {("A", 0): 1}
        off = start
        for rec, r in zip(recs, rs):
            key = (rec.topic, rec.queue_id)
            assert r.status is PutStatus.PUT_OK and r.msg_num == 1
            assert r.queue_offset == seen.get(key, 0)
            seen[key] = seen.get(key, 0) + 1
            assert (r.wrote_offset, r.wrote_bytes) == (off, len(rec.data))
            assert parse_message_id(r.msg_id) == (HOST, off) and r.msg_ids == [r.msg_id]
            off += len(rec.data)
        assert store.get_max_phy_offset() == off
        assert store.wait_dispatched(5)
        for i, (rec, r) in enumerate(zip(recs, rs)):
            (m,) = store.get_message("G", rec.topic, rec.queue_id, r.queue_offset, 1).messages
            assert (m.commitlog_offset, m.body) == (r.wrote_offset, _body(i))
        one = MessageStore(small_config(tmp_path / "one"))
        try:  # the same records one by one: the same queue offsets and record sizes
            assert one.put_message(Message("A", b"before")).ok
            singles = [one.append([rec])[0] for rec in recs]
            assert [(r.queue_offset, r.wrote_offset, r.wrote_bytes) for r in singles] == \
                   [(r.queue_offset, r.wrote_offset, r.wrote_bytes) for r in rs]
        finally:
            one.shutdown()


def test_an_illegal_topic_is_refused_alone(tmp_path):
    good = _mixed()[:3]
    bad = EncodedMessage(good[0].data, good[0].store_ts_pos, "a/b", 0, 0, {})  # cannot name a directory
    with MessageStore(small_config(tmp_path)) as store:
        rs = store.append([good[0], bad, good[1], good[2]])
        assert [r.status for r in rs] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL,
                                         PutStatus.PUT_OK, PutStatus.PUT_OK]
        assert "topic" in rs[1].error.lower()
        assert rs[2].wrote_offset == rs[0].wrote_offset + len(good[0].data)  # nothing in between


def test_refusals_are_one_result_each(tmp_path):
    store = MessageStore(small_config(tmp_path))
    store.shutdown()
    store.put_path.running = False
    rs = store.put_path.append(_mixed()[:2])
    assert [r.status for r in rs] == [PutStatus.SERVICE_NOT_AVAILABLE] * 2
    assert rs[0] is not rs[1]  # a caller may change one result's status (FLUSH_DISK_TIMEOUT)


def test_sync_flush_each_waiting_record_carries_its_own_end_offset(tmp_path):
    recs = _mixed()[:3]
    nowait_rec = _record("A", 0, b"fire and forget", {"WAIT": "false", "UNIQ_KEY": "nw"})
    cfg = small_config(tmp_path, flush_disk_type="SYNC_FLUSH")
    with MessageStore(cfg) as store:
        assert store.put_message(Message("A", b"segment")).ok
        rs = store.append([recs[0], nowait_rec, recs[1], recs[2]], defer_sync=True)
        for r in rs:
            assert r.status is PutStatus.PUT_OK
        assert rs[1].sync_offset == 0
        for r in (rs[0], rs[2], rs[3]):
            assert r.sync_offset == r.wrote_offset + r.wrote_bytes
        assert store.flush_service.wait_flushed(rs[3].sync_offset)  # one group commit covers all


def test_too_big_together_goes_in_one_at_a_time(tmp_path):
    seg = 4096
    with MessageStore(small_config(tmp_path, mapped_file_size_commitlog=seg)) as store:
        assert store.put_message(Message("T", b"first")).ok
        recs = [_record("T", 0, bytes([65 + i]) * 1500) for i in range(3)]
        before = store.get_max_phy_offset()
        assert store.append(recs, nowait=True) is None  # would need a new segment
        assert store.get_max_phy_offset() == before  # nothing written
        rs = store.append(recs)
        assert [r.status for r in rs] == [PutStatus.PUT_OK] * 3
        assert [r.queue_offset for r in rs] == [1, 2, 3]
        assert len({r.wrote_offset // seg for r in rs}) >= 2  # they span segments
        assert store.wait_dispatched(5)
        got = store.get_message("G", "T", 0, 1, 3).messages
        assert [m.body for m in got] == [bytes([65 + i]) * 1500 for i in range(3)]
