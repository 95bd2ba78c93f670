"""ConsumeQueue files are opened on use and closed when idle (``store.lazy_file``): the
descriptors a store holds stay under the process-wide cap however many queues it has, and
every queue still reads, writes, recovers and appends as before."""
from __future__ import annotations

import os
import threading

import pytest

from rocketstore import Message, MessageStore
from rocketstore.store import lazy_file
from tests.conftest import small_config


def _bodies(store, topic: str, qid: int) -> list[bytes]:
    out, off = [], 0
    while off < store.get_max_offset_in_queue(topic, qid):
        got = store.get_message("G", topic, qid, off, 32)
        assert got.messages, (topic, qid, off, got.status)
        out.extend(m.body for m in got.messages)
        off = got.next_begin_offset
    return out


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def cap():
    """The cap the tests' stores set (``max_open_consume_queue_files``); restored after."""
    old = lazy_file.OPEN_FILES.limit
    yield 16
    lazy_file.OPEN_FILES.limit = old


def test_descriptors_stay_under_the_cap_with_many_queues(tmp_path, cap):
    cfg = small_config(tmp_path / "s", mapped_file_size_consume_queue=20 * 4,
                       max_open_consume_queue_files=cap)
    base = _fds()
    want: dict[tuple[str, int], list[bytes]] = {}
    with MessageStore(cfg) as store:
        for r in range(3):  # three rounds: every queue rolls to a second file (4 units a file)
            for i in range(100):
                key = (f"T{i // 8}", i % 8)
                body = f"{key}-{r}".encode()
                want.setdefault(key, []).append(body)
                assert store.put_message(Message(topic=key[0], body=body, queue_id=key[1])).ok
            if r == 1:
                for _ in range(2):
                    store.put_message(Message(topic="T0", body=b"pad", queue_id=0))
                    want[("T0", 0)].append(b"pad")
        assert store.wait_dispatched(10)
        # the store's own few (CommitLog, index, lock, checkpoint...) plus at most the cap
        assert _fds() - base <= cap + 12, _fds() - base
        for key, bodies in want.items():
            assert _bodies(store, *key) == bodies, key
        assert _fds() - base <= cap + 12
    assert _fds() <= base + 1
    with MessageStore(cfg) as store:  # recovery and appends after the restart, same cap
        assert store.recovery_report.cq_units_dropped == {}
        assert _fds() - base <= cap + 12
        for key, bodies in want.items():
            assert _bodies(store, *key) == bodies, key
            assert store.put_message(Message(topic=key[0], body=b"z", queue_id=key[1])).queue_offset \
                == len(bodies)
        assert store.wait_dispatched(10)


def test_readers_and_the_writer_race_the_closing(tmp_path, cap):
    """Pulls on one thread while dispatch writes 64 queues (so files close and reopen all the
    time): every pull sees whole units and the right bodies."""
    cfg = small_config(tmp_path / "s", max_open_consume_queue_files=cap)
    errors: list[str] = []
    stop = threading.Event()
    with MessageStore(cfg) as store:
        def reader() -> None:
            while not stop.is_set():
                for q in range(64):
                    got = store.get_message("G", f"R{q % 8}", q // 8, 0, 32)
                    for k, m in enumerate(got.messages):  # (one file: 100 units)
                        if m.body != f"{q}-{k}".encode():
                            errors.append(f"queue {q} #{k}: {m.body!r}")
                            return
        t = threading.Thread(target=reader)
        t.start()
        try:
            for k in range(20):
                for q in range(64):
                    assert store.put_message(Message(topic=f"R{q % 8}", body=f"{q}-{k}".encode(),
                                                     queue_id=q // 8)).ok
            assert store.wait_dispatched(10)
        finally:
            stop.set()
            t.join(30)
        assert not errors, errors[:3]
        for q in range(64):
            got = store.get_message("G", f"R{q % 8}", q // 8, 0, 32)
            assert [m.body for m in got.messages] == [f"{q}-{k}".encode() for k in range(20)]
