"""Read-only looks at a tier: where it is (``location.json`` the service writes beside the
metadata, credentials left out), a summary per queue, and a check of every queue's files.

``verify_tier`` checks, per queue: CONSUME_QUEUE segments contiguous and whole units only;
each unit's record wholly in the COMMIT_LOG and passing ``repair.record_ok`` (magic code,
TOTALSIZE = the unit's size, PHYSICALOFFSET = the unit's flat offset, body CRC, topic); on S3
each COMMIT_LOG object's whole-object checksum; units back to back from the first; no bytes
in the COMMIT_LOG past the last unit. It never writes (a torn tail is reported, ``recover``
cuts it on the next open; damage is mended by the broker, ``repair``). Both reports list the
quarantine manifests (``damaged``): records no local copy could mend, kept aside.
"""
from __future__ import annotations

import json
import os
import struct

from . import layout
from .layout import LOCATION_FILE
from .flat import FlatQueue
from .repair import load_damage, record_ok
from .s3 import TierChecksumError
from .service import discover_queues, segment_sizes

_UNIT = struct.Struct(">qiq")

def tier_config_of_store(store_dir: str):
    """The ``TierConfig`` a store last fed (keys from the environment for S3), or None."""
    from ...config import TierConfig
    try:
        with open(os.path.join(store_dir, "config", LOCATION_FILE), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return TierConfig(
        backend=doc["backend"], file_path=doc["tieredStoreFilePath"],
        broker_cluster_name=doc["brokerClusterName"], broker_name=doc["brokerName"],
        object_store_endpoint=doc.get("objectStoreEndpoint", ""),
        object_store_bucket=doc.get("objectStoreBucket", ""),
        object_store_region=doc.get("objectStoreRegion", ""),
        object_store_access_key=os.environ.get("AWS_ACCESS_KEY_ID", ""),
        object_store_secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", ""))


def verify_queue(fq: FlatQueue) -> list[str]:
    problems: list[str] = []
    fq.commitlog.load()
    fq.cq.load()
    for ff in (fq.commitlog, fq.cq):
        for a, b in zip(ff.segs, ff.segs[1:]):
            if a.end != b.base:
                problems.append(f"{fq.path} {ff.file_type}: segment {b.base} follows one ending at {a.end}")
    if not fq.cq.segs:
        return problems
    if fq.cq.min_offset % layout.CQ_UNIT or fq.cq.end % layout.CQ_UNIT:
        problems.append(f"{fq.path} CONSUME_QUEUE: a torn unit (ends at byte {fq.cq.end})")
    fq.refresh_head()  # units before the head point at records retention deleted
    start = fq.min_offset * layout.CQ_UNIT
    cq = fq.cq.read(start, fq.cq.end - start)
    cl_base = fq.commitlog.min_offset if fq.commitlog.segs else 0
    parts = []
    for seg in fq.commitlog.segs:  # whole segments: S3 checks each object's checksum
        key = fq.commitlog.key(seg.base)
        try:
            parts.append(fq.commitlog.backend.read(key, 0, seg.size))
        except TierChecksumError:
            problems.append(f"{fq.path} COMMIT_LOG: segment {seg.base} fails its whole-object "
                            "checksum")
            parts.append(fq.commitlog.backend.salvage(key)[:seg.size])
    cl = b"".join(parts)
    expect = None
    for i in range(0, len(cq) - layout.CQ_UNIT + 1, layout.CQ_UNIT):
        qo = (start + i) // layout.CQ_UNIT
        phy, size, _ = _UNIT.unpack_from(cq, i)
        if expect is not None and phy != expect:
            problems.append(f"{fq.path} queue offset {qo}: flat offset {phy}, expected {expect}")
        rec = cl[phy - cl_base:phy - cl_base + size]
        if size <= 0 or len(rec) != size:
            problems.append(f"{fq.path} queue offset {qo}: record [{phy}, {phy + size}) is not "
                            "wholly in the COMMIT_LOG")
            break
        if not record_ok(rec, phy, size, fq.topic):
            total, magic = struct.unpack_from(">ii", rec, 0)
            problems.append(f"{fq.path} queue offset {qo}: record at {phy} fails its checks "
                            f"(TOTALSIZE {total}, magic {magic & 0xFFFFFFFF:#x}, PHYSICALOFFSET "
                            f"{int.from_bytes(rec[28:36], 'big', signed=True)}, body CRC, topic)")
        expect = phy + size
    if expect is not None and fq.commitlog.end > expect:
        problems.append(f"{fq.path} COMMIT_LOG: {fq.commitlog.end - expect} byte(s) past the "
                        "last unit's record (a torn upload)")
    return problems


def _queue_entry(fq: FlatQueue, verify: bool) -> tuple[dict, list[str]]:
    if verify:
        found = verify_queue(fq)
    else:
        fq.commitlog.load()
        fq.cq.load()
        fq.refresh_head()
        found = []
    return {"topic": fq.topic, "queueId": fq.queue_id, "minOffset": fq.min_offset,
            "maxOffset": fq.max_offset, "commitLogSegments": len(fq.commitlog.segs),
            "commitLogBytes": max(0, fq.commitlog.end), "ok": not found}, found


def tier_report(tcfg, backend=None, *, verify: bool = False) -> dict:
    from .backend import open_backend
    backend = backend or open_backend(tcfg)
    queues = []
    problems: list[str] = []
    for topic, qid in discover_queues(backend, tcfg.broker_cluster_name, tcfg.broker_name):
        fq = FlatQueue(backend, tcfg.broker_cluster_name, tcfg.broker_name, topic, qid,
                       *segment_sizes(tcfg))
        entry, found = _queue_entry(fq, verify)
        queues.append(entry)
        problems += found
    index = backend.list(f"{layout.cluster_dir(tcfg.broker_cluster_name)}/"
                         f"{layout.queue_path(tcfg.broker_name, layout.INDEX_TOPIC, 0)}/{layout.INDEX}")
    damaged = [d.to_json() for d in load_damage(backend)]
    return {"backend": tcfg.backend, "base": tcfg.file_path, "cluster": tcfg.broker_cluster_name,
            "broker": tcfg.broker_name, "queues": queues,
            "indexSegments": len(index), "indexBytes": sum(sz for _, sz in index),
            "damaged": damaged, "problems": problems, "ok": not problems}


def all_tier_queues(backend) -> list[tuple[str, str, str, int]]:
    """(cluster, broker, topic, queue id) of every queue anywhere in a tier's base."""
    out = set()
    for key, _ in backend.list(""):
        parts = key.split("/")
        if len(parts) != 6 or parts[4] not in (layout.COMMIT_LOG, layout.CONSUME_QUEUE) \
                or "_" not in parts[0]:
            continue
        cluster = parts[0].split("_", 1)[1]
        if layout.cluster_dir(cluster) != parts[0] or layout.parse_file_name(parts[5]) is None:
            continue
        try:
            out.add((cluster, parts[1], parts[2], int(parts[3])))
        except ValueError:
            continue
    return sorted(out)


def verify_tier_base(backend, where: str) -> dict:
    """``verify_queue`` on every queue of every cluster and broker in a tier's base (what
    ``rocketstore verify`` does given a tier instead of a store), with the quarantine
    manifests."""
    queues, problems = [], []
    big = 1 << 62  # reading only: segment sizes limit writes
    for cluster, broker, topic, qid in all_tier_queues(backend):
        fq = FlatQueue(backend, cluster, broker, topic, qid, big, big)
        entry, found = _queue_entry(fq, True)
        queues.append({"cluster": cluster, "broker": broker, **entry})
        problems += found
    damaged = [d.to_json() for d in load_damage(backend)]
    return {"tier": where, "queues": queues, "records": sum(max(0, q["maxOffset"] - q["minOffset"])
                                                             for q in queues),
            "damaged": damaged, "problems": problems, "ok": not problems and not damaged}
