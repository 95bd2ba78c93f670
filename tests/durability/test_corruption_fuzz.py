"""Corruption fuzz: bytes flipped, zeroed or cut anywhere in any file — every CommitLog segment,
every ConsumeQueue file, every index file, the checkpoint — with a clean or an unclean exit.

Expected outcomes are computed by the test, not taken from the code under test:

* where the CommitLog must end: a walk of the *damaged* bytes with ``java_check`` (written
  from RocketMQ 4.9.7's ``checkMessageAndReturnSize`` in ``test_record_validity``), from the
  segment RocketMQ's recovery starts at (the last three; after a crash the newest whose first
  record is not newer than the checkpoint's ``min(physic, logics) - 3 s``);
* which messages must survive: every record the test wrote (offsets from its own puts) that
  lies wholly before that end and does not overlap a damaged byte — intact, once, by
  ConsumeQueue and by key;
* ConsumeQueue and checkpoint damage loses nothing (both are derived or advisory); index damage
  loses no message, and a key query that misses a message is flagged by ``verify`` in the
  damaged index file;
* what recovery cuts is kept in ``quarantine/`` and ``salvage_store`` brings back every
  intact record after the cut: every record the test wrote that does not overlap a damaged
  byte is then in the store exactly once;
* a non-last file cut short is refused at open with ``CorruptFileError`` naming it (RocketMQ
  refuses too), and nothing is written; so is an index file cut short or whose header holds an
  impossible hashSlotCount / indexCount (unless it is the newest after a crash: dropped).
"""
from __future__ import annotations

import os
import random
import shutil
import struct

from collections import Counter

import pytest

from rocketstore.errors import CorruptFileError
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus
from rocketstore.store.salvage import salvage_store
from rocketstore.store.verify import verify_store

from .helpers import small_config
from .test_record_validity import java_check

N = 400
TOPICS = [("FuzzA", 0), ("FuzzA", 1), ("FuzzB", 0)]
CASES = int(os.environ.get("ROCKETSTORE_FUZZ_CASES", "40"))
FIRST_SEED = int(os.environ.get("ROCKETSTORE_FUZZ_FIRST_SEED", "0"))  # long runs: new seeds
SEG = 16 * 1024
BLANK_MAGIC = -875286124
MAGICS = (-626843481, -626843477)


def _cfg(root):
    return small_config(root, mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 64,
                        max_hash_slot_num=64, max_index_num=300)


def _body(seq: int) -> bytes:
    return f"{seq}|".encode() + bytes((seq + i) % 256 for i in range(seq % 90 + 10))


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz") / "template"
    written = {}  # seq -> (offset, size, queue offset), as the puts reported them
    with MessageStore(_cfg(root)) as store:
        for seq in range(N):
            topic, qid = TOPICS[seq % 3]
            r = store.put_message(Message(topic=topic, body=_body(seq), keys=[f"key{seq}"], queue_id=qid))
            assert r.ok
            written[seq] = (r.wrote_offset, r.wrote_bytes, r.queue_offset)
        assert store.wait_dispatched(10)
    return root, written


# -- damage -------------------------------------------------------------------------------------
def _files(root, kind):
    if kind == "commitlog":
        return [root / "commitlog" / n for n in sorted(os.listdir(root / "commitlog"))]
    if kind == "consumequeue":
        out = []
        for topic, qid in TOPICS:
            d = root / "consumequeue" / topic / str(qid)
            out += [d / n for n in sorted(os.listdir(d))]
        return out
    if kind == "index":
        return [root / "index" / n for n in sorted(os.listdir(root / "index"))]
    return [root / "checkpoint"]


def _damage(root, rng: random.Random):
    """Damage one file anywhere. Returns (kind, path, how, damaged byte positions in the file)."""
    kind = rng.choice(["commitlog", "commitlog", "consumequeue", "index", "checkpoint"])
    files = _files(root, kind)
    path = rng.choice(files)
    size = os.path.getsize(path)
    how = rng.choice(["flip", "flip", "zero", "cut"] + (["delete"] if kind == "checkpoint" else []))
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    if how == "flip":
        # near written data half the time (else most flips of a preallocated file hit zeros)
        used = len(bytes(data).rstrip(b"\0")) or size
        hi = used if rng.random() < 0.5 else size
        touched = set()
        for _ in range(rng.randint(1, 8)):
            p = rng.randrange(hi)
            data[p] ^= 1 << rng.randrange(8)
            touched.add(p)
        with open(path, "r+b") as fh:
            fh.write(data)
    elif how == "zero":
        a = rng.randrange(size)
        b = rng.choice([size, min(size, a + rng.randint(1, 64))])
        with open(path, "r+b") as fh:
            fh.seek(a)
            fh.write(bytes(b - a))
        touched = set(range(a, b))
    elif how == "cut":
        a = rng.randrange(size)
        os.truncate(path, a)
        touched = set(range(a, size))
    else:
        os.unlink(path)
        touched = set()
    is_last = kind == "checkpoint" or path == max(f for f in files if f.parent == path.parent)
    return kind, path, how, touched, is_last


