"""SQL92 filtering vs tag filtering: drain rate of a subscription matching 1 % of the messages.

Question (issue 17): does a SQL92 subscription that matches 1 % of N messages drain at least
half as fast as a tag subscription over the same messages, with and without the ConsumeQueue-ext
bitmap prefilter, and how many CommitLog reads does the prefilter save?

Two stores get the same N messages (4 queues, 1 % carry tag ``hit`` and property
``region=eu``, the rest tag ``miss`` and ``region=us``, plus a numeric ``n``): a plain store, and
one with ``enable_consume_queue_ext`` whose SQL92 group registered before the writes, so every
message has its bitmap. Each subscription drains every queue with ``get_message(32,
decode=False)`` (what a PULL does) from offset 0 to the end; the rate is messages scanned per
second of wall time. The tag drain on the plain store is the baseline.

    .venv/bin/python benchmarks/bench_sql92.py --messages 1000000
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from rocketstore import GetStatus, Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.broker.state.filters import (ConsumerFilterData, ConsumerFilterRegistry,  # noqa: E402
                                              ExpressionMessageFilter)
from rocketstore.filter import compile_sql92  # noqa: E402

QUEUES = 4
SQL = "region = 'eu'"


def OTHER_SHAPES(n: int) -> list[str]:
    return ["region IN ('eu', 'apac')", "region = 'eu' AND n > 100", f"n BETWEEN 0 AND {n // 100 - 1}"]


def fill(root: str, n: int, ext: bool, reg: ConsumerFilterRegistry | None) -> StoreConfig:
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=256 << 20,
                      mapped_file_size_consume_queue=300_000 * 20, message_index_enable=False,
                      enable_consume_queue_ext=ext)
    with MessageStore(cfg) as store:
        if reg is not None:
            store.set_filter_bitmap_source(reg.bitmaps)
        batch = 256
        for start in range(0, n, batch * QUEUES):
            for q in range(QUEUES):
                msgs = []
                for i in range(start + q, min(n, start + batch * QUEUES), QUEUES):
                    hit = i % 100 == 7
                    msgs.append(Message(topic="Bench", body=b"x" * 100, tags="hit" if hit else "miss",
                                        properties={"region": "eu" if hit else "us", "n": str(i)},
                                        queue_id=q))
                if msgs:
                    store.put_messages(msgs)
        store.wait_dispatched(600)
    return cfg


def drain(cfg: StoreConfig, sub: str | None, flt=None) -> tuple[float, int, int]:
    """(seconds, units scanned, messages found)."""
    with MessageStore(cfg) as store:
        t0 = time.perf_counter()
        scanned = found = 0
        for q in range(QUEUES):
            off = 0
            while True:
                g = store.get_message("G", "Bench", q, off, 32, sub, decode=False, message_filter=flt)
                if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                    break
                found += len(g.buffers)
                scanned += g.next_begin_offset - off
                off = g.next_begin_offset
        return time.perf_counter() - t0, scanned, found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = args.dir or tempfile.mkdtemp(prefix="bench-sql92-")
    try:
        reg = ConsumerFilterRegistry(None)
        reg.register("Bench", "G", SQL, "SQL92", 1, now_ms=0)
        t0 = time.perf_counter()
        plain = fill(os.path.join(base, "plain"), args.messages, False, None)
        t1 = time.perf_counter()
        extcfg = fill(os.path.join(base, "ext"), args.messages, True, reg)
        t2 = time.perf_counter()
        print(f"{args.messages} messages; fill: plain {t1 - t0:.1f}s, ext+bitmap {t2 - t1:.1f}s")
        no_bloom = ConsumerFilterData("G", "Bench", SQL, "SQL92", compile_sql92(SQL), born_time=0)
        rows = []
        s, scanned, found = drain(plain, "hit")
        tag_rate = scanned / s
        rows.append(("tag 'hit' (baseline), plain store", s, scanned, found, None))
        flt = ExpressionMessageFilter(no_bloom, reg.bloom)
        s, scanned, found = drain(plain, None, flt)
        rows.append((f"SQL92 {SQL!r}, no bitmap", s, scanned, found, 0))
        flt = ExpressionMessageFilter(reg.get("Bench", "G"), reg.bloom)
        s, scanned, found = drain(extcfg, None, flt)
        rows.append((f"SQL92 {SQL!r}, bitmap prefilter", s, scanned, found, flt.bitmap_checks))
        s, scanned, found = drain(extcfg, "hit")
        rows.append(("tag 'hit', ext store", s, scanned, found, None))
        for other in OTHER_SHAPES(args.messages):  # other selector shapes matching 1 %, no bitmap
            data = ConsumerFilterData("G", "Bench", other, "SQL92", compile_sql92(other), born_time=0)
            s, scanned, found = drain(plain, None, ExpressionMessageFilter(data, reg.bloom))
            rows.append((f"SQL92 {other!r}, no bitmap", s, scanned, found, 0))
        print(f"| subscription | seconds | units scanned/s | ratio to tag | found | CommitLog reads saved |")
        print("|---|---|---|---|---|---|")
        for name, s, scanned, found, saved in rows:
            rate = scanned / s
            sv = "" if saved is None else f"{saved:,} of {scanned:,} ({100 * saved / max(scanned, 1):.1f} %)"
            print(f"| {name} | {s:.2f} | {rate:,.0f} | {rate / tag_rate:.2f}x | {found:,} | {sv} |")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
