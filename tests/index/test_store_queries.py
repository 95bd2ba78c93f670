"""Key queries through the store facade (CONTRACT §3): exact results, reopen after a clean
shutdown and after a killed process (abort file left behind), and the RocketMQ-written store."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.format.message import TRANSACTION_ROLLBACK_TYPE



def _cfg(root, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(root), mapped_file_size_commitlog=64 * 1024,
                mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=13, max_index_num=41)
    base.update(kw)
    return StoreConfig(**base)


def _messages(n: int):
    """(topic, keys) per message: colliding topics/keys, repeats, a key equal across topics."""
    out = []
    for i in range(n):
        topic = ["AaTopic", "BBTopic", "Orders"][i % 3]
        keys = [["Aa"], ["BB"], ["BB", "Aa"], [f"order-{i % 7}", f"order-{i % 7}"], []][i % 5]
        out.append((topic, keys))
    return out


def _expected(stored, topic, key, limit=32):
    """stored: list of (offset, topic, keys, uniq) in put order -> newest first."""
    return [o for o, t, ks, u in reversed(stored) if t == topic and (key in ks or u == key)][:limit]


def _check_all(store, stored):
    for topic in ("AaTopic", "BBTopic", "Orders"):
        for key in ["Aa", "BB", "Cc"] + [f"order-{j}" for j in range(7)]:
            q = store.query_message(topic, key, max_num=32)
            got = [m.commitlog_offset for m in q.messages]
            assert got == _expected(stored, topic, key), (topic, key)
            assert all(m.topic == topic for m in q.messages)
    for off, topic, _, uniq in stored[::11]:
        q = store.query_message(topic, uniq, max_num=32)
        assert [m.commitlog_offset for m in q.messages] == [off]


def _put_all(store, n):
    stored = []
    for topic, keys in _messages(n):
        r = store.put_message(Message(topic=topic, body=b"b" * 20, keys=keys or None))
        m = store.look_message_by_offset(r.wrote_offset)
        stored.append((r.wrote_offset, topic, keys, m.uniq_key))
    assert store.wait_dispatched(timeout=10.0)
    return stored


def _entries(root):
    import struct
    total = 0
    d = os.path.join(root, "index")
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as fh:
            c = struct.unpack_from(">i", fh.read(40), 36)[0]
        total += max(c, 1) - 1
    return total


def _keys_total(stored):
    return sum(len(ks) + (1 if u else 0) for _, _, ks, u in stored)


def test_exact_queries_and_clean_reopen(tmp_path):
    root = tmp_path / "s"
    with MessageStore(_cfg(root)) as store:
        stored = _put_all(store, 150)
        _check_all(store, stored)
        q = store.query_message("AaTopic", "Aa", max_num=3)
        assert len(q.messages) == 3 and q.index_last_update_phyoffset == stored[-1][0]
    assert not os.path.exists(root / "abort")
    assert len(os.listdir(root / "index")) > 5  # 40 entries per file: queries span files
    assert _entries(root) == _keys_total(stored)
    with MessageStore(_cfg(root)) as store:
        _check_all(store, stored)
        more = _put_all(store, 30)
        _check_all(store, stored + more)
    assert _entries(root) == _keys_total(stored + more)  # nothing indexed twice


def test_time_window_and_view_by_id(tmp_path):
    with MessageStore(_cfg(tmp_path / "s")) as store:
        r1 = store.put_message(Message(topic="T", body=b"1", keys=["k"]))
        r2 = store.put_message(Message(topic="T", body=b"2", keys=["k"]))
        assert store.wait_dispatched(timeout=10.0)
        ts1, ts2 = r1.store_timestamp, r2.store_timestamp
        q = store.query_message("T", "k", max_num=32, begin=0, end=None)
        assert [m.commitlog_offset for m in q.messages] == [r2.wrote_offset, r1.wrote_offset]
        q = store.query_message("T", "k", max_num=32, begin=ts2 + 1, end=None)
        assert q.messages == []
        q = store.query_message("T", "k", max_num=32, begin=0, end=ts1)
        assert r1.wrote_offset in [m.commitlog_offset for m in q.messages]
        assert store.view_message_by_id(r2.msg_id).commitlog_offset == r2.wrote_offset


_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    from rocketstore import Message, MessageStore, StoreConfig
    from tests.index.test_store_queries import _cfg, _put_all
    store = MessageStore(_cfg({root!r}))
    stored = _put_all(store, {n})
    store.wait_dispatched(timeout=10.0)
    print(json.dumps(stored), flush=True)
    sys.stdin.read()  # wait to be killed
""")


