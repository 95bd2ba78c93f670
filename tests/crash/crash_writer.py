"""Child process of the crash tests: puts from several threads until it is killed.

    python crash_writer.py ROOT FLUSH_TYPE THREADS SEQ_START

Prints ``READY`` once the store is open, then ``ACK <seq> <offset> <size>`` after every put
that returned PUT_OK (under SYNC_FLUSH: durable; under ASYNC_FLUSH: in the page cache), and
``ERR <seq> <status>`` otherwise. Each message's topic, queue, key and body are functions of its
sequence number (``expected``), so the parent can check every byte it reads back.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading

from rocketstore.config import StoreConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore


def crash_config(root: str, flush_type: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=32 * 1024,
                       mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=97,
                       max_index_num=400, flush_disk_type=flush_type,
                       flush_interval_commitlog=20, flush_interval_consume_queue=50,
                       clean_resource_interval=3_600_000)


def expected(seq: int) -> tuple[str, int, str, bytes]:
    """(topic, queue id, key, body) of message ``seq``."""
    topic = f"Crash{seq % 2}"
    qid = seq % 3
    body = (f"{seq}:".encode() + bytes((seq * 7 + i) % 251 for i in range(seq % 300 + 20)))
    return topic, qid, f"seq{seq}", body


def main() -> None:
    root, flush_type, threads, seq_start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = MessageStore(crash_config(root, flush_type))
    out = sys.stdout
    out_lock = threading.Lock()
    counter = itertools.count(seq_start)
    next_lock = threading.Lock()
    with out_lock:
        out.write("READY\n")
        out.flush()

    def putter() -> None:
        while True:
            with next_lock:
                seq = next(counter)
            topic, qid, key, body = expected(seq)
            r = store.put_message(Message(topic=topic, body=body, keys=[key], queue_id=qid))
            line = (f"ACK {seq} {r.wrote_offset} {r.wrote_bytes}\n" if r.status.name == "PUT_OK"
                    else f"ERR {seq} {r.status.name}\n")
            with out_lock:
                out.write(line)
                out.flush()

    ts = [threading.Thread(target=putter, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