# -- the independent model of RocketMQ's recovery ----------------------------------------------
def _segments(root):
    out = []
    for p in _files(root, "commitlog"):
        with open(p, "rb") as fh:
            data = fh.read()
        out.append((int(p.name), data + bytes(SEG - len(data))))  # a cut last file is padded
    return out


def _checkpoint_min(root) -> int:
    try:
        with open(root / "checkpoint", "rb") as fh:
            raw = fh.read(40)
    except FileNotFoundError:
        raw = b""
    if len(raw) < 40:
        raw = bytes(40)
    physic, logics = struct.unpack_from(">qq", raw, 0)
    return max(0, min(physic, logics) - 3000)


def _expected_end(root, abnormal: bool) -> int:
    segs = _segments(root)
    if abnormal:
        start, limit = 0, _checkpoint_min(root)
        for i in range(len(segs) - 1, -1, -1):
            data = segs[i][1]
            magic, sys_flag = struct.unpack_from(">i", data, 4)[0], struct.unpack_from(">i", data, 36)[0]
            ts = struct.unpack_from(">q", data, 56 + (12 if sys_flag & 0x10 else 0))[0] \
                if magic in MAGICS else 0
            if ts != 0 and ts <= limit:
                start = i
                break
    else:
        start = max(0, len(segs) - 3)
    for base, data in segs[start:]:
        pos = 0
        while True:
            if pos + 8 <= SEG and struct.unpack_from(">i", data, pos + 4)[0] == BLANK_MAGIC:
                break  # next segment
            size = java_check(data[pos:])
            if size <= 0:
                return base + pos
            pos += size
    return segs[-1][0] + SEG


def _claims(root, written, damaged, end):
    """For each damaged record still before ``end`` (by its offset): (valid by java_check,
    (topic, queue id, queue offset) as its damaged bytes say)."""
    segs = dict(_segments(root))
    out = {}
    for seq, (o, n, _) in written.items():
        if o >= end or not any(o <= p < o + n for p in damaged):
            continue
        data = segs[o - o % SEG][o % SEG:]
        valid = java_check(data) == n
        qid, qo = struct.unpack_from(">i", data, 12)[0], struct.unpack_from(">q", data, 20)[0]
        body_len = struct.unpack_from(">i", data, 84)[0]
        tpos = 88 + max(body_len, 0)
        topic = data[tpos + 1:tpos + 1 + data[tpos]].decode("utf-8", "replace") if tpos < n else ""
        out[seq] = (valid, (topic, qid, qo))
    return out


