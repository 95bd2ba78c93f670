"""SYNC_FLUSH for event loops: puts append without waiting (``defer_sync``), the flush thread
syncs back to back and reports each new flushed offset once; ``SyncFlushWaiter`` answers a put
only when that report covers it (one hand-off per sync, not per put), and FLUSH_DISK_TIMEOUT when
the sync fails."""
from __future__ import annotations

import asyncio
import os
import threading

from rocketstore.broker.services.syncflush import SyncFlushWaiter
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import PutStatus

from .helpers import small_config


def deferred(store, msg):
    """As the broker's ``PutWriter``: inline first; when the store would block, the blocking call."""
    return (store.put_message(msg, nowait=True, defer_sync=True)
            or store.put_message(msg, defer_sync=True))


def test_deferred_puts_return_at_once_and_one_report_covers_many(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20)
    reports: list[tuple[int, int]] = []  # (reported offset, CommitLog flushed offset then)
    with MessageStore(cfg) as store:
        store.flush_service.add_listener(
            lambda off, err: reports.append((off, store.commitlog.flushed_offset())))
        base = store.flush_service.flush_count
        results = [deferred(store, Message(topic="D", body=b"d" * 200, queue_id=i % 4))
                   for i in range(300)]
        assert all(r.status is PutStatus.PUT_OK for r in results)
        ends = [r.wrote_offset + r.wrote_bytes for r in results]
        assert [r.sync_offset for r in results] == ends
        deadline = 50
        while store.commitlog.flushed_offset() < ends[-1] and deadline:
            threading.Event().wait(0.05)
            deadline -= 1
        assert store.commitlog.flushed_offset() == ends[-1] == store.get_max_phy_offset()
        syncs = store.flush_service.flush_count - base
        offsets = [off for off, _ in reports]
        assert offsets == sorted(offsets) and offsets[-1] == ends[-1]
        assert all(flushed >= off for off, flushed in reports)  # reported only once on disk
        assert 0 < syncs < len(results) / 2, syncs  # group commit: many puts per sync
        # a WAIT=false put asks for nothing
        r = deferred(store, Message(topic="D", body=b"x", properties={"WAIT": "false"}))
        assert r.status is PutStatus.PUT_OK and r.sync_offset == 0
        # without defer_sync a SYNC_FLUSH nowait put still declines (the caller must block)
        assert store.put_message(Message(topic="D", body=b"y"), nowait=True) is None


def test_waiter_answers_after_the_sync_and_fails_on_a_sync_error(tmp_path):
    cfg = small_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=1 << 20)
    with MessageStore(cfg) as store:

        async def main():
            waiter = SyncFlushWaiter(asyncio.get_running_loop(), store.commitlog.flushed_offset,
                                     cfg.sync_flush_timeout)
            store.flush_service.add_listener(waiter.on_flush)

            async def one(i):
                r = deferred(store, Message(topic="W", body=b"w%d" % i))
                r = await waiter.wait(r)
                # acknowledged only once durable
                return r.status, store.commitlog.flushed_offset() >= r.sync_offset

            got = await asyncio.gather(*(one(i) for i in range(64)))
            assert got == [(PutStatus.PUT_OK, True)] * 64

            seg = store.commitlog.queue.last()  # a real failing fdatasync: a pipe's fd
            r_fd, w_fd = os.pipe()
            real_fd, seg._fd = seg._fd, r_fd
            try:
                r = deferred(store, Message(topic="W", body=b"unsynced"))
                r = await asyncio.wait_for(waiter.wait(r), 10)
                assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
                assert isinstance(store.flush_service.last_error, OSError)
            finally:
                seg._fd = real_fd
                os.close(r_fd)
                os.close(w_fd)

        asyncio.run(main())
