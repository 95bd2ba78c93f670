"""Store write/read throughput against two baselines measured in the same run.

Question: how fast are put_message / put_messages / get_message and reput, next to
(a) the physical limit — the same encoded bytes written to a file, one write() per MiB — and
(b) SQLite in WAL mode inserting the same rows (what a Python user would pick)?

Run: .venv/bin/python benchmarks/bench_store.py [--messages N]
     .venv/bin/python benchmarks/bench_store.py --put32-rounds 5 [--body-sizes 1024]
         (only put_messages(32) against SQLite's per-32-row commit, interleaved: each round runs
         both on the same rows, one after the other; prints every round and the median ratio)
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time

from rocketstore import Message, MessageStore, StoreConfig, _native
from rocketstore.format.message import encode_message


LAST_CPU: dict[str, float] = {}  # process CPU seconds of the last SQLite / store run


def make_messages(n: int, body_size: int) -> list[Message]:
    body = os.urandom(body_size)
    return [Message("BenchTopic", body, tags="TagA", keys=[f"k{i}"], queue_id=i % 4) for i in range(n)]


def bench_raw(msgs: list[Message], root: str) -> float:
    enc = [bytes(encode_message(m, m.all_properties(), born_timestamp=0, born_host="127.0.0.1:1",
                                store_host="127.0.0.1:2", max_body_size=1 << 22).data) for m in msgs]
    path = os.path.join(root, "raw.bin")
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as fh:
        buf = bytearray()
        for e in enc:
            buf += e
            if len(buf) >= 1 << 20:
                fh.write(buf)
                buf = bytearray()
        fh.write(buf)
    return time.perf_counter() - t0


def bench_sqlite(msgs: list[Message], root: str, batch: int) -> float:
    path = os.path.join(root, f"bench{batch}.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, topic TEXT, queue_id INT, tags TEXT, keys TEXT,"
               " store_ts INT, body BLOB)")
    db.execute("CREATE INDEX m_q ON m(topic, queue_id, id)")
    rows = [(m.topic, m.queue_id, m.tags, " ".join(m.keys), 0, m.body) for m in msgs]
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(0, len(rows), batch):
        db.execute("BEGIN")
        db.executemany("INSERT INTO m(topic, queue_id, tags, keys, store_ts, body) VALUES (?,?,?,?,?,?)",
                       rows[i:i + batch])
        db.execute("COMMIT")
    dt = time.perf_counter() - t0
    LAST_CPU["sqlite"] = time.process_time() - c0
    db.close()
    return dt


def bench_store(msgs: list[Message], root: str, batch: int) -> tuple[float, float, float, float]:
    path = os.path.join(root, f"store{batch}")
    shutil.rmtree(path, ignore_errors=True)
    cfg = StoreConfig(store_path_root_dir=path,
                      mapped_file_size_commitlog=256 << 20, mapped_file_size_consume_queue=300_000 * 20,
                      max_hash_slot_num=500_000, max_index_num=2_000_000)
    with MessageStore(cfg) as store:
        lag = []
        done = threading.Event()

        def sample():
            while not done.is_set():
                lag.append(store.dispatch_behind_bytes())
                time.sleep(0.01)
        th = threading.Thread(target=sample)
        th.start()
        c0 = time.process_time()
        t0 = time.perf_counter()
        if batch == 1:
            put = store.put_message
            for m in msgs:
                put(m)
        else:
            for i in range(0, len(msgs), batch):
                chunk = [m for m in msgs[i:i + batch * 4] if m.queue_id == (i // batch) % 4][:batch]
                store.put_messages(chunk if chunk else msgs[i:i + 1])
        put_s = time.perf_counter() - t0
        store.wait_dispatched(120)
        reput_s = time.perf_counter() - t0
        LAST_CPU["store"] = time.process_time() - c0  # every thread: puts and their reput
        done.set()
        th.join()
        t0 = time.perf_counter()
        got = 0
        for q in range(4):
            off = 0
            while True:
                g = store.get_message("g", "BenchTopic", q, off, 32)
                if not g.messages:
                    break
                got += len(g.messages)
                off = g.next_begin_offset
        get_s = time.perf_counter() - t0
        return put_s, reput_s, get_s, (max(lag) if lag else 0), got


def put32_rounds(msgs: list[Message], root: str, rounds: int) -> None:
    """put_messages(32) against SQLite WAL's per-32-row commit, interleaved, ``rounds`` times."""
    n = len(msgs)
    ratios = []
    cpu_ratios = []
    for r in range(rounds):
        sq32 = bench_sqlite(msgs, root, 32)
        put_s = bench_store(msgs, root, 32)[0]
        ratios.append(sq32 / put_s)
        sq_cpu, st_cpu = LAST_CPU["sqlite"] / n * 1e6, LAST_CPU["store"] / n * 1e6
        cpu_ratios.append(sq_cpu / st_cpu)
        print(f"round {r + 1}: sqlite(32) {n / sq32:>9,.0f} msg/s  put_messages(32) {n / put_s:>9,.0f} msg/s"
              f"  ratio x{sq32 / put_s:.2f};  CPU per message: sqlite {sq_cpu:.1f} us, store "
              f"{st_cpu:.1f} us (puts + reput), ratio x{sq_cpu / st_cpu:.2f}", flush=True)
    print(f"median ratio put_messages(32) / sqlite(32): x{statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); by CPU per message: "
          f"x{statistics.median(cpu_ratios):.2f} (min {min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--put32-rounds", type=int, default=0,
                    help="only put_messages(32) vs SQLite(32), interleaved, this many rounds")
    ap.add_argument("--body-sizes", default="1024,128")
    args = ap.parse_args()
    sizes = [int(x) for x in args.body_sizes.split(",")]
    import rocketstore.format.message  # noqa: F401 - so that the compiled twins are asked for
    import rocketstore.store.put_path  # noqa: F401
    print(f"compiled twins: {_native.active()}")
    root = tempfile.mkdtemp(prefix="rs-bench-")
    if args.put32_rounds:
        try:
            for body_size in sizes:
                print(f"\n== {args.messages} messages, {body_size}-byte bodies ==")
                put32_rounds(make_messages(args.messages, body_size), root, args.put32_rounds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    try:
        for body_size in sizes:
            msgs = make_messages(args.messages, body_size)
            n = len(msgs)
            mb = n * body_size / 1e6
            raw = bench_raw(msgs, root)
            print(f"\n== {n} messages, {body_size}-byte bodies ==")
            print(f"{'raw write (1 MiB writes)':34s} {n / raw:>12,.0f} msg/s {mb / raw:>8.1f} MB/s")
            sq1 = bench_sqlite(msgs, root, 1)
            sq32 = bench_sqlite(msgs, root, 32)
            print(f"{'sqlite WAL, commit per row':34s} {n / sq1:>12,.0f} msg/s {mb / sq1:>8.1f} MB/s")
            print(f"{'sqlite WAL, commit per 32 rows':34s} {n / sq32:>12,.0f} msg/s {mb / sq32:>8.1f} MB/s")
            for batch, base in ((1, sq1), (32, sq32)):
                put_s, reput_s, get_s, lag, got = bench_store(msgs, root, batch)
                name = "put_message" if batch == 1 else "put_messages(32)"
                print(f"{name:34s} {n / put_s:>12,.0f} msg/s {mb / put_s:>8.1f} MB/s "
                      f"x{raw / put_s:.2f} of raw, x{base / put_s:.2f} vs sqlite; "
                      f"reput done {reput_s - put_s:.3f}s after the last put, max lag {lag:,} B")
                print(f"{'get_message(32) scan':34s} {got / get_s:>12,.0f} msg/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
