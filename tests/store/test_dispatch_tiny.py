"""The plain-Python dispatch of tiny batches writes the same ConsumeQueue and index bytes as the
numpy path: the same records, cut into batches of random sizes, dispatched once with every batch
through numpy and once with every batch through plain Python, give byte-identical files (with
index and ConsumeQueue files small enough to roll over many times)."""
from __future__ import annotations

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore
from rocketstore.format.batch import decode_records
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.dispatch import ConsumeQueueDispatcher, ConsumeQueueTable
from rocketstore.store.index_service import IndexService
from tests.conftest import small_config

TRAN = [0x0, 0x4, 0x8, 0xC]  # NOT, PREPARED, COMMIT, ROLLBACK (sys_flag bits 2-3)
key_text = st.text(st.sampled_from("ab Z😀é#"), max_size=6)
messages = st.lists(st.builds(
    lambda topic, qid, keys, uniq, tran, tags: Message(
        topic, b"body", queue_id=qid, keys=keys, tags=tags, sys_flag=tran,
        properties={"UNIQ_KEY": uniq} if uniq is not None else {}),
    topic=st.sampled_from(["T", "日志", "Tb"]), qid=st.integers(0, 2),
    keys=st.none() | st.lists(key_text, max_size=3) | key_text,
    uniq=st.none() | st.sampled_from(["U1", "0A0B0C"]), tran=st.sampled_from(TRAN),
    tags=st.none() | st.sampled_from(["TagA", "标签"])), min_size=1, max_size=60)


def _dispatch_all(root: str, records: list, cuts: list[int], tiny: int) -> dict[str, list[bytes]]:
    cfg = small_config(root, mapped_file_size_consume_queue=20 * 4, max_hash_slot_num=7,
                       max_index_num=6)
    table = ConsumeQueueTable(cfg)
    cqd = ConsumeQueueDispatcher(table, lambda ts: None, tiny_batch=tiny)
    index = IndexService(cfg, StoreCheckpoint(os.path.join(root, "checkpoint")))
    index.tiny_batch = tiny
    buf, base, bounds = records
    i, k = 0, 0
    while i < len(bounds) - 1:
        j = min(len(bounds) - 1, i + cuts[k % len(cuts)])
        recs = decode_records(buf, bounds[i], bounds[j], base_offset=base)
        assert len(recs) == j - i
        cqd.dispatch(recs)
        index.dispatch(recs)
        i, k = j, k + 1
    index.shutdown()  # flushes and closes every index file
    for cq in table:
        cq.flush()
        cq.close()
    files: dict[str, list] = {}
    for sub in ("consumequeue", "index"):
        out = []
        top = os.path.join(root, sub)
        for dirpath, _, names in sorted(os.walk(top)):
            for name in sorted(names):
                with open(os.path.join(dirpath, name), "rb") as f:
                    # index files are named by creation time; compare them in order by content
                    label = os.path.relpath(dirpath, top) if sub == "consumequeue" else ""
                    out.append((label, name if sub == "consumequeue" else "", f.read()))
        files[sub] = out
    return files


@settings(max_examples=20, deadline=None)
@given(msgs=messages, cuts=st.lists(st.integers(1, 12), min_size=1, max_size=6))
def test_tiny_dispatch_writes_the_same_bytes_as_numpy(msgs, cuts):
    with tempfile.TemporaryDirectory() as tmp:
        cfg = small_config(os.path.join(tmp, "src"), mapped_file_size_commitlog=1 << 20)
        with MessageStore(cfg) as store:
            for m in msgs:
                assert store.put_message(m).ok
            mf = store.commitlog.queue.first()
            end = mf.wrote_position
            all_recs = decode_records(mf.mm, 0, end, base_offset=mf.file_from_offset)
            assert len(all_recs) == len(msgs)
            bounds = all_recs.pos.tolist() + [end]
            records = (bytes(mf.mm[:end]), mf.file_from_offset, bounds)
        numpy_files = _dispatch_all(os.path.join(tmp, "numpy"), records, cuts, tiny=0)
        python_files = _dispatch_all(os.path.join(tmp, "python"), records, cuts, tiny=10**9)
        assert numpy_files["consumequeue"] == python_files["consumequeue"]
        assert numpy_files["index"] == python_files["index"]
        assert numpy_files["index"], "every message has a UNIQ_KEY: something is indexed"