# -- the test -----------------------------------------------------------------------------------
def _snapshot(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as fh:
                out[p] = fh.read()
    return out


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + CASES))
def test_corruption_fuzz(template, tmp_path, seed):
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    rng = random.Random(seed)
    abnormal = rng.random() < 0.5
    if abnormal:
        (root / "abort").write_text("1")
    kind, path, how, touched, is_last = _damage(root, rng)
    what = f"{kind}/{how} {path.name} ({len(touched)} byte(s)){' after a crash' if abnormal else ''}"
    if how == "cut" and not is_last and kind in ("commitlog", "consumequeue"):
        before = _snapshot(root)
        with pytest.raises(CorruptFileError) as ei:
            MessageStore(_cfg(root))
        assert path.name in str(ei.value), what
        after = _snapshot(root)
        after.pop(str(root / "lock"), None)
        before.pop(str(root / "lock"), None)
        assert after == before, what
        return
    base = int(path.name) if kind == "commitlog" else None
    damaged = {base + p for p in touched} if base is not None else set()
    end = _expected_end(root, abnormal)

    def overlaps(offset: int, size: int) -> bool:
        return any(offset <= p < offset + size for p in damaged)

    must_survive = {s for s, (o, n, _) in written.items() if o + n <= end and not overlaps(o, n)}
    claims = _claims(root, written, damaged, end)
    # a damaged record that still passes RocketMQ's rule but claims another's queue position
    # may take its ConsumeQueue unit: that one must still be found by key
    shadowed = {s for s in must_survive
                if any(v and c == (TOPICS[s % 3][0], TOPICS[s % 3][1], written[s][2])
                       for v, c in claims.values())}
    invalid_left = any(not v for v, _ in claims.values())
    gone = {s for s, (o, n, _) in written.items() if o >= end}
    by_offset = {o: s for s, (o, _, _) in written.items()}
    try:
        store = MessageStore(_cfg(root))
    except CorruptFileError as exc:  # an index file cut short (after a crash the newest is dropped)
        # or with an impossible hashSlotCount / indexCount (seed 1657 of 3000): refused alike
        header = any(32 <= p < 40 for p in touched)
        assert kind == "index" and (how == "cut" or header) and not (abnormal and is_last), \
            (what, exc)
        assert path.name in str(exc), (what, exc)
        return
    with store:
        rep = store.recovery_report
        assert store.get_max_phy_offset() == end, (what, rep.summary())
        assert store.wait_dispatched(10), (what, store.dispatch_health())
        found = {}
        for topic, qid in TOPICS:
            off = store.get_min_offset_in_queue(topic, qid)
            hi = store.get_max_offset_in_queue(topic, qid)
            while off < hi:
                g = store.get_message("g", topic, qid, off, 32)
                assert g.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE), \
                    (what, topic, qid, off, g.status)  # (a window of filler units only)
                assert g.next_begin_offset > off, what
                for m in g.messages:
                    seq = by_offset.get(m.commitlog_offset)
                    intact = (seq is not None and m.body == _body(seq) and m.keys == [f"key{seq}"]
                              and TOPICS[seq % 3] == (topic, qid)
                              and m.queue_offset == written[seq][2])
                    if not intact:  # must be a damaged record: by where it says or by its body
                        head = m.body.split(b"|", 1)[0]
                        cand = {seq, int(head) if head.isdigit() and int(head) < N else None} - {None}
                        assert overlaps(m.commitlog_offset, m.store_size) or any(
                            overlaps(*written[c][:2]) for c in cand), (what, m)
                    else:
                        assert seq not in found, f"{what}: message {seq} twice"
                        found[seq] = m.commitlog_offset
                off = g.next_begin_offset
        missing = sorted(must_survive - set(found) - shadowed)
        assert not missing, (what, missing[:5], rep.summary())
        assert not gone & set(found), what
        for seq in sorted(gone)[:5]:
            assert store.look_message_by_offset(written[seq][0]) is None, what
        missed_keys = []
        sample = rng.sample(sorted(must_survive), min(25, len(must_survive))) + sorted(must_survive)[-5:]
        for seq in sample + sorted(shadowed):
            topic, _ = TOPICS[seq % 3]
            got = store.query_message(topic, f"key{seq}").messages
            assert all(m.keys == [f"key{seq}"] for m in got), what  # never a wrong message
            # (a damaged record may now carry this key too, seed 6621 of 8000: not a miss)
            if [m.commitlog_offset for m in got if not overlaps(m.commitlog_offset, m.store_size)] \
                    != [written[seq][0]]:
                missed_keys.append(seq)
        assert not missed_keys or kind == "index", (what, missed_keys[:5], rep.summary())
        r = store.put_message(Message(topic="FuzzA", body=_body(10_000), keys=["after"]))
        assert r.ok, (what, r)
        # what recovery cut is in quarantine/, and salvage brings back every intact record
        intact_cut = {s for s, (o, n, _) in written.items() if o >= end and not overlaps(o, n)}
        if intact_cut:
            assert rep.quarantined and os.path.isdir(rep.quarantined), (what, rep.summary())
        results = salvage_store(store)
        # an append may fail only for a damaged record that its CRC does not cover
        failed = [by_offset.get(f["offset"]) for r in results for f in r["failed"]]
        assert all(s is not None and overlaps(*written[s][:2]) for s in failed), (what, results)
        assert store.wait_dispatched(10), what
        seen = Counter()
        for topic, qid in TOPICS:
            off, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
            while off < hi:
                g = store.get_message("g", topic, qid, off, 32)
                seen.update(m.body for m in g.messages if m.keys != ["after"])
                off = g.next_begin_offset
        lost = sorted(s for s in (must_survive - shadowed) | intact_cut if seen[_body(s)] != 1)
        assert not lost, (what, lost[:5], [seen[_body(s)] for s in lost[:5]], rep.summary())
        for seq in sorted(intact_cut)[:5]:  # by key too, with the original UNIQ_KEY kept
            got = store.query_message(TOPICS[seq % 3][0], f"key{seq}").messages
            assert [m.body for m in got] == [_body(seq)], what
    report = verify_store(root, _cfg(root))
    left_damaged = bool(claims)  # damaged records recovery kept (valid, or before its scan)
    if invalid_left:  # a record RocketMQ's rule rejects, before where recovery scans: verify names it
        assert any(p.severity == "error" and p.file.endswith(path.name) for p in report.problems), \
            (what, [str(p) for p in report.problems])
    elif missed_keys and not left_damaged:
        assert any(p.severity == "error" and p.file.endswith(path.name) for p in report.problems), \
            (what, missed_keys[:5], [str(p) for p in report.problems])
    elif kind != "index" and not left_damaged:
        assert report.ok, (what, [str(p) for p in report.problems if p.severity == "error"])


