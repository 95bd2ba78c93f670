"""Timer messages (RocketMQ 5's timer wheel): enqueue rate next to plain puts, delivery lateness
under 10 000 due per second, and memory as the number of timers grows.

    .venv/bin/python benchmarks/bench_timer.py --messages 50000 --due-rate 10000 --due-seconds 5

Three measurements, each in one store process (the timer's enqueue, dequeue and flush threads
run beside the putting thread, as in ``rocketstore serve``):
1. **enqueue rate**: N plain ``put_message`` next to N timer puts (``TIMER_DELIVER_MS`` an hour
   out), timed until the timer service has put every one into the timerlog and wheel;
2. **lateness**: ``--due-rate`` messages per second due over ``--due-seconds`` seconds (put
   beforehand); lateness = the re-put's store time minus the asked time (p50/p99/max; a
   negative value would be an early delivery), at ``timerPrecisionMs`` 100 and 1000;
3. **memory**: anonymous RSS (``/proc/self/status`` RssAnon: the heap, not the mapped files)
   after 0, N/10 and N timers are in the wheel.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import numpy as np  # noqa: E402

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402

BODY = b"x" * 256


def _cfg(d: str, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=d, mapped_file_size_commitlog=256 << 20,
                       mapped_file_size_timer_log=16 << 20, **kw)


def _wait_enqueued(store, n: int, timeout_s: float = 600) -> None:
    end = time.monotonic() + timeout_s
    while store.timer.enqueued < n and time.monotonic() < end:
        time.sleep(0.005)


def rss_anon_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1


def enqueue_rate(n: int) -> dict:
    with tempfile.TemporaryDirectory() as d, MessageStore(_cfg(d)) as store:
        t0 = time.perf_counter()
        for i in range(n):
            store.put_message(Message(topic="Plain", body=BODY, queue_id=i % 4))
        store.wait_dispatched(60)
        plain = time.perf_counter() - t0
        at = str(int(time.time() * 1000) + 3_600_000)
        t0 = time.perf_counter()
        for i in range(n):
            store.put_message(Message(topic="Timed", body=BODY, queue_id=i % 4,
                                      properties={"TIMER_DELIVER_MS": at}))
        put_s = time.perf_counter() - t0
        _wait_enqueued(store, n)
        timed = time.perf_counter() - t0
        assert store.timer.enqueued == n
    return {"plain_msg_s": round(n / plain), "timer_put_msg_s": round(n / put_s),
            "timer_enqueued_msg_s": round(n / timed), "ratio": round(plain / timed, 2)}


def lateness(rate: int, seconds: int, precision_ms: int) -> dict:
    n = rate * seconds
    with tempfile.TemporaryDirectory() as d, MessageStore(_cfg(d, timer_precision_ms=precision_ms)) as store:
        # the puts take a while: schedule the first due time after they and the enqueue finish
        lead_ms = int(n / 8000 * 1000) + 3000
        t_first = int(time.time() * 1000) + lead_ms
        for i in range(n):
            due = t_first + i * 1000 // rate
            store.put_message(Message(topic="Due", body=b"%d" % due, queue_id=i % 4,
                                      properties={"TIMER_DELIVER_MS": str(due)}))
        _wait_enqueued(store, n)
        ready_before_ms = t_first - int(time.time() * 1000)
        end = time.monotonic() + seconds + lead_ms / 1000 + 30
        while store.timer.dequeued < n and time.monotonic() < end:
            time.sleep(0.05)
        store.wait_dispatched(30)
        late = []
        for q in range(4):
            off = 0
            while True:
                g = store.get_message("bench", "Due", q, off, 32)
                if not g.messages:
                    break
                for m in g.messages:
                    late.append(m.store_timestamp - int(m.body))
                off = g.next_begin_offset
    arr = np.asarray(late)
    return {"precision_ms": precision_ms, "due": n, "delivered": len(late),
            "enqueue_done_before_first_due_ms": ready_before_ms,
            "lateness_ms": {"min": int(arr.min()), "p50": int(np.percentile(arr, 50)),
                            "p99": int(np.percentile(arr, 99)), "max": int(arr.max())},
            "early": int((arr < 0).sum())}


def memory(n: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as d, MessageStore(_cfg(d)) as store:
        base = int(time.time() * 1000) + 600_000
        out["timers_0"] = rss_anon_kib()
        done = 0
        for target in (n // 10, n):
            while done < target:
                # spread over an hour, ten minutes from now
                due = base + (done * 7919) % 3_600_000
                store.put_message(Message(topic="Mem", body=BODY, queue_id=done % 4,
                                          properties={"TIMER_DELIVER_MS": str(due)}))
                done += 1
            _wait_enqueued(store, done)
            out[f"timers_{done}"] = rss_anon_kib()
        out["timerlog_bytes"] = store.timer.stats()["timerlog_bytes"]
        out["wheel_file_bytes"] = os.path.getsize(os.path.join(d, "timerwheel"))
    return {"rss_anon_kib": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--due-rate", type=int, default=10_000)
    ap.add_argument("--due-seconds", type=int, default=5)
    ap.add_argument("--memory-timers", type=int, default=200_000)
    args = ap.parse_args()
    res = {"enqueue": enqueue_rate(args.messages),
           "lateness": [lateness(args.due_rate, args.due_seconds, p) for p in (100, 1000)],
           "memory": memory(args.memory_timers),
           "load_average": os.getloadavg()[0]}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
