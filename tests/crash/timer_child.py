"""A child writer for the timer crash tests: schedules N timer messages on topic ``TT`` and
prints ``TRY i deliver_ms`` before and ``ACK i deliver_ms`` after each put, then waits for them
to be delivered. Started with ``ROCKETSTORE_CRASH_AT`` it SIGKILLs itself at a timer kill point.

    python -m tests.crash.timer_child ROOT N SPREAD_MS
"""
from __future__ import annotations

import sys
import time

from rocketstore import Message, MessageStore, StoreConfig


def timer_config(root: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=256 * 1024,
                       mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=64,
                       max_index_num=256, timer_precision_ms=100, timer_roll_window_slot=10,
                       mapped_file_size_timer_log=52 * 16, timer_flush_interval_ms=100)


def main() -> None:
    root, n, spread = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with MessageStore(timer_config(root)) as s:
        t0 = int(time.time() * 1000)
        last = t0
        for i in range(n):
            deliver = t0 + 300 + i * spread // n
            if i % 7 == 3:
                deliver += 1500  # beyond the 1 s roll window: rolled once or more
            last = max(last, deliver)
            print(f"TRY {i} {deliver}", flush=True)
            r = s.put_message(Message(topic="TT", body=b"%d" % i,
                                      properties={"TIMER_DELIVER_MS": str(deliver)}))
            if r.status.ok:
                print(f"ACK {i} {deliver}", flush=True)
            time.sleep(0.02)
        time.sleep(max(0.0, (last + 1500 - time.time() * 1000) / 1000))
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
