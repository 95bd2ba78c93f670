"""Damage to ConsumeQueue-ext files (``enable_consume_queue_ext``: tagsCode, store time and
SQL92 bitmap per unit, derived from the CommitLog).

* The last ext file of a queue cut short is padded at open, as the last ConsumeQueue file is:
  nothing is lost (units past the cut read as missing, so their messages pass the tag filter
  and are matched on the record, as RocketMQ does when an ext unit cannot be read).
* A non-last ext file cut short is refused with ``CorruptFileError`` naming *that* file (the
  ext file size is not guessed from a damaged file), and nothing is written.
* Any other damage: the store opens; every message is delivered to a ``*`` subscriber; one a
  tag subscriber misses (its unit's tagsCode was damaged — RocketMQ trusts it too) is flagged
  by ``verify``. ``ROCKETSTORE_FUZZ_CASES`` runs more cases.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import CorruptFileError
from rocketstore.store.verify import verify_store

N = 300
EXT_SIZE = 2048
CASES = int(os.environ.get("ROCKETSTORE_FUZZ_CASES", "40"))


def _cfg(root):
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=16384,
                       mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64,
                       max_index_num=300, enable_consume_queue_ext=True,
                       mapped_file_size_consume_queue_ext=EXT_SIZE)


@pytest.fixture(scope="module")
def ext_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("ext") / "template"
    with MessageStore(_cfg(root)) as s:
        for i in range(N):
            assert s.put_message(Message("X", b"b%d" % i, tags=f"T{i % 3}", keys=[f"k{i}"],
                                         queue_id=i % 2)).ok
        assert s.wait_dispatched(10)
    files = sorted(p.relative_to(root) for p in (root / "consumequeue_ext").rglob("*")
                   if p.is_file())
    assert len(files) >= 4  # two queues, two files each at least
    return root, files


def _snapshot(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as fh:
                out[p] = (os.path.getsize(p), hashlib.sha1(fh.read()).hexdigest())
    return out


def _pulled(store, subscription):
    got = set()
    for q in (0, 1):
        off = store.get_min_offset_in_queue("X", q)
        while off < store.get_max_offset_in_queue("X", q):
            g = store.get_message("g", "X", q, off, 32, subscription=subscription)
            for m in g.messages:
                i = int(m.body[1:])
                assert m.tags == f"T{i % 3}" and m.queue_id == i % 2
                if subscription == "*" or m.tags == subscription:
                    got.add(i)
            assert g.next_begin_offset > off
            off = g.next_begin_offset
    return got


def _check_open(root):
    with MessageStore(_cfg(root)) as s:
        assert s.wait_dispatched(10)
        assert _pulled(s, "*") == set(range(N))
        missed = set()
        for tag in ("T0", "T1", "T2"):
            want = {i for i in range(N) if f"T{i % 3}" == tag}
            missed |= want - _pulled(s, tag)
    return missed


def test_last_ext_file_cut_short_is_padded_and_loses_nothing(ext_template, tmp_path):
    src, files = ext_template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    qdir = root / files[-1].parent
    last = sorted(os.listdir(qdir))[-1]
    os.truncate(qdir / last, 100)
    assert _check_open(root) == set()
    assert os.path.getsize(qdir / last) == EXT_SIZE


def test_first_ext_file_cut_short_is_refused_naming_it(ext_template, tmp_path):
    """The ext file size was taken from the first queue's first file: cut, it made every
    other file 'not a multiple of the file size' and the error named the wrong file."""
    src, files = ext_template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    first = root / files[0]
    os.truncate(first, 997)
    before = _snapshot(root)
    with pytest.raises(CorruptFileError) as ei:
        MessageStore(_cfg(root))
    assert str(first) in str(ei.value) and "997" in str(ei.value), str(ei.value)
    after = _snapshot(root)
    for s in (before, after):
        s.pop(str(root / "lock"), None)
    assert after == before


@pytest.mark.parametrize("seed", range(CASES // 4 or 1))
def test_ext_damage_fuzz(ext_template, tmp_path, seed):
    src, files = ext_template
    root = tmp_path / "s"
    shutil.copytree(src, root)
    rng = random.Random(f"ext-{seed}")
    if rng.random() < 0.5:
        (root / "abort").write_text("1")
    rel = rng.choice(files)
    path = root / rel
    data = bytearray(path.read_bytes())
    how = rng.choice(["flip", "zero", "cut"])
    if how == "flip":
        used = len(bytes(data).rstrip(b"\0")) or len(data)
        for _ in range(rng.randint(1, 6)):
            p = rng.randrange(used)
            data[p] ^= 1 << rng.randrange(8)
        path.write_bytes(data)
    elif how == "zero":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 200))
        data[a:b] = bytes(b - a)
        path.write_bytes(data)
    else:
        os.truncate(path, rng.randrange(len(data)))
    is_last = path.name == sorted(os.listdir(path.parent))[-1]
    what = (str(rel), how, is_last)
    if how == "cut" and not is_last:
        with pytest.raises(CorruptFileError) as ei:
            MessageStore(_cfg(root))
        assert str(path) in str(ei.value), (what, str(ei.value))
        return
    missed = _check_open(root)
    if missed:
        report = verify_store(root, _cfg(root))
        assert report.errors, (what, sorted(missed)[:5])
