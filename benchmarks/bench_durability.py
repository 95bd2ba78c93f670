"""Durability benchmark: SYNC_FLUSH group commit, ASYNC_FLUSH, recovery time of a 1 GiB CommitLog.

Questions (issue 4):
1. How many SYNC_FLUSH puts/s with 1, 4 and 16 concurrent putters, next to the number of
   fsyncs/s the disk sustains, measured in the same run and directory? Target: 16 putters give
   at least 8x the single-putter rate (group commit shares one sync among waiting putters).
2. How many ASYNC_FLUSH puts/s?
3. How long does opening a store with a 1 GiB CommitLog take after a clean shutdown (normal
   recovery: last 3 segments scanned with CRC) and after a crash (abort file present: abnormal
   recovery, scan + re-dispatch from the checkpoint's segment)?

    .venv/bin/python benchmarks/bench_durability.py [--dir DIR] [--seconds 3] [--gib 1] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from rocketstore.config import StoreConfig  # noqa: E402
from rocketstore.format.message import Message  # noqa: E402
from rocketstore.store.message_store import MessageStore  # noqa: E402

BODY = b"x" * 100


def raw_fsyncs_per_s(directory: str, seconds: float) -> float:
    """pwrite 128 bytes + fdatasync in a loop on a preallocated file (one putter, no store)."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, 64 << 20)
        os.fdatasync(fd)
        n, pos, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, b"r" * 128, pos)
            os.fdatasync(fd)
            pos = (pos + 128) % (64 << 20)
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def _cfg(root: str, flush: str, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=root, flush_disk_type=flush, mapped_file_size_commitlog=256 << 20,
                max_hash_slot_num=500_000, max_index_num=2_000_000, clean_resource_interval=3_600_000)
    base.update(kw)
    return StoreConfig(**base)


def put_rate(directory: str, flush: str, putters: int, seconds: float) -> dict:
    root = tempfile.mkdtemp(dir=directory, prefix=f"{flush}-{putters}-")
    try:
        with MessageStore(_cfg(root, flush)) as store:
            for _ in range(200):  # warm up: segment, CQ and index files exist
                store.put_message(Message(topic="Bench", body=BODY))
            stop = threading.Event()
            counts = [0] * putters
            syncs0 = store.flush_service.flush_count
            barrier = threading.Barrier(putters + 1)

            def run(i: int) -> None:
                msg = Message(topic="Bench", body=BODY, queue_id=i % 8)
                put = store.put_message
                barrier.wait()
                n = 0
                while not stop.is_set():
                    r = put(msg)
                    if not r.ok:
                        raise RuntimeError(r)
                    n += 1
                counts[i] = n

            ts = [threading.Thread(target=run, args=(i,)) for i in range(putters)]
            for t in ts:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            time.sleep(seconds)
            stop.set()
            for t in ts:
                t.join()
            elapsed = time.perf_counter() - t0
            syncs = store.flush_service.flush_count - syncs0
        total = sum(counts)
        return {"flush": flush, "putters": putters, "puts": total, "seconds": round(elapsed, 2),
                "puts_per_s": round(total / elapsed), "syncs": syncs,
                "puts_per_sync": round(total / syncs, 2) if syncs else None}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def recovery_times(directory: str, gib: float) -> dict:
    root = tempfile.mkdtemp(dir=directory, prefix="recovery-")
    try:
        cfg = _cfg(root, "ASYNC_FLUSH", mapped_file_size_commitlog=1 << 30)
        target = int(gib * (1 << 30)) - (1 << 20)
        body = b"r" * 900
        t0 = time.perf_counter()
        with MessageStore(cfg) as store:
            i = 0
            while store.get_max_phy_offset() < target:
                for q in range(4):  # batches of 16: one topic and queue each
                    r = store.put_messages([Message(topic=f"Rec{q}", body=body, keys=[f"k{i}-{j}"], queue_id=q)
                                            for j in range(16)])
                    if not r.ok:
                        raise RuntimeError(r)
                i += 1
            store.wait_dispatched(600)
            written = store.get_max_phy_offset()
            records = sum(store.get_max_offset_in_queue(t, q) for t, qs in store.topics().items() for q in qs)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with MessageStore(cfg) as store:
            normal_s = time.perf_counter() - t0
            assert store.recovery_report.normal
        with open(os.path.join(root, "abort"), "w") as fh:
            fh.write("bench")
        t0 = time.perf_counter()
        with MessageStore(cfg) as store:
            abnormal_s = time.perf_counter() - t0
            rep = store.recovery_report
            assert not rep.normal
        return {"commitlog_bytes": written, "records": records, "fill_s": round(fill_s, 1),
                "normal_open_s": round(normal_s, 2), "abnormal_open_s": round(abnormal_s, 2),
                "abnormal_reput_from": rep.reput_from}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--gib", type=float, default=1.0, help="CommitLog size for the recovery test (0: skip)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="bench-durability-")
    os.makedirs(directory, exist_ok=True)
    out: dict = {"load_avg": os.getloadavg()}
    out["raw_fsyncs_per_s"] = round(raw_fsyncs_per_s(directory, args.seconds))
    rows = [put_rate(directory, "SYNC_FLUSH", n, args.seconds) for n in (1, 4, 16)]
    out["raw_fsyncs_per_s_after"] = round(raw_fsyncs_per_s(directory, args.seconds))
    rows += [put_rate(directory, "ASYNC_FLUSH", n, args.seconds) for n in (1, 4)]
    out["puts"] = rows
    single = rows[0]["puts_per_s"]
    out["sync16_over_sync1"] = round(rows[2]["puts_per_s"] / single, 2) if single else None
    if args.gib > 0:
        out["recovery"] = recovery_times(directory, args.gib)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"raw fdatasync/s (one writer): {out['raw_fsyncs_per_s']:,} before, {out['raw_fsyncs_per_s_after']:,} after")
    print("| mode | putters | puts/s | syncs | puts per sync |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['flush']} | {r['putters']} | {r['puts_per_s']:,} | {r['syncs']:,} | {r['puts_per_sync']} |")
    print(f"SYNC 16 putters / 1 putter: {out['sync16_over_sync1']}x")
    if "recovery" in out:
        print(json.dumps(out["recovery"]))


if __name__ == "__main__":
    main()
