"""The broker's periodic housekeeping on a full disk (a real one: a small tmpfs): a state file
that cannot be written must not stop the round — silent consumers are still expired (their
queues go to the live ones) — and the offsets are written once there is space again."""
from __future__ import annotations

import asyncio
import os

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.wiring import Broker
from rocketstore.broker.state.offsets import ConsumerOffsetManager

from ..conftest import fill_disk


def test_housekeeping_goes_on_when_a_state_file_cannot_be_written(tmpfs_factory):
    mnt = tmpfs_factory("3M")
    cfg = StoreConfig(store_path_root_dir=str(mnt / "store"), mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=100,
                      max_index_num=400)
    broker = Broker(cfg, BrokerConfig(flush_consumer_offset_interval_ms=50))
    filler = mnt / "filler"
    config_dir = os.path.dirname(broker.offsets.path)

    async def rounds(seconds: float) -> None:
        broker.loop = asyncio.get_running_loop()
        task = asyncio.create_task(broker._housekeeping())
        await asyncio.sleep(seconds)
        task.cancel()

    try:
        with MessageStore(cfg) as store:
            broker.store = store
            broker.offsets.commit("HG", "HT", 0, 1)
            broker.offsets.persist()
            broker.consumers.register({"groupName": "HG", "consumeType": "CONSUME_PASSIVELY",
                                       "messageModel": "CLUSTERING"}, "silent@1", None, now_ms=1)
            broker.offsets.commit("HG", "HT", 0, 7)
            fill_disk(filler)
            asyncio.run(rounds(0.6))
            assert broker.consumers.group("HG") is None  # expired though the persist failed
            assert ConsumerOffsetManager(config_dir).query("HG", "HT", 0) == 1
            os.unlink(filler)
            asyncio.run(rounds(0.6))
            assert ConsumerOffsetManager(config_dir).query("HG", "HT", 0) == 7
    finally:
        if filler.exists():
            filler.unlink()
        broker.executor.shutdown(wait=True)