def test_cq_tail_cut_at_a_file_start_then_commitlog_truncated_below_it(template, tmp_path):
    """Found by this fuzz (seed 1021 of 3000): the ConsumeQueue tail check cut a queue exactly at
    a file boundary (its last file left empty), then the CommitLog was truncated below that
    queue's last units: every unit pointing at or beyond the new end must go, not only those
    in the empty file."""
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    per_file = 20 * 64 // 20
    cut_q = 2 * per_file  # FuzzA/1's queue offset at the start of its third file
    cut_seq = 3 * cut_q + 1
    early_seq = cut_seq - 3 * 17  # FuzzA/1 as well, 17 units earlier, inside the tail check
    assert TOPICS[cut_seq % 3] == TOPICS[early_seq % 3] == ("FuzzA", 1)
    assert written[cut_seq][2] == cut_q
    # early: its BODYCRC (recovery truncates there); cut: its QUEUEOFFSET (the unit no longer
    # matches the record it points at, the tail check cuts the queue there)
    for seq, pos in ((early_seq, 8 + 3), (cut_seq, 20 + 7)):
        off = written[seq][0]
        seg = root / "commitlog" / f"{off - off % SEG:020d}"
        with open(seg, "r+b") as fh:
            fh.seek(off % SEG + pos)
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 0x40]))
    end = written[early_seq][0]
    with MessageStore(_cfg(root)) as store:
        assert store.recovery_report.truncated_at == end
        assert store.wait_dispatched(10)
        assert store.get_max_offset_in_queue("FuzzA", 1) == written[early_seq][2]
        g = store.get_message("g", "FuzzA", 1, written[early_seq][2] - 1, 32)
        assert [m.commitlog_offset for m in g.messages] == [written[early_seq - 3][0]]
        r = store.put_message(Message(topic="FuzzA", body=_body(10_000), keys=["after"],
                                      queue_id=1))
        assert r.ok and r.queue_offset == written[early_seq][2]
    report = verify_store(root, _cfg(root))
    assert report.ok, [str(p) for p in report.problems if p.severity == "error"]