def test_killed_process_reopen_loses_no_index_entry(tmp_path):
    root = str(tmp_path / "s")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _CHILD.format(repo=repo, root=root, n=200)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline()
        assert line, "child writer died"
        stored = [tuple(x) for x in json.loads(line)]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert os.path.exists(os.path.join(root, "abort"))
    before = sorted(os.listdir(os.path.join(root, "index")))
    # which files the next open may trust, read from the raw bytes: RocketMQ's rule keeps an
    # index file after a crash only if its header's end time is not newer than the
    # checkpoint's indexMsgTimestamp (whichever file happened to be flushed at the kill)
    with open(os.path.join(root, "checkpoint"), "rb") as fh:
        trusted = struct.unpack_from(">q", fh.read(24), 16)[0]
    end_ts = {}
    for name in before:
        with open(os.path.join(root, "index", name), "rb") as fh:
            end_ts[name] = struct.unpack_from(">q", fh.read(16), 8)[0]
    with MessageStore(_cfg(root)) as store:
        assert not store.last_exit_ok
        after = set(os.listdir(os.path.join(root, "index")))
        for name in before:
            assert (name in after) == (end_ts[name] <= trusted), (name, end_ts[name], trusted)
        _check_all(store, stored)
    assert _entries(root) == _keys_total(stored)


def _fixture_cfg(root, manifest):
    c = manifest["config"]
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=c["mappedFileSizeCommitLog"],
                       mapped_file_size_consume_queue=c["mappedFileSizeConsumeQueue"],
                       max_hash_slot_num=c["maxHashSlotNum"], max_index_num=c["maxIndexNum"],
                       store_host="127.0.0.1:10911")


@pytest.mark.parametrize("which", ["store", "store-unclean"])
def test_rocketmq_store_answers_exactly(rmq_fixture, which):
    root, manifest = rmq_fixture
    with MessageStore(_fixture_cfg(root / which, manifest)) as store:
        assert store.wait_dispatched(timeout=10.0)
        for q in manifest["queryMessage"]:
            topic, key = q["topic"], q["key"]
            exp = []
            for m in sorted(manifest["messages"], key=lambda m: -m["wroteOffset"]):
                if m["storedTopic"] != topic or (m["sysFlag"] & 0xC) == TRANSACTION_ROLLBACK_TYPE:
                    continue
                kp = m["properties"].get("KEYS", "").split(" ")
                if key in kp or m["properties"].get("UNIQ_KEY") == key:
                    exp.append(m["wroteOffset"])
            got = [x.commitlog_offset for x in store.query_message(topic, key, max_num=32).messages]
            assert got == exp[:32], q["indexKey"]


def test_index_disabled_then_enabled_catches_up(tmp_path):
    root = tmp_path / "s"
    with MessageStore(_cfg(root)) as store:
        first = _put_all(store, 40)
    with MessageStore(_cfg(root, message_index_enable=False)) as store:
        more = _put_all(store, 40)  # not indexed now
        with pytest.raises(Exception, match="disabled"):
            store.query_message("Orders", "order-1")
    with MessageStore(_cfg(root)) as store:  # the reput restarts at the index's end
        assert store.wait_dispatched(timeout=10.0)
        _check_all(store, first + more)
    assert _entries(root) == _keys_total(first + more)
