"""A crash between a revive's copy and its ack record must not revive the message again: the
copy carries its checkpoint entry (POP_REVIVE_KEY) and a restart marks such entries done.

The broker's own PopService over a real store; the "crash" is the revive log refusing the ack
record (as a killed process would never write it), then a second PopService opens the same
store, as a restarted broker does."""
from __future__ import annotations

import os
import time

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.services.pop import PopService
from rocketstore.broker.state.offsets import ConsumerOffsetManager
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.format.message import Message


def _service(store, cfg_dir, put) -> PopService:
    return PopService(store=store, topics=TopicConfigManager(cfg_dir),
                      offsets=ConsumerOffsetManager(cfg_dir), config=BrokerConfig(),
                      put_message=put, run=None)


def _retry_copies(store, group: str, topic: str = "T") -> list:
    """The revived copies: RocketMQ 5.3.3's pop retry topic %RETRY%<group>_<topic>."""
    g = store.get_message("check", f"%RETRY%{group}_{topic}", 0, 0, 32)
    return g.messages if g.status.name == "FOUND" else []


def test_revive_cut_before_its_ack_is_not_copied_twice(tmp_path):
    root = str(tmp_path / "store")
    cfg_dir = os.path.join(root, "config")
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20000, max_hash_slot_num=1000,
                      max_index_num=4000)
    with MessageStore(cfg) as store:
        crashed = {"on": True}

        def put(msg: Message):
            if crashed["on"] and msg.tags == "ack" and msg.topic.startswith("rmq_sys_REVIVE"):
                raise RuntimeError("killed before the ack record")
            return store.put_message(msg)

        svc = _service(store, cfg_dir, put)
        svc.topics.create("T", 1)
        svc.topics.persist()
        store.put_message(Message(topic="T", body=b"once", queue_id=0))
        svc.open()
        found, _ = svc.pop_once("G", svc.queues("G", "T"), None, 50, 32,
                                pop_time=int(time.time() * 1000) - 1000)  # already due
        assert [m.body for _h, m, _a, _ck in found] == [b"once"]
        svc.offsets.persist(True)
        try:
            svc.revive_due()
            raise AssertionError("the ack record was written")
        except RuntimeError:
            pass
        store.wait_dispatched(timeout=10)
        assert len(_retry_copies(store, "G")) == 1  # copied, not marked

        crashed["on"] = False
        again = _service(store, cfg_dir, put)  # the restart: replay the revive log
        again.open()
        assert again.revive_due() == 0
        assert again.pop.open_checkpoints() == 0
        store.wait_dispatched(timeout=10)
        copies = _retry_copies(store, "G")
        assert [m.body for m in copies] == [b"once"]
        assert copies[0].reconsume_times == 1