def _meta_snapshot(root):
    """Every path with its size, mtime and content (directories: their entries and mtime)."""
    out = {}
    for d, dirs, names in os.walk(root):
        st = os.stat(d)
        out[d] = (st.st_mtime_ns, tuple(sorted(dirs + names)))
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[p] = (st.st_size, st.st_mtime_ns, fh.read())
    return out


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + max(1, CASES // 4)))
def test_read_only_reads_of_a_damaged_store_write_nothing(template, tmp_path, seed):
    """What ``inspect``/``get``/``query``/``topics --store`` and ``verify`` do, over a store
    damaged as above (after a crash or not): they may fail with a clear error, never write."""
    from rocketstore.commands.live import OfflineState
    from rocketstore.errors import RocketStoreError
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    rng = random.Random(f"ro-{seed}")
    if rng.random() < 0.5:
        (root / "abort").write_text("1")
    kind, path, how, _, _ = _damage(root, rng)
    before = _meta_snapshot(root)
    try:
        with MessageStore.open_read_only(str(root)) as ro:
            for topic, qid in TOPICS:
                off = ro.get_min_offset_in_queue(topic, qid)
                while off < ro.get_max_offset_in_queue(topic, qid):
                    g = ro.get_message("g", topic, qid, off, 64)
                    if g.next_begin_offset <= off:
                        break
                    off = g.next_begin_offset
            for seq in rng.sample(sorted(written), 10):
                ro.query_message(TOPICS[seq % 3][0], f"key{seq}")
            st = OfflineState(ro, str(root))
            assert {t.topic_name for t in st.topics.topics()} >= {"FuzzA", "FuzzB"} or \
                kind == "consumequeue"
    except RocketStoreError as exc:
        assert str(exc), (kind, how)  # refused, with a message
    verify_store(root, _cfg(root), check_lock=False)
    assert _meta_snapshot(root) == before, (kind, how, path.name)


@pytest.mark.parametrize("crash", [False, True])
def test_newest_index_file_emptied_under_its_range_is_rebuilt(template, tmp_path, crash):
    """Found by this fuzz (seed 2311 of 3000): an index file's indexCount, slots and entries
    zeroed, its begin/end range intact; after a crash the newer file was dropped and this one
    became the newest. Recovery read it as empty and went on indexing from its end offset: every
    key of its range was lost for good (and ``verify`` saw a consistent file). It must be
    dropped and rebuilt from the previous file's end: every key is found again."""
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    names = sorted(os.listdir(root / "index"))
    assert len(names) >= 3
    if crash:
        (root / "abort").write_text("1")
        with open(root / "checkpoint", "r+b") as fh:  # index time: the second file's end
            fh.seek(16)
            with open(root / "index" / names[1], "rb") as f0:
                f0.seek(8)
                fh.write(f0.read(8))
        victim = names[1]
    else:
        victim = names[-1]
    with open(root / "index" / victim, "r+b") as fh:
        fh.seek(32)
        fh.write(bytes(os.path.getsize(root / "index" / victim) - 32))
    with MessageStore(_cfg(root)) as store:
        assert store.wait_dispatched(10)
        missed = [seq for seq in written
                  if [m.commitlog_offset for m in
                      store.query_message(TOPICS[seq % 3][0], f"key{seq}").messages]
                  != [written[seq][0]]]
        assert not missed, (len(missed), missed[:5], store.recovery_report.summary())
    report = verify_store(root, _cfg(root))
    assert report.ok, [str(p) for p in report.problems if p.severity == "error"]


def _flip(root, offset, pos, mask):
    seg = root / "commitlog" / f"{offset - offset % SEG:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(offset % SEG + pos)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ mask]))


def _missed_keys(store, written, seqs):
    return [seq for seq in seqs
            if [m.commitlog_offset for m in store.query_message(TOPICS[seq % 3][0],
                                                                f"key{seq}").messages]
            != [written[seq][0]]]


def test_a_damaged_store_time_in_a_valid_record_hides_no_other_key(template, tmp_path):
    """Found by this fuzz (seed 3296 of 8000): a flipped STORETIMESTAMP passes RocketMQ's rule
    (the CRC covers the body only); indexed last, it became its index file's endTimestamp (here
    negative) and the key query's own overlap test skipped the whole file. RocketMQ's
    ``isTimeMatched`` (a window that encloses the file's range matches) keeps it."""
    from rocketstore.format.record import store_timestamp_pos
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    bad, cut = N - 50, N - 49
    _flip(root, written[bad][0], store_timestamp_pos(0), 0x80)  # now a negative time
    _flip(root, written[cut][0], 8, 0x01)  # BODYCRC: recovery truncates here
    with MessageStore(_cfg(root)) as store:
        assert store.recovery_report.truncated_at == written[cut][0]
        assert store.wait_dispatched(10)
        missed = _missed_keys(store, written, range(bad))
        assert not missed, (len(missed), missed[:5], store.recovery_report.summary())


def test_index_file_with_a_future_end_time_after_a_crash_leaves_no_hole(template, tmp_path):
    """Found by this fuzz (seed 5767 of 8000): after a crash, index files whose endTimestamp is
    newer than the checkpoint's are dropped (RocketMQ's rule) — one by one, so a damaged
    *first* file went and the later ones stayed, and its keys were never indexed again. Once
    one file is dropped, every later file goes too and all of it is re-indexed."""
    src, written = template
    root = tmp_path / "store"
    shutil.copytree(src, root)
    names = sorted(os.listdir(root / "index"))
    assert len(names) >= 3
    (root / "abort").write_text("1")
    with open(root / "index" / names[1], "rb") as fh:
        fh.seek(8)
        second_end = fh.read(8)
    with open(root / "checkpoint", "r+b") as fh:  # the index is durable to the second file
        fh.seek(16)
        fh.write(second_end)
    with open(root / "index" / names[0], "r+b") as fh:  # endTimestamp: far in the future
        fh.seek(8)
        fh.write((int.from_bytes(second_end, "big") + 3_600_000).to_bytes(8, "big"))
    with MessageStore(_cfg(root)) as store:
        assert store.wait_dispatched(10)
        missed = _missed_keys(store, written, range(N))
        assert not missed, (len(missed), missed[:5], store.recovery_report.summary())
