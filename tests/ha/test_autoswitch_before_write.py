"""A controller-mode master's store (auto-switch HA, no HA socket) whose SyncStateSet is smaller
than ``minInSyncReplicas`` refuses SYNC puts with IN_SYNC_REPLICAS_NOT_ENOUGH before anything is
appended, as RocketMQ 5.3.3's CommitLog does; puts that do not wait for replicas (``WAIT=false``)
still go in, alone or among refused records of one append; once the set is large enough again,
puts go in."""
from __future__ import annotations

import time

from rocketstore import Message, MessageStore, PutStatus
from rocketstore.format.message import encode_message
from rocketstore.store.ha.autoswitch import AutoSwitchSettings
from tests.conftest import small_config

NOT_ENOUGH = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH


def _store(tmp_path) -> MessageStore:
    ha = AutoSwitchSettings(epoch_path=str(tmp_path / "epochFileCheckpoint"), broker_id=1,
                            is_master=True, master_epoch=1, sync_state_set={1},
                            all_ack_in_sync_state_set=True, min_in_sync_replicas=2)
    return MessageStore(small_config(tmp_path / "store", broker_role="SYNC_MASTER", controller_ha=ha))


def _rec(body: bytes, wait: bool):
    props = {"UNIQ_KEY": body.decode()} if wait else {"UNIQ_KEY": body.decode(), "WAIT": "false"}
    return encode_message(Message("T", body), props, born_timestamp=int(time.time() * 1000),
                          born_host="127.0.0.1:5000", store_host="127.0.0.1:10911",
                          max_body_size=1 << 20)


def _bodies(store: MessageStore) -> list[bytes]:
    assert store.wait_dispatched(5)
    return [m.body for m in store.get_message("G", "T", 0, 0, 32, None).messages]


def test_refused_before_the_append_and_nothing_written(tmp_path):
    with _store(tmp_path) as store:
        r = store.put_message(Message("T", b"sync"))
        assert r.status is NOT_ENOUGH
        rb = store.put_messages([Message("T", b"b0"), Message("T", b"b1")])
        assert rb.status is NOT_ENOUGH
        assert store.get_max_phy_offset() == 0  # not one byte appended
        ok = store.put_message(Message("T", b"nowait", properties={"WAIT": "false"}))
        assert ok.status is PutStatus.PUT_OK
        # one append of independent records: the waiting ones refused, the other stored
        rs = store.append([_rec(b"w1", True), _rec(b"n1", False), _rec(b"w2", True)])
        assert [x.status for x in rs] == [NOT_ENOUGH, PutStatus.PUT_OK, NOT_ENOUGH]
        assert _bodies(store) == [b"nowait", b"n1"]
        # minInSyncReplicas met again (here: lowered to the set's size): SYNC puts go in
        store.ha.settings.min_in_sync_replicas = 1
        assert store.put_message(Message("T", b"sync-again")).status is PutStatus.PUT_OK
        assert _bodies(store) == [b"nowait", b"n1", b"sync-again"]
