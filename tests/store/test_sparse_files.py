"""ConsumeQueue and index files are sparse: each has its full configured length (RocketMQ's
``MappedFileQueue.load`` refuses any other), zeros where nothing is written, and disk blocks only
for what is used — 200 one-message queues cost 200 pages, not 200 × 5.7 MiB. Reading, recovery
and appending after a restart see exactly what a fully allocated file gave. (RocketMQ's own
broker opening such a store: ``tests/broker/test_interop_java_reads_our_ext_store.py``.)"""
from __future__ import annotations

import os

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.store.mapped_file import OS_PAGE_SIZE, next_allocation


def blocks_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_allocation_grows_from_a_page_by_doubling_up_to_a_mebibyte():
    size = 6_000_000
    steps, a = [], 0
    while a < size:
        a = next_allocation(a, a + 1, size)
        steps.append(a)
    assert steps[:4] == [4096, 8192, 16384, 32768]
    assert all(b - a <= 1 << 20 for a, b in zip(steps, steps[1:])) and steps[-1] == size
    assert all(s % OS_PAGE_SIZE == 0 for s in steps[:-1])
    assert next_allocation(0, 100_000, size) == 102_400  # a big first write: what it needs


def test_one_message_queues_take_a_page_each_and_survive_a_restart(tmp_path):
    root = tmp_path / "s"
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=1 << 20)
    cq_size = cfg.mapped_file_size_consume_queue // 20 * 20
    topics = [f"T{i}" for i in range(25)]
    with MessageStore(cfg) as store:
        for t in topics:
            for q in range(8):
                assert store.put_message(Message(topic=t, body=f"{t}-{q}".encode(), queue_id=q,
                                                 keys=[f"k-{t}-{q}"])).ok
        assert store.wait_dispatched(10)
    cq_files = [os.path.join(d, f) for d, _, fs in os.walk(root / "consumequeue") for f in fs]
    assert len(cq_files) == 200
    for f in cq_files:
        assert os.path.getsize(f) == cq_size  # the length RocketMQ checks when it loads
        assert blocks_bytes(f) <= 2 * OS_PAGE_SIZE, f
    index = [os.path.join(root / "index", f) for f in os.listdir(root / "index")]
    assert len(index) == 1 and os.path.getsize(index[0]) > 400_000_000  # default size, sparse
    assert blocks_bytes(index[0]) < 2 << 20
    # the whole store on disk: a few MiB (fully allocated it was over 1.5 GB)
    total = sum(blocks_bytes(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    assert total < 8 << 20, total
    with MessageStore(cfg) as store:  # reopen: read, recover, then append behind the holes
        for t in topics:
            for q in range(8):
                got = store.get_message("G", t, q, 0, 32)
                assert [m.body for m in got.messages] == [f"{t}-{q}".encode()]
        assert store.put_message(Message(topic="T0", body=b"second", queue_id=0)).ok
        assert store.wait_dispatched(10)
        assert [m.body for m in store.get_message("G", "T0", 0, 0, 32).messages] == \
            [b"T0-0", b"second"]
        assert [m.body for m in store.query_message("T3", "k-T3-5").messages] == [b"T3-5"]
