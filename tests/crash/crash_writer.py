"""Child process of the crash tests: puts from several threads until it is killed.

    python crash_writer.py ROOT FLUSH_TYPE THREADS SEQ_START [clean]

Prints ``READY`` once the store is open, then ``ACK <seq> <offset> <size>`` after every put
that returned PUT_OK (one thread puts batches of 3 with ``put_messages``: one line per message;
under SYNC_FLUSH one more thread puts as the broker does, ``defer_sync`` + ``SyncFlushWaiter``)
(under SYNC_FLUSH: durable; under ASYNC_FLUSH: in the page cache), and
``ERR <seq> <status>`` otherwise. Each message's topic, queue, key and body are functions of its
sequence number (``expected``), so the parent can check every byte it reads back.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading

from rocketstore.config import StoreConfig
from rocketstore.format.message import Message, parse_message_id
from rocketstore.store.message_store import MessageStore


def crash_config(root: str, flush_type: str, cleaning: bool = False) -> StoreConfig:
    """``cleaning``: every segment is expired at once and the clean service runs every 50 ms,
    so kills also land in the middle of deletions."""
    extra = dict(file_reserved_time=0, delete_when=";".join(f"{h:02d}" for h in range(24)),
                 clean_resource_interval=50) if cleaning else dict(clean_resource_interval=3_600_000)
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=32 * 1024,
                       mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=97,
                       max_index_num=400, flush_disk_type=flush_type,
                       flush_interval_commitlog=20, flush_interval_consume_queue=50, **extra)


_PATTERN = bytes(range(251)) * 3  # bodies are slices of it: cheap to build on both sides
BATCH_BASE = 500_000  # seq % 1_000_000 at or above this: put in batches of 3 (one queue each)


def batch_first(seq: int) -> int:
    """First seq of the batch holding ``seq`` (batches start at cycle base + BATCH_BASE)."""
    base = seq - seq % 1_000_000 + BATCH_BASE
    return base + (seq - base) // 3 * 3


def expected(seq: int) -> tuple[str, int, str, bytes]:
    """(topic, queue id, key, body) of message ``seq``."""
    if seq % 1_000_000 >= BATCH_BASE:
        topic, qid = "CrashBatch", ((seq - batch_first(seq)) // 3 + batch_first(seq)) % 2
    else:
        topic, qid = f"Crash{seq % 2}", seq % 3
    start = seq * 7 % 251
    body = f"{seq}:".encode() + _PATTERN[start:start + seq % 300 + 20]
    return topic, qid, f"seq{seq}", body


def main() -> None:
    root, flush_type, threads, seq_start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cleaning = len(sys.argv) > 5 and sys.argv[5] == "clean"
    cfg = crash_config(root, flush_type, cleaning)
    store = MessageStore(cfg)
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

    batch_counter = itertools.count(seq_start + BATCH_BASE, 3)

    def batch_putter() -> None:
        """Batches of 3 (put_messages): all or nothing, consecutive offsets."""
        while True:
            with next_lock:
                first = next(batch_counter)
            msgs = []
            for seq in range(first, first + 3):
                topic, qid, key, body = expected(seq)
                msgs.append(Message(topic=topic, body=body, keys=[key], queue_id=qid))
            r = store.put_messages(msgs)
            if r.status.name == "PUT_OK":
                offs = [parse_message_id(m)[1] for m in r.msg_ids]
                ends = offs[1:] + [r.wrote_offset + r.wrote_bytes]
                lines = "".join(f"ACK {first + i} {o} {e - o}\n" for i, (o, e) in enumerate(zip(offs, ends)))
            else:
                lines = f"ERR {first} {r.status.name}\n"
            with out_lock:
                out.write(lines)
                out.flush()

    def deferred_putter() -> None:
        """SYNC_FLUSH the way the broker puts: append without waiting (``defer_sync``), ACK only
        when ``SyncFlushWaiter`` reports the group commit covering it; 8 puts in flight."""
        import asyncio

        from rocketstore.broker.services.syncflush import SyncFlushWaiter

        async def run() -> None:
            waiter = SyncFlushWaiter(asyncio.get_running_loop(), store.commitlog.flushed_offset,
                                     cfg.sync_flush_timeout)
            store.flush_service.add_listener(waiter.on_flush)

            async def one() -> None:
                while True:
                    with next_lock:
                        seq = next(counter)
                    topic, qid, key, body = expected(seq)
                    m = Message(topic=topic, body=body, keys=[key], queue_id=qid)
                    r = store.put_message(m, nowait=True, defer_sync=True)
                    if r is None:  # the store would block: as the broker's put thread does
                        r = await asyncio.to_thread(store.put_message, m, defer_sync=True)
                    r = await waiter.wait(r)
                    line = (f"ACK {seq} {r.wrote_offset} {r.wrote_bytes}\n"
                            if r.status.name == "PUT_OK" else f"ERR {seq} {r.status.name}\n")
                    with out_lock:
                        out.write(line)
                        out.flush()

            await asyncio.gather(*(one() for _ in range(8)))

        asyncio.run(run())

    ts = [threading.Thread(target=putter, daemon=True) for _ in range(threads - 1)]
    ts.append(threading.Thread(target=batch_putter, daemon=True))
    if flush_type == "SYNC_FLUSH":
        ts.append(threading.Thread(target=deferred_putter, daemon=True))
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
