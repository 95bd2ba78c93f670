"""The timer store (RocketMQ 5's timerwheel + timerlog) on a real store directory.

Expected bytes are built here from RocketMQ 5.3's documented layouts with ``int.to_bytes``, not
with the module under test. Times use ``timerPrecisionMs=100`` (RocketMQ's smallest) and a
roll window of 20 slots (2 s) so rolls happen within a test.
"""
from __future__ import annotations

import os
import time

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.results import PutStatus

P = 100  # timerPrecisionMs
WINDOW = 20  # timerRollWindowSlot: 2 s
SLOTS = 7 * 86400  # TimerMessageStore: TIMER_WHEEL_TTL_DAY * DAY_SECS, file holds 2x


def cfg(root, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(root), mapped_file_size_commitlog=1 << 20,
                mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=100, max_index_num=400,
                timer_precision_ms=P, timer_roll_window_slot=WINDOW, mapped_file_size_timer_log=52 * 40,
                timer_flush_interval_ms=100)
    base.update(kw)
    return StoreConfig(**base)


def now_ms() -> int:
    return int(time.time() * 1000)


def drain(store, topic, want, deadline_s, queue=0):
    """(message, arrival ms) for each message of ``topic`` until ``want`` arrived or time ran out."""
    out, off = [], 0
    end = time.monotonic() + deadline_s
    while len(out) < want and time.monotonic() < end:
        g = store.get_message("g", topic, queue, off, 32)
        for m in g.messages or []:
            out.append((m, now_ms()))
            off += 1
        time.sleep(0.01)
    return out


def timer_put(store, topic, body, deliver_ms=None, **props):
    p = {k: str(v) for k, v in props.items()}
    if deliver_ms is not None:
        p["TIMER_DELIVER_MS"] = str(deliver_ms)
    return store.put_message(Message(topic=topic, body=body, properties=p))


def be(v: int, n: int) -> bytes:
    return v.to_bytes(n, "big", signed=True)


