"""Delay-level re-delivery keeps its offset when the re-put fails (a real full disk)."""
from __future__ import annotations

import os

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.wiring import Broker
from rocketstore.broker.services.schedule import ScheduleMessageService
from rocketstore.format.message import SCHEDULE_TOPIC

from ..conftest import fill_disk

SEG = 1 << 20
DUE = b"due" * 40_000  # 120 KB: more than the 64 KiB left free below, so the re-put into a new
# (sparse) segment cannot get its blocks, whatever the allocation step


def test_failed_reput_keeps_the_delay_offset_and_delivers_once_later(tmpfs_factory):
    mnt = tmpfs_factory("3M")
    cfg = StoreConfig(store_path_root_dir=str(mnt / "store"), mapped_file_size_commitlog=SEG,
                      mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=100,
                      max_index_num=400, message_delay_level="1s 2s")
    broker = Broker(cfg, BrokerConfig())
    filler = mnt / "filler"
    try:
        with MessageStore(cfg) as store:
            broker.store = store
            sched = ScheduleMessageService(store, broker.delay_offsets, broker.delay_levels_ms,
                                           store.put_message)
            r = store.put_message(Message(topic="Late", body=DUE, properties={"DELAY": "1"}))
            assert r.status.name == "PUT_OK"
            # fill the first CommitLog segment to within 50 bytes of its end...
            end = r.wrote_offset + r.wrote_bytes
            while SEG - end > 70_000:
                r = store.put_message(Message(topic="Fill", body=b"y" * 60_000))
                end = r.wrote_offset + r.wrote_bytes
            overhead = r.wrote_bytes - 60_000
            r = store.put_message(Message(topic="Fill", body=b"z" * (SEG - end - overhead - 50)))
            assert r.status.name == "PUT_OK" and SEG - (r.wrote_offset + r.wrote_bytes) == 50
            assert store.wait_dispatched(10)
            # ...and the disk (all but 64 KiB for the checkpoint), so the re-put needs a segment
            # that cannot be created
            fill_disk(filler, leave=65536)
            far = 2**62
            assert sched.run_once(now_ms=far) == 0
            assert broker.delay_offsets.get(1) == 0  # not past the message it could not deliver
            assert store.get_max_offset_in_queue("Late", 0) == 0
            assert sched.run_once(now_ms=far) == 0  # paused after the failure: nothing tried
            os.unlink(filler)
            sched._retry_at.clear()  # skip the pause instead of sleeping through it
            assert sched.run_once(now_ms=far) == 1
            assert sched.run_once(now_ms=far) == 0
            assert broker.delay_offsets.get(1) == 1
            assert store.wait_dispatched(10)
            g = store.get_message("CG", "Late", 0, 0, 32)
            assert [m.body for m in g.messages] == [DUE]
            assert store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 1
    finally:
        if filler.exists():
            filler.unlink()
        broker.executor.shutdown(wait=True)
