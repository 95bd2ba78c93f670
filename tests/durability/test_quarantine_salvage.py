"""One damaged record in the middle of the CommitLog (three bytes of its TOTALSIZE flipped): verify
names the root cause and counts the knock-on errors, the next open cuts the log there as
RocketMQ does but sets every cut byte aside in ``quarantine/`` (the intact later segment
included), ``inspect`` says so, and ``rocketstore salvage`` re-appends every intact record with
its properties, keys and UNIQ_KEY, reporting the damaged bytes it could not save.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.verify import verify_store

from .helpers import small_config

SEG = 16 * 1024
TOPICS = [("SalvA", 0), ("SalvA", 1), ("SalvB", 0)]
N = 400


def _cfg(root):
    return small_config(root, mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 64,
                        max_hash_slot_num=64, max_index_num=300)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                          text=True, timeout=120)


def _fill(root):
    written = {}  # seq -> (offset, size)
    with MessageStore(_cfg(root)) as store:
        for seq in range(N):
            topic, qid = TOPICS[seq % 3]
            r = store.put_message(Message(topic=topic, body=b"salv-%d" % seq + bytes(seq % 50),
                                          keys=[f"key{seq}"], tags=f"T{seq % 4}", queue_id=qid,
                                          properties={"origin": str(seq)}))
            assert r.ok
            written[seq] = (r.wrote_offset, r.wrote_bytes)
        assert store.wait_dispatched(10)
        uniq = {m.properties["origin"]: m.uniq_key for m in _all_messages(store)}
        assert len(uniq) == N
    return written, uniq


def _all_messages(store):
    out = []
    for topic, qid in TOPICS:
        off, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
        while off < hi:
            g = store.get_message("g", topic, qid, off, 32)
            out += g.messages
            off = g.next_begin_offset
    return out


def test_damaged_record_is_quarantined_and_salvaged(tmp_path):
    root = tmp_path / "store"
    written, uniq = _fill(root)
    segs = sorted(os.listdir(root / "commitlog"))
    assert len(segs) >= 4
    # the damaged record: early in the second-to-last segment (inside normal recovery's window)
    second_last = int(segs[-2])
    victim = min(s for s, (o, _) in written.items() if o >= second_last + 200)
    v_off, v_size = written[victim]
    seg_path = root / "commitlog" / f"{second_last:020d}"
    with open(seg_path, "r+b") as fh:
        fh.seek(v_off - second_last)
        raw = bytearray(fh.read(4))
        raw[1:4] = bytes(b ^ 0x5A for b in raw[1:4])
        fh.seek(v_off - second_last)
        fh.write(raw)
    found_size = int.from_bytes(raw, "big", signed=True)
    after = {s for s, (o, _) in written.items() if o > v_off}
    assert after and any(written[s][0] >= int(segs[-1]) for s in after)  # a whole later segment
    # every non-zero byte from the damage to the end of the log, as the test reads it
    expect_bytes = 0
    for name in segs:
        base = int(name)
        if base + SEG <= v_off:
            continue
        data = (root / "commitlog" / name).read_bytes()[max(0, v_off - base):]
        expect_bytes += len(data.rstrip(b"\0"))

    # verify: the root cause, the knock-on counted, not listed
    rep = verify_store(root, _cfg(root))
    assert not rep.ok
    d = rep.first_damage
    assert d is not None and d["offset"] == v_off and d["field"] == "TOTALSIZE", d
    assert d["expected"] == str(v_size) and d["found"] == str(found_size), d
    assert d["next_intact"] == written[victim + 1][0]
    assert rep.knock_on > 0
    assert rep.error_count <= 3, [str(p) for p in rep.problems]
    r = _cli("verify", "--store", str(root))
    assert r.returncode == 1
    assert f"first damaged record: commitlog/{second_last:020d} @ {v_off}: TOTALSIZE expected " \
           f"{v_size}, found {found_size}" in r.stdout, r.stdout
    assert f"{rep.knock_on} knock-on error(s) not listed" in r.stdout
    assert len(r.stdout.splitlines()) < 12, r.stdout

    # inspect (read-only) warns before anything is cut
    r = _cli("inspect", "--store", str(root))
    assert r.returncode == 0 and f"DAMAGE: CommitLog record at {v_off} is damaged" in r.stdout

    # the next put (as a user would) cuts there, but keeps every cut byte in quarantine/
    r = _cli("put", "--store", str(root), "--topic", "SalvA", "after-the-damage")
    assert r.returncode == 0, r.stderr
    assert "quarantine" in r.stderr and "rocketstore salvage" in r.stderr, r.stderr
    assert len(os.listdir(root / "quarantine")) == 1, [json.loads((root / "quarantine" / e / "manifest.json").read_text()) for e in os.listdir(root / "quarantine")]
    [event] = os.listdir(root / "quarantine")
    manifest = json.loads((root / "quarantine" / event / "manifest.json").read_text())
    assert manifest["cut_at"] == v_off and manifest["bytes"] == expect_bytes
    assert "TOTALSIZE" in manifest["reason"] and manifest["time"] and manifest["salvage"] is None
    assert [p["offset"] for p in manifest["pieces"]][0] == v_off
    assert sum(p["bytes"] for p in manifest["pieces"]) == expect_bytes
    assert len(manifest["pieces"]) == len([n for n in segs if int(n) + SEG > v_off])
    r = _cli("inspect", "--store", str(root))
    assert "QUARANTINE: 1 event(s)" in r.stdout and "not salvaged yet" in r.stdout, r.stdout

    # salvage: every intact record after the damage comes back once, with its properties
    r = _cli("salvage", "--store", str(root), "--json")
    assert r.returncode == 0, r.stderr
    [res] = json.loads(r.stdout)["events"]
    assert res["found"] == res["appended"] == len(after) and res["failed"] == []
    assert res["unsaved"] and all(v_off <= u["offset"] < v_off + v_size for u in res["unsaved"])
    with MessageStore(_cfg(root)) as store:
        assert store.wait_dispatched(10)
        msgs = _all_messages(store)
        by_origin = Counter(m.properties.get("origin") for m in msgs)
        want = {str(s) for s in written if s != victim}
        assert {o for o, c in by_origin.items() if c == 1 and o is not None} == want
        assert by_origin.get(str(victim)) is None
        for m in msgs:
            o = m.properties.get("origin")
            if o is None:
                continue
            seq = int(o)
            assert m.body == b"salv-%d" % seq + bytes(seq % 50)
            assert m.keys == [f"key{seq}"] and m.tags == f"T{seq % 4}"
            assert m.uniq_key == uniq[o]
            assert (m.topic, m.queue_id) == TOPICS[seq % 3]
        last = max(after)
        q = store.query_message(TOPICS[last % 3][0], f"key{last}").messages
        assert [m.properties["origin"] for m in q] == [str(last)]
    # twice: nothing appended again, the quarantine is kept
    r = _cli("salvage", "--store", str(root), "--json")
    assert json.loads(r.stdout)["events"][0]["status"] == "already salvaged"
    assert (root / "quarantine" / event / manifest["pieces"][0]["file"]).exists()
    rep = verify_store(root, _cfg(root))
    assert rep.ok, [str(p) for p in rep.problems]
