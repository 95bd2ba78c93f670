"""Corruption fuzz: random truncation or byte flips in the tail of the last CommitLog segment,
of a ConsumeQueue file and of an index file. The store must open, never crash, keep every
message outside the damaged bytes, never return a message twice, say in its recovery report
what it dropped, and verify clean after a close.

RocketMQ's v1 record has a CRC over the body only: a flipped byte in a record's topic, queue id,
hosts or property values cannot be told from a real value. Such a record is the one thing that
may come back altered — only a record overlapping the damaged bytes, never any other.
ConsumeQueue and index damage loses nothing: both are rebuilt from the CommitLog."""
from __future__ import annotations

import os
import random
import shutil

import pytest

from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus
from rocketstore.store.verify import verify_store

from .helpers import small_config

N = 400
TOPICS = [("FuzzA", 0), ("FuzzA", 1), ("FuzzB", 0)]
CASES = int(os.environ.get("ROCKETSTORE_FUZZ_CASES", "36"))


def _cfg(root):
    return small_config(root, mapped_file_size_commitlog=16 * 1024, mapped_file_size_consume_queue=20 * 64,
                        max_hash_slot_num=64, max_index_num=300)


def _body(seq: int) -> bytes:
    return f"{seq}|".encode() + bytes((seq + i) % 256 for i in range(seq % 90 + 10))


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz") / "template"
    offsets, sizes = {}, {}
    with MessageStore(_cfg(root)) as store:
        for seq in range(N):
            topic, qid = TOPICS[seq % 3]
            r = store.put_message(Message(topic=topic, body=_body(seq), keys=[f"key{seq}"], queue_id=qid))
            assert r.ok
            offsets[seq] = r.wrote_offset
            sizes[seq] = r.wrote_bytes
        assert store.wait_dispatched(10)
    return root, offsets, sizes


def _flip(path, lo: int, hi: int, rng: random.Random, count: int) -> tuple[int, int]:
    touched = []
    with open(path, "r+b") as fh:
        for _ in range(count):
            pos = rng.randrange(lo, hi)
            fh.seek(pos)
            b = fh.read(1)
            fh.seek(pos)
            fh.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
            touched.append(pos)
    return min(touched), max(touched) + 1


def _zero_from(path, pos: int) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(bytes(size - pos))


def _damage(root, rng: random.Random, offsets) -> tuple[str, tuple[int, int] | None]:
    """Damage one file; returns (description, damaged CommitLog byte range or None)."""
    kind = rng.choice(["commitlog", "consumequeue", "index"])
    how = rng.choice(["flip", "zero", "shorten"])
    if kind == "commitlog":
        segs = sorted(os.listdir(root / "commitlog"))
        path = root / "commitlog" / segs[-1]
        end = max(offsets.values()) + 100 - int(segs[-1])  # about the end of data in it
        lo = max(0, end - 2048)
    elif kind == "consumequeue":
        topic, qid = rng.choice(TOPICS)
        qdir = root / "consumequeue" / topic / str(qid)
        files = sorted(os.listdir(qdir))
        path = qdir / files[-1]
        with open(path, "rb") as fh:
            data = fh.read()
        end = len(data.rstrip(b"\0")) + 1
        lo = max(0, end - 200)
    else:
        files = sorted(os.listdir(root / "index"))
        path = root / "index" / files[-1]
        with open(path, "rb") as fh:
            data = fh.read()
        end = len(data.rstrip(b"\0")) + 1
        lo = max(40 + 64 * 4, end - 200)  # entries only: header and slots are the file's head
        how = "flip" if how == "shorten" else how
    size = os.path.getsize(path)
    hi = min(size, end + 60)
    if how == "flip":
        a, b = _flip(path, lo, hi, rng, rng.randint(1, 8))
    elif how == "zero":
        a, b = rng.randrange(lo, hi), size
        _zero_from(path, a)
    else:
        a, b = rng.randrange(lo, hi), size
        os.truncate(path, a)
    base = int(os.path.basename(path)) if kind == "commitlog" else None
    rng_abs = (base + a, base + b) if base is not None else None
    return f"{kind}/{how} {os.path.basename(path)} [{a}, {b})", rng_abs


@pytest.mark.parametrize("seed", range(CASES))
def test_corruption_fuzz(template, tmp_path, seed):
    src, offsets, sizes = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    rng = random.Random(seed)
    what, damaged = _damage(root, rng, offsets)
    dlo, dhi = damaged if damaged else (1 << 62, 1 << 62)

    def overlaps(offset: int, size: int) -> bool:
        return offset < dhi and offset + size > dlo

    if rng.random() < 0.5:
        (root / "abort").write_text("1")
    with MessageStore(_cfg(root)) as store:
        rep = store.recovery_report
        assert store.wait_dispatched(10)
        found = {}
        for topic, qids in store.topics().items():
            for qid in qids:
                off = store.get_min_offset_in_queue(topic, qid)
                assert off == 0 or (topic, qid) not in TOPICS, what  # a flipped queue id/topic
                hi = store.get_max_offset_in_queue(topic, qid)
                while off < hi:
                    g = store.get_message("g", topic, qid, off, 32)
                    assert g.status is GetStatus.FOUND, (what, topic, qid, off, g.status)
                    for m in g.messages:
                        assert m.queue_offset == off, what
                        off += 1
                        seq = offsets_inv(offsets).get(m.commitlog_offset)
                        intact = (seq is not None and m.body == _body(seq) and m.keys == [f"key{seq}"]
                                  and TOPICS[seq % 3] == (topic, qid))
                        if not intact:
                            assert overlaps(m.commitlog_offset, m.store_size), (what, m)
                            continue
                        assert seq not in found, f"{what}: message {seq} twice"
                        found[seq] = m.commitlog_offset
        end = rep.truncated_at if rep.truncated_at is not None else store.get_max_phy_offset()
        required = {s for s, o in offsets.items() if o + sizes[s] <= end and not overlaps(o, sizes[s])}
        assert required <= set(found), (what, sorted(required - set(found))[:5], rep.summary())
        if len(found) < N:
            assert rep.dropped_anything, (what, rep.summary())
        for seq in rng.sample(sorted(required), 20) + sorted(required)[-5:]:
            topic, _ = TOPICS[seq % 3]
            got = store.query_message(topic, f"key{seq}").messages
            assert [m.commitlog_offset for m in got] == [found[seq]], (what, seq, rep.summary())
        # writing continues
        r = store.put_message(Message(topic="FuzzA", body=_body(10_000), keys=["after"]))
        assert r.ok
    report = verify_store(root, _cfg(root))
    assert report.ok and not report.problems, (what, [str(p) for p in report.problems])


_INV: dict = {}


def offsets_inv(offsets: dict) -> dict:
    key = id(offsets)
    if key not in _INV:
        _INV[key] = {o: s for s, o in offsets.items()}
    return _INV[key]
