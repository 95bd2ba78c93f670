"""``MessageStore.promote_to_master`` on a controller-mode slave's open store whose replicated
CommitLog ends inside a record (an HA frame is cut at any byte): the store is not closed; the
torn record is cut and set aside in quarantine, the new epoch opens at the last whole record,
the whole records are served at their queue offsets, and the next put takes the next offset."""
from __future__ import annotations

import json
import os

from rocketstore import MessageStore, StoreConfig
from rocketstore.format.message import Message
from rocketstore.store.ha.autoswitch import AutoSwitchSettings
from rocketstore.store.ha.epoch import EpochCache

SEG = 64 * 1024


def small(root: str, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=SEG,
                       mapped_file_size_consume_queue=600, max_hash_slot_num=100,
                       max_index_num=400, **kw)


def test_a_torn_replicated_tail_is_cut_and_the_slave_takes_puts_in_place(tmp_path):
    # the master's CommitLog: three messages of one queue, written by a plain store
    with MessageStore(small(str(tmp_path / "master"))) as m:
        ends = []
        for i in range(3):
            r = m.put_message(Message(topic="PromoteT", body=b"m%d" % i * 40, queue_id=0))
            assert r.status.ok
            ends.append(m.commitlog.max_offset())
        m.wait_dispatched()
        seg0 = os.path.join(str(tmp_path / "master"), "commitlog", "%020d" % 0)
    data = open(seg0, "rb").read()[:ends[2]]
    torn = ends[1] + (ends[2] - ends[1]) // 2  # the third record only half there

    root = str(tmp_path / "slave")
    settings = AutoSwitchSettings(epoch_path=os.path.join(root, "epochFileCheckpoint"),
                                  broker_id=2, is_master=False, master_ha_address=None)
    s = MessageStore(small(root, broker_role="SLAVE", controller_ha=settings))
    try:
        s.ha.epochs.append(1, 0)  # as the master's first transfer frame says
        assert s.commitlog.append_data(0, data[:torn])
        assert s.ha.status()["role"] == "SLAVE"
        steps: dict = {}
        end = s.promote_to_master(2, {2}, steps)
        assert end == ends[1]
        assert set(steps) >= {"ha_client_stop", "cut_tail", "epoch", "dispatch"}
        assert s.commitlog.max_offset() == ends[1]
        st = s.ha.status()
        assert st["role"] == "SYNC_MASTER" and st["epoch"] == 2
        assert st["confirm_offset"] == ends[1]
        assert [[e.epoch, e.start_offset] for e in EpochCache(settings.epoch_path).entries()] \
            == [[1, 0], [2, ends[1]]]
        # the torn half record, in quarantine, not destroyed
        qroot = os.path.join(root, "quarantine")
        (folder,) = os.listdir(qroot)
        manifest = json.load(open(os.path.join(qroot, folder, "manifest.json")))
        assert manifest["bytes"] == torn - ends[1]
        kept = b"".join(open(os.path.join(qroot, folder, f), "rb").read()
                        for f in os.listdir(os.path.join(qroot, folder)) if f != "manifest.json")
        assert kept == data[ends[1]:torn]
        # the whole records served; the next put is the queue's next offset, and is served
        r = s.put_message(Message(topic="PromoteT", body=b"after", queue_id=0))
        assert r.status.ok and r.queue_offset == 2 and r.wrote_offset == ends[1]
        assert s.wait_dispatched(10)
        got = s.get_message("g", "PromoteT", 0, 0, 10).messages
        assert [g.body for g in got] == [b"m0" * 40, b"m1" * 40, b"after"]
        assert [g.queue_offset for g in got] == [0, 1, 2]
    finally:
        s.shutdown()
