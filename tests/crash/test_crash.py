"""Crash tests with real subprocesses (STYLE §7.6): SIGKILL a writer at random moments.

A child (``crash_writer.py``) puts from several threads and prints ``ACK seq offset size`` per
acknowledged put; the parent kills it with SIGKILL after a random delay (sometimes while it is
still opening and recovering the store), reopens the store and checks:

* the abort path ran (the child never shut down cleanly) and the store opens;
* every acknowledged message is at its acked offset with its size, topic, queue, key and body,
  readable by ``get_message`` and by ``query_message``;
* no message is stored twice, every queue's offsets are dense from 0, no record is torn, a
  batch (one writer thread uses ``put_messages``) is stored whole or not at all;
* after a clean close ``verify`` finds nothing wrong.

``ROCKETSTORE_CRASH_CYCLES`` sets the SYNC_FLUSH cycle count (default 8; the full run uses 50
or more); ASYNC_FLUSH runs a quarter as many, at least 3 (a process kill loses nothing there
either: the page cache survives); the kill-while-cleaning variant runs half as many.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus
from rocketstore.store.verify import verify_store

sys.path.insert(0, os.path.dirname(__file__))
from crash_writer import BATCH_BASE, batch_first, crash_config, expected  # noqa: E402

pytestmark = pytest.mark.crash

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")
CYCLES = int(os.environ.get("ROCKETSTORE_CRASH_CYCLES", "8"))
SEQ_STRIDE = 1_000_000


def _run_and_kill(root: str, flush_type: str, threads: int, seq_start: int, rng: random.Random,
                  cleaning: bool = False):
    proc = subprocess.Popen([sys.executable, WRITER, root, flush_type, str(threads), str(seq_start)]
                            + (["clean"] if cleaning else []),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line == "READY\n":
                ready.set()
            lines.append(line)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if rng.random() < 0.15:
        time.sleep(rng.uniform(0.0, 0.6))  # often still importing, opening or recovering
    else:
        ready.wait(30)
        time.sleep(rng.uniform(0.02, 0.8))
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    t.join(10)
    err = proc.stderr.read()  # type: ignore[union-attr]
    proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL, f"writer died on its own ({proc.returncode}):\n{err}"
    acks = {}
    for line in lines:
        if not line.endswith("\n"):
            continue  # cut by the kill
        parts = line.split()
        if parts[0] == "ACK":
            acks[int(parts[1])] = (int(parts[2]), int(parts[3]))
        elif parts[0] == "ERR":
            raise AssertionError(f"writer got {line.strip()}")
    return acks, ready.is_set()


def _check_store(root: str, flush_type: str, all_acks: dict, new_acks: dict, rng: random.Random,
                 cleaning: bool = False) -> set:
    cfg = crash_config(root, flush_type)
    with MessageStore(cfg) as store:
        assert not store.recovery_report.normal, "the child was killed: abort file expected"
        assert store.wait_dispatched(30)
        min_phy = store.get_min_phy_offset()
        if cleaning:  # acknowledged messages in deleted segments were cleaned, not lost
            all_acks = {s: v for s, v in all_acks.items() if v[0] >= min_phy}
            new_acks = {s: v for s, v in new_acks.items() if v[0] >= min_phy}
        seen: dict[int, tuple] = {}
        for topic, qids in store.topics().items():
            for qid in qids:
                lo = store.get_min_offset_in_queue(topic, qid)
                assert lo == 0 or cleaning
                hi = store.get_max_offset_in_queue(topic, qid)
                off = lo
                while off < hi:
                    g = store.get_message("crash", topic, qid, off, 32)
                    assert g.status is GetStatus.FOUND, (topic, qid, off, g.status)
                    for m in g.messages:
                        assert m.queue_offset == off, "queue offsets must be dense"
                        seq = int(m.body.split(b":", 1)[0])
                        assert seq not in seen, f"message {seq} stored twice"
                        e_topic, e_qid, e_key, e_body = expected(seq)
                        assert (m.topic, m.queue_id, m.keys, m.body) == (e_topic, e_qid, [e_key], e_body), \
                            f"message {seq} corrupted"
                        seen[seq] = (m.commitlog_offset, m.store_size)
                        off += 1
                    assert g.next_begin_offset == off
        for seq in seen:  # a batch is all or nothing
            if seq % SEQ_STRIDE >= BATCH_BASE:  # (cleaning deletes whole segments: never half)
                first = batch_first(seq)
                assert all(first + i in seen for i in range(3)), f"batch {first} partly stored"
        missing = [s for s in all_acks if s not in seen]
        assert not missing, f"{len(missing)} acknowledged message(s) lost, e.g. {missing[:5]}"
        for seq, (offset, size) in all_acks.items():
            assert seen[seq] == (offset, size), f"message {seq} moved"
        fresh = sorted(new_acks)
        sample = rng.sample(fresh, min(300, len(fresh))) + rng.sample(sorted(all_acks), min(50, len(all_acks)))
        for seq in sample:
            topic, _, key, _ = expected(seq)
            got = store.query_message(topic, key).messages
            assert [m.commitlog_offset for m in got] == [all_acks[seq][0]], f"query for {key}"
    report = verify_store(root, cfg)
    assert report.ok and not report.problems, [str(p) for p in report.problems]
    return set(seen)


def _crash_cycles(tmp_path, flush_type: str, cycles: int, threads: int, seed: int,
                  cleaning: bool = False) -> None:
    rng = random.Random(seed)
    root = str(tmp_path / "store")
    all_acks: dict[int, tuple[int, int]] = {}
    total_written = 0
    for cycle in range(cycles):
        acks, _ = _run_and_kill(root, flush_type, threads, (cycle + 1) * SEQ_STRIDE, rng, cleaning)
        all_acks.update(acks)
        if not os.path.exists(os.path.join(root, "abort")):
            continue  # killed before the store ever opened: nothing to recover
        total_written = len(_check_store(root, flush_type, all_acks, acks, rng, cleaning))
    assert len(all_acks) > 0, "no put was acknowledged in any cycle"
    assert cleaning or total_written >= len(all_acks)


@pytest.mark.timeout(max(600, CYCLES * 30))
def test_crash_sync_flush(tmp_path):
    _crash_cycles(tmp_path, "SYNC_FLUSH", CYCLES, threads=4, seed=CYCLES)


@pytest.mark.timeout(max(600, CYCLES * 30))
def test_crash_async_flush(tmp_path):
    _crash_cycles(tmp_path, "ASYNC_FLUSH", max(3, CYCLES // 4), threads=4, seed=CYCLES + 1)


@pytest.mark.timeout(max(600, CYCLES * 30))
def test_crash_while_cleaning(tmp_path):
    """Every segment but the last is expired at once and the clean service runs every 50 ms in
    the child, so kills also land between a CommitLog deletion and the ConsumeQueue/index
    follow-up: what remains must be whole, dense from the corrected minimum, and verify clean."""
    _crash_cycles(tmp_path, "SYNC_FLUSH", max(3, CYCLES // 2), threads=4, seed=CYCLES + 2, cleaning=True)
    segments = sorted(os.listdir(tmp_path / "store" / "commitlog"))
    assert segments and int(segments[0]) > 0, "the clean service never deleted a segment"
