"""Index build rate and key-query latency, against a CommitLog scan measured in the same run.

Question: with N messages of 2 keys each (default-size index files: 5,000,000 slots, 20,000,000
entries), how fast is the index built — by the numpy bulk writer alone and through the store's
reput — and how fast is ``query_message`` for a present and an absent key, next to finding the
same key by scanning the CommitLog (what you would do without an index)?

Run: .venv/bin/python benchmarks/bench_index.py [--messages 1000000] [--queries 2000] [--json]

Steps:
1. write N messages through ``MessageStore.put_messages`` (batches of 256, one queue per batch,
   KEYS ``order-<i> user-<i % 100000>``, no UNIQ_KEY so each message has exactly 2 index keys)
   with the index *disabled*, then close the store;
2. bulk writer: decode the CommitLog in 4 MiB windows (``decode_records``) and feed every batch
   to a fresh ``IndexService.dispatch`` (keys → numpy hashes → ``IndexFile.put_batch``);
   reported with and without the decode time;
3. reput: reopen the store with the index enabled; the index has no files, so recovery
   re-dispatches the whole CommitLog (decode + idempotent ConsumeQueue check + index); the
   time inside ``ReputService.run_until`` (and, of it, inside ``IndexService.dispatch``) is
   measured by wrapping those two methods in this process;
4. queries through ``store.query_message``: random present keys (``order-*``: 1 message,
   ``user-*``: 10 messages each) and absent keys, p50/p99 over ``--queries`` each;
5. baseline: a full CommitLog scan with the same vectorised decoder, checking KEYS per record
   (2 present + 2 absent keys), and a raw ``bytes.find`` of the key over every segment (a lower
   bound for any scan; it cannot even tell a key from a substring).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import shutil
import statistics
import tempfile
import time

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.format.batch import decode_records
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.index_service import IndexService

TOPIC = "BenchTopic"
WINDOW = 4 << 20


def _cfg(root: str, index: bool) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, message_index_enable=index, generate_uniq_key=False)


def write_store(root: str, n: int) -> float:
    t0 = time.perf_counter()
    with MessageStore(_cfg(root, False)) as store:
        batch = 256
        for start in range(0, n, batch):
            q = (start // batch) % 8
            msgs = [Message(TOPIC, b"payload-%08d" % i, keys=[f"order-{i}", f"user-{i % 100_000}"],
                            queue_id=q) for i in range(start, min(n, start + batch))]
            r = store.put_messages(msgs)
            assert r.status.name == "PUT_OK", r
        store.wait_dispatched(timeout=600)
    return time.perf_counter() - t0


def segments(root: str):
    d = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        yield int(name), mm


def decode_windows(mm, base: int):
    """Decoded batches of one segment, 4 MiB at a time, as the reput reads them."""
    pos = 0
    while pos < len(mm):
        stop_at = min(len(mm), pos + WINDOW)
        recs = decode_records(mm, pos, stop_at, base_offset=base)
        if len(recs):
            yield recs
        more = recs.end > pos and (recs.stop == "incomplete" or (recs.stop == "end" and recs.end == stop_at))
        if not more:
            return
        pos = recs.end


def bench_bulk(root: str, out_root: str) -> dict:
    decoded, t_decode = [], 0.0
    for base, mm in segments(root):
        t0 = time.perf_counter()
        decoded.extend(decode_windows(mm, base))
        t_decode += time.perf_counter() - t0
    cfg = StoreConfig(store_path_root_dir=out_root)
    svc = IndexService(cfg, StoreCheckpoint(os.path.join(out_root, "checkpoint")))
    svc.load(True)
    t0 = time.perf_counter()
    for recs in decoded:
        svc.dispatch(recs)
    t_index = time.perf_counter() - t0
    keys = sum(f.entry_count for f in svc.files)
    svc.shutdown()
    return {"keys": keys, "index_s": t_index, "decode_s": t_decode,
            "keys_per_s_index_only": keys / t_index, "keys_per_s_decode_and_index": keys / (t_index + t_decode)}


class _Timer:
    """Accumulates the wall time spent in one method (wrapped for this process only)."""

    def __init__(self, cls, name: str) -> None:
        self.cls, self.name, self.orig, self.spent = cls, name, getattr(cls, name), 0.0
        timer = self

        def wrapped(obj, *args, **kw):
            t0 = time.perf_counter()
            try:
                return timer.orig(obj, *args, **kw)
            finally:
                timer.spent += time.perf_counter() - t0
        setattr(cls, name, wrapped)

    def restore(self) -> None:
        setattr(self.cls, self.name, self.orig)


def bench_reput(root: str) -> tuple[MessageStore, dict]:
    from rocketstore.store.dispatch import ReputService
    shutil.rmtree(os.path.join(root, "index"), ignore_errors=True)
    reput_t = _Timer(ReputService, "run_until")
    index_t = _Timer(IndexService, "dispatch")
    try:
        t0 = time.perf_counter()
        store = MessageStore(_cfg(root, True))
        store.wait_dispatched(timeout=600)
        dt = time.perf_counter() - t0
    finally:
        reput_t.restore()
        index_t.restore()
    keys = sum(f.entry_count for f in store.index_service.files)
    return store, {"keys": keys, "open_s": dt, "reput_s": reput_t.spent,
                   "index_dispatch_s": index_t.spent, "keys_per_s": keys / reput_t.spent,
                   "reput_from": store.recovery_report.reput_from}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench_queries(store: MessageStore, n_msgs: int, n_queries: int) -> dict:
    rnd = random.Random(7)
    res = {}
    cases = {
        "present_unique": [f"order-{rnd.randrange(n_msgs)}" for _ in range(n_queries)],
        "present_10_msgs": [f"user-{rnd.randrange(min(n_msgs, 100_000))}" for _ in range(n_queries)],
        "absent": [f"missing-{rnd.randrange(10**9)}" for _ in range(n_queries)],
    }
    for name, keys in cases.items():
        lat, found = [], 0
        for k in keys:
            t0 = time.perf_counter()
            r = store.query_message(TOPIC, k, max_num=32)
            lat.append((time.perf_counter() - t0) * 1e3)
            found += len(r.messages)
        res[name] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "mean_ms": statistics.fmean(lat),
                     "messages_per_query": found / len(keys)}
    return res


def scan_for(root: str, key: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    hits = 0
    for base, mm in segments(root):
        for recs in decode_windows(mm, base):
            for t, p in zip(recs.topic, recs.properties):
                ks = p.get("KEYS")
                if t == TOPIC and ks and key in ks.split(" "):
                    hits += 1
    return time.perf_counter() - t0, hits


def raw_find(root: str, key: str, max_offset: int) -> float:
    needle = key.encode()
    t0 = time.perf_counter()
    for base, mm in segments(root):
        if base < max_offset:
            mm.find(needle, 0, min(len(mm), max_offset - base))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--scans", type=int, default=2)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="bench-index-")
    root, bulk_root = os.path.join(work, "store"), os.path.join(work, "bulk")
    for d in (root, bulk_root):
        shutil.rmtree(d, ignore_errors=True)
    report: dict = {"messages": a.messages, "keys_per_message": 2}
    report["write_s"] = write_store(root, a.messages)
    report["bulk_writer"] = bench_bulk(root, bulk_root)
    shutil.rmtree(bulk_root, ignore_errors=True)
    store, report["reput"] = bench_reput(root)
    try:
        report["query"] = bench_queries(store, a.messages, a.queries)
        max_offset = store.get_max_phy_offset()
    finally:
        store.shutdown()
    rnd = random.Random(11)
    present = [f"order-{rnd.randrange(a.messages)}" for _ in range(a.scans)]
    absent = [f"missing-{rnd.randrange(10**9)}" for _ in range(a.scans)]
    scans_p = [scan_for(root, k) for k in present]
    scans_a = [scan_for(root, k) for k in absent]
    assert all(h == 1 for _, h in scans_p) and all(h == 0 for _, h in scans_a)
    report["scan_baseline"] = {
        "decode_scan_present_ms": statistics.median(t for t, _ in scans_p) * 1e3,
        "decode_scan_absent_ms": statistics.median(t for t, _ in scans_a) * 1e3,
        "raw_find_ms": statistics.median(raw_find(root, k, max_offset) for k in absent) * 1e3,
    }
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(report, indent=2))
        return
    b, r, q, s = report["bulk_writer"], report["reput"], report["query"], report["scan_baseline"]
    print(f"{a.messages:,} messages x 2 keys written in {report['write_s']:.1f} s")
    print(f"bulk writer: {b['keys']:,} keys, index {b['keys_per_s_index_only']:,.0f} keys/s, "
          f"decode+index {b['keys_per_s_decode_and_index']:,.0f} keys/s")
    print(f"reput (full re-dispatch on open): {r['keys']:,} keys, reput {r['reput_s']:.1f} s = "
          f"{r['keys_per_s']:,.0f} keys/s (index share {r['index_dispatch_s']:.1f} s; whole open "
          f"{r['open_s']:.1f} s)")
    for name, v in q.items():
        print(f"query_message {name:16s} p50 {v['p50_ms']:.3f} ms  p99 {v['p99_ms']:.3f} ms  "
              f"({v['messages_per_query']:.1f} msgs/query)")
    print(f"CommitLog scan baseline: decode-scan present {s['decode_scan_present_ms']:.0f} ms, "
          f"absent {s['decode_scan_absent_ms']:.0f} ms; raw bytes.find {s['raw_find_ms']:.1f} ms")


if __name__ == "__main__":
    main()