def test_unit_slot_and_checkpoint_bytes(tmp_path):
    c = cfg(tmp_path)
    with MessageStore(c) as s:
        deliver = (now_ms() // P + 30) * P + 37  # 3 s out, not on a boundary: floored
        r = timer_put(s, "T", b"one", deliver)
        assert r.status is PutStatus.PUT_OK
        deadline = time.monotonic() + 5
        while s.timer.enqueued < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        raw = s.look_message_by_offset(r.wrote_offset)
        assert raw.topic == "rmq_sys_wheel_timer" and raw.queue_id == 0
        assert raw.properties["REAL_TOPIC"] == "T" and raw.properties["REAL_QID"] == "0"
        assert raw.properties["TIMER_OUT_MS"] == str(deliver - 37)
        s.timer.flush()
        slot_ms = deliver - 37
        with open(os.path.join(str(tmp_path), "timerlog", "0" * 20), "rb") as fh:
            unit = fh.read(52)
        enq = int.from_bytes(unit[16:24], "big")
        # the window is 2 s, the message 3 s out: a roll unit at write time + the window
        roll_slot = enq + WINDOW * P if slot_ms - enq - WINDOW * P >= WINDOW // 3 * P else enq + WINDOW // 2 * P
        topic_hash = 84  # Java "T".hashCode()
        expected = (be(52, 4) + be(-1, 8) + be(1 | 2, 4) + be(enq, 8) + be(roll_slot - enq, 4)
                    + be(r.wrote_offset, 8) + be(r.wrote_bytes, 4) + be(topic_hash, 4) + be(0, 8))
        assert unit == expected
        with open(os.path.join(str(tmp_path), "timerwheel"), "rb") as fh:
            assert os.fstat(fh.fileno()).st_size == SLOTS * 2 * 32
            fh.seek((roll_slot // P) % (SLOTS * 2) * 32)
            slot = fh.read(32)
        assert slot == be(roll_slot // P, 8) + be(0, 8) + be(0, 8) + be(1, 4) + be(0, 4)
        with open(os.path.join(str(tmp_path), "config", "timercheck"), "rb") as fh:
            ck = fh.read()
        assert len(ck) == 4096
        assert int.from_bytes(ck[8:16], "big") == 52  # lastTimerLogFlushPos
        assert int.from_bytes(ck[16:24], "big") == 1  # lastTimerQueueOffset
        got = drain(s, "T", 1, 6)
        assert [m.body for m, _ in got] == [b"one"]
        m, at = got[0]
        assert at >= deliver and m.store_timestamp >= deliver
        assert m.properties["TIMER_ROLL_TIMES"] == "1"
        assert "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties
        assert int(m.properties["TIMER_DEQUEUE_MS"]) >= deliver


def test_on_time_never_early_past_and_edge(tmp_path):
    with MessageStore(cfg(tmp_path)) as s:
        t0 = now_ms()
        cases = {b"plus300": t0 + 300, b"plus1000": t0 + 1000, b"edge": t0 + WINDOW * P,
                 b"beyond": t0 + 3 * WINDOW * P + 50, b"past": t0 - 5000,
                 b"boundary": (t0 // P + 8) * P}
        for body, at in cases.items():
            assert timer_put(s, "T", body, at).status is PutStatus.PUT_OK
        by_sec = timer_put(s, "T", b"sec", None, TIMER_DELAY_SEC=1)
        by_ms = timer_put(s, "T", b"ms", None, TIMER_DELAY_MS=700)
        assert by_sec.ok and by_ms.ok
        cases[b"sec"] = t0 + 1000
        cases[b"ms"] = t0 + 700
        got = drain(s, "T", len(cases), 10)
        assert sorted(m.body for m, _ in got) == sorted(cases)
        for m, at in got:
            want = cases[m.body]
            assert m.store_timestamp >= want - 5 or m.body == b"past", (m.body, m.store_timestamp - want)
            assert at - max(want, t0) < 1000, (m.body, at - want)  # within 1 s of its time
        past = next(m for m, _ in got if m.body == b"past")
        assert "TIMER_OUT_MS" not in past.properties  # stored at once, as a plain message
        beyond = next(m for m, _ in got if m.body == b"beyond")
        assert int(beyond.properties["TIMER_ROLL_TIMES"]) >= 2
        assert s.get_max_offset_in_queue("T", 0) == len(cases)  # nothing twice


def test_cancel_by_uniq_key(tmp_path):
    with MessageStore(cfg(tmp_path)) as s:
        at = now_ms() + 800
        rs = [timer_put(s, "T", b"m%d" % i, at) for i in range(3)]
        victim = s.look_message_by_offset(rs[1].wrote_offset).uniq_key
        d = timer_put(s, "Other", b"cancel", at, TIMER_DEL_UNIQKEY=f"T+{victim}")
        assert d.status is PutStatus.PUT_OK
        got = drain(s, "T", 3, 3)
        assert sorted(m.body for m, _ in got) == [b"m0", b"m2"]
        assert s.get_max_offset_in_queue("Other", 0) == 0  # a cancel is never delivered
        # a cancel for a time already past is refused, as RocketMQ refuses it
        late = timer_put(s, "T", b"x", now_ms() - 10, TIMER_DEL_UNIQKEY="T+abc")
        assert late.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL


def test_limits_and_delay_levels(tmp_path):
    with MessageStore(cfg(tmp_path, timer_max_delay_sec=60)) as s:
        r = timer_put(s, "T", b"x", now_ms() + 61_000)
        assert r.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL and "60000ms" in r.error
        bad = timer_put(s, "T", b"x", None, TIMER_DELAY_SEC="soon")
        assert bad.status is PutStatus.WHEEL_TIMER_MSG_ILLEGAL
        # a DELAY level wins: the timer properties are dropped, the level applies
        lv = s.put_message(Message(topic="T", body=b"lvl", properties={
            "DELAY": "1", "TIMER_DELIVER_MS": str(now_ms() + 50_000)}))
        m = s.look_message_by_offset(lv.wrote_offset)
        assert m.topic == "SCHEDULE_TOPIC_XXXX" and "TIMER_DELIVER_MS" not in m.properties
        batch = s.put_messages([Message(topic="T", body=b"b", properties={
            "TIMER_DELIVER_MS": str(now_ms() + 5000)})])
        assert batch.status is PutStatus.MESSAGE_ILLEGAL and "timer" in batch.error
    with MessageStore(cfg(tmp_path, timer_wheel_enable=False)) as s:
        r = timer_put(s, "T", b"x", now_ms() + 5000)
        assert r.status is PutStatus.WHEEL_TIMER_NOT_ENABLE


def test_restart_delivers_what_came_due_while_closed(tmp_path):
    c = cfg(tmp_path)
    with MessageStore(c) as s:
        t0 = now_ms()
        for i in range(5):
            assert timer_put(s, "T", b"a%d" % i, t0 + 800 + 100 * i).ok
        assert timer_put(s, "T", b"later", t0 + 4000).ok
    time.sleep(max(0, (t0 + 1500 - now_ms()) / 1000))
    with MessageStore(c) as s:
        reopened = now_ms()
        got = drain(s, "T", 6, 6)
        assert sorted(m.body for m, _ in got) == sorted([b"a%d" % i for i in range(5)] + [b"later"])
        for m, at in got:
            if m.body != b"later":
                assert at - reopened < 1000  # overdue: at once
            else:
                assert m.store_timestamp >= t0 + 4000
        time.sleep(0.3)
        assert s.get_max_offset_in_queue("T", 0) == 6


def test_many_timers_keep_memory_flat(tmp_path):
    """5 000 timers over 2 s: the wheel file's size is fixed and every one arrives once."""
    c = cfg(tmp_path, mapped_file_size_commitlog=8 << 20, mapped_file_size_timer_log=52 * 10_000,
            timer_roll_window_slot=600)
    with MessageStore(c) as s:
        t0 = now_ms() + 500
        n = 5_000
        for i in range(n):
            assert timer_put(s, "T", b"%d" % i, t0 + i % 2000).ok
        got = drain(s, "T", n, 20)
        assert len(got) == n
        assert len({m.body for m, _ in got}) == n
        for m, _ in got:
            assert m.store_timestamp >= t0 + int(m.body) % 2000
        assert os.path.getsize(os.path.join(str(tmp_path), "timerwheel")) == SLOTS * 2 * 32
        assert sum(s.timer.metrics.counts().values()) == 0


def test_new_master_scan_finds_every_reput_chunk_by_chunk(tmp_path, monkeypatch):
    """The scan a new master makes of the CommitLog for timer re-puts another master made
    (``_scan_reputs``, the vectorised decoder a chunk at a time) finds what the record-by-record
    walk finds and what was delivered — across segment ends (64 KiB segments), chunk ends, a
    record larger than a chunk, a roll back to the timer topic, and a property value that only
    mentions TIMER_DEQUEUE_MS."""
    from rocketstore.store.timer import service
    with MessageStore(cfg(tmp_path, mapped_file_size_commitlog=64 << 10)) as s:
        t0 = now_ms()
        for i in range(120):
            assert timer_put(s, "T", b"t%d-" % i + b"x" * 300, t0 + 300 + 5 * i).ok
        assert timer_put(s, "T", b"rolled", t0 + WINDOW * P + 700).ok  # one roll, then out
        assert s.put_message(Message(topic="P", body=b"y" * 5000)).ok  # larger than a chunk
        assert s.put_message(Message(topic="P", body=b"z", properties={
            "note": "not a TIMER_DEQUEUE_MS property"})).ok
        got = drain(s, "T", 121, 15)
        assert len(got) == 121
        timer = s.timer
        end = s.commitlog.max_offset()
        walked = timer._scan_reputs_by_record(0, end)
        delivered = {(False, m.properties.get("UNIQ_KEY"), m.properties.get("TIMER_OUT_MS"),
                      int(m.properties.get("TIMER_ROLL_TIMES", "0"))) for m, _ in got}
        assert delivered <= walked and any(k[0] for k in walked)  # (the roll's re-put too)
        for chunk in (service.SCAN_CHUNK, 4096, 1000):
            monkeypatch.setattr(service, "SCAN_CHUNK", chunk)
            assert timer._scan_reputs(0) == walked, chunk
