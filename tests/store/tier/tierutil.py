"""Test helpers: read a posix tier with nothing but os, struct and hashlib, and the local
store's own records for the same queue offsets (the expected side)."""
from __future__ import annotations

import hashlib
import os
import struct

UNIT = struct.Struct(">qiq")


def md5_8(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()[:8]


def queue_dir(base: str, cluster: str, broker: str, topic: str, qid: int) -> str:
    return os.path.join(base, f"{md5_8(cluster)}_{cluster}", broker, topic, str(qid))


def read_flat(directory: str) -> tuple[int, bytes]:
    """(first base offset, the concatenated bytes) of a flat file's segments; every name is
    checked against the md5 + 20-digit rule and bases must be contiguous."""
    if not os.path.isdir(directory):
        return -1, b""
    segs = []
    for name in os.listdir(directory):
        base = int(name[8:])
        assert len(name) == 28 and name[:8] == md5_8(str(base)), name
        segs.append((base, name))
    segs.sort()
    out = b""
    first = segs[0][0] if segs else -1
    for base, name in segs:
        assert base == first + len(out), f"{directory}: segment {base} after {first + len(out)}"
        with open(os.path.join(directory, name), "rb") as fh:
            out += fh.read()
    return first, out


def tier_queue(base: str, cluster: str, broker: str, topic: str, qid: int):
    """[(queue offset, flat offset, record bytes, tagsCode)] of one queue in the tier."""
    qd = queue_dir(base, cluster, broker, topic, qid)
    cq_base, cq = read_flat(os.path.join(qd, "CONSUME_QUEUE"))
    cl_base, cl = read_flat(os.path.join(qd, "COMMIT_LOG"))
    assert len(cq) % 20 == 0, "a torn ConsumeQueue unit"
    out = []
    for i in range(0, len(cq), 20):
        phy, size, tags = UNIT.unpack_from(cq, i)
        rec = cl[phy - cl_base:phy - cl_base + size]
        assert len(rec) == size, f"unit {i // 20} points past the flat COMMIT_LOG"
        out.append(((cq_base + i) // 20, phy, rec, tags))
    return out, cl_base, len(cl)


def local_records(store, topic: str, qid: int, start: int = 0):
    """[(queue offset, record bytes, tagsCode)] from the local store."""
    out = []
    i = start
    while True:
        units = store.read_consume_queue(topic, qid, i, 1000)
        if not units:
            return out
        for off, size, tags in units:
            rec = store.commitlog.read_record(off)
            assert rec is not None and len(rec) == size
            out.append((i, bytes(rec), tags))
            i += 1


def mask_phys(rec: bytes) -> bytes:
    return rec[:28] + rec[36:]


def check_queue_matches(base, cluster, broker, store, topic, qid, expect_count=None):
    """The tier's queue is the local queue: same queue offsets, no gap, no duplicate, flat
    offsets back to back from 0, PHYSICALOFFSET = flat offset, all else the local bytes."""
    tier, cl_base, cl_len = tier_queue(base, cluster, broker, topic, qid)
    local = local_records(store, topic, qid)
    assert cl_base == 0
    assert [t[0] for t in tier] == [x[0] for x in local][:len(tier)]
    if expect_count is not None:
        assert len(tier) == expect_count
    pos = 0
    for (qo, phy, rec, tags), (lqo, lrec, ltags) in zip(tier, local):
        assert phy == pos, f"queue offset {qo}: flat offset {phy}, expected {pos}"
        assert int.from_bytes(rec[28:36], "big") == phy
        assert mask_phys(rec) == mask_phys(lrec) and tags == ltags
        pos += len(rec)
    assert pos == cl_len, "bytes in the flat COMMIT_LOG no unit points at"
    return tier
