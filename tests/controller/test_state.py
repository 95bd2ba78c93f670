"""The controller's state machine, pure: RocketMQ 5.3.3's ReplicasInfoManager answers (codes,
epochs, ids), and the property that replaying a decision's events rebuilds the same state."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.controller.codes import ControllerResponse as R
from rocketstore.controller.state import ReplicasInfo

C, B = "DefaultCluster", "broker-a"


def commit(s: ReplicasInfo, res):
    for ev in res.events:
        s.apply(ev)
    return res


def register(s: ReplicasInfo, addr: str, alive=lambda b: True) -> int:
    bid = s.get_next_broker_id(C, B).header["nextBrokerId"]
    assert commit(s, s.apply_broker_id(C, B, bid, f"{addr};1")).code == R.SUCCESS
    assert commit(s, s.register_broker(C, B, bid, addr, alive)).code == R.SUCCESS
    return bid


def rank_of(table):
    return lambda b: table.get(b)


def test_ids_registration_and_first_master():
    s = ReplicasInfo()
    assert s.get_next_broker_id(C, B).header["nextBrokerId"] == 1
    # an unknown group only takes id 1
    assert s.apply_broker_id(C, B, 2, "x;1").code == R.CONTROLLER_BROKER_ID_INVALID
    assert s.register_broker(C, B, 1, "a", lambda b: True).code == R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert register(s, "h:1") == 1
    res = commit(s, s.elect_master(B, 1, False, rank_of({}), False))  # the first master: the asker
    assert res.code == R.SUCCESS
    assert res.header == {"masterBrokerId": 1, "masterAddress": "h:1", "masterEpoch": 1,
                          "syncStateSetEpoch": 1}
    assert res.body["syncStateSet"] == [1] and res.body["brokerMemberGroup"]["brokerAddrs"] == {1: "h:1"}
    assert register(s, "h:2") == 2
    # id 2 is taken by another check code; re-applying with the same code is fine
    assert s.apply_broker_id(C, B, 2, "h:9;5").code == R.CONTROLLER_BROKER_ID_INVALID
    assert s.apply_broker_id(C, B, 2, "h:2;1").code == R.SUCCESS
    reg = s.register_broker(C, B, 2, "h:2b", lambda b: True)
    assert reg.header["masterBrokerId"] == 1 and reg.events[0]["type"] == "update_broker_address"
    commit(s, reg)
    assert s.groups[B].addr(2) == "h:2b"
    # the master is dead: registration answers no master
    assert "masterBrokerId" not in s.register_broker(C, B, 2, "h:2b", lambda b: b != 1).header


def _two() -> ReplicasInfo:
    s = ReplicasInfo()
    register(s, "h:1")
    commit(s, s.elect_master(B, 1, False, rank_of({}), False))
    register(s, "h:2")
    register(s, "h:3")
    return s


def test_alter_sync_state_set_checks_in_rocketmq_order():
    s = _two()
    yes = lambda b: True  # noqa: E731
    assert s.alter_sync_state_set("nope", 1, 1, {1, 2}, 1, yes).code == R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert s.alter_sync_state_set(B, 1, 1, {1}, 1, yes).code == R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert s.alter_sync_state_set(B, 2, 1, {1, 2}, 1, yes).code == R.CONTROLLER_INVALID_MASTER
    assert s.alter_sync_state_set(B, 1, 0, {1, 2}, 1, yes).code == R.CONTROLLER_FENCED_MASTER_EPOCH
    assert s.alter_sync_state_set(B, 1, 1, {1, 2}, 0, yes).code == R.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert s.alter_sync_state_set(B, 1, 1, {1, 7}, 1, yes).code == R.CONTROLLER_INVALID_REPLICAS
    assert s.alter_sync_state_set(B, 1, 1, {1, 2}, 1, lambda b: b == 1).code == R.CONTROLLER_BROKER_NOT_ALIVE
    assert s.alter_sync_state_set(B, 1, 1, {2, 3}, 1, yes).code == R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    res = commit(s, s.alter_sync_state_set(B, 1, 1, {1, 2, 3}, 1, yes))
    assert res.code == R.SUCCESS and res.header == {"newSyncStateSetEpoch": 2}
    assert res.body == {"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}
    assert s.get_replica_info(B).body == {"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}


def test_elect_policy_epoch_then_offset_then_priority():
    s = _two()
    commit(s, s.alter_sync_state_set(B, 1, 1, {1, 2, 3}, 1, lambda b: True))
    alive_master = {1: (1, 100, 5), 2: (1, 50, 1), 3: (1, 100, 9)}
    res = s.elect_master(B, None, False, rank_of(alive_master), False)
    assert res.code == R.CONTROLLER_MASTER_STILL_EXIST and res.header["masterBrokerId"] == 1
    assert res.events == []
    # the master is dead: the highest offset wins, then the lower priority value
    res = commit(s, s.elect_master(B, None, False, rank_of({2: (1, 50, 1), 3: (1, 100, 9)}), False))
    assert res.header["masterBrokerId"] == 3 and res.header["masterEpoch"] == 2
    assert s.groups[B].sync_state_set == {3} and s.groups[B].sync_state_set_epoch == 3
    s2 = _two()
    commit(s2, s2.alter_sync_state_set(B, 1, 1, {1, 2, 3}, 1, lambda b: True))
    res = s2.elect_master(B, None, False, rank_of({2: (1, 100, 1), 3: (1, 100, 9)}), False)
    assert res.header["masterBrokerId"] == 2
    res = s2.elect_master(B, None, False, rank_of({2: (1, 100, 1), 3: (2, 0, 9)}), False)
    assert res.header["masterBrokerId"] == 3  # a higher epoch beats any offset


def test_no_candidate_keeps_the_set_and_raises_the_epoch_unclean_elects_outside():
    s = _two()  # SyncStateSet {1}; 2 and 3 are outside it
    only_two = rank_of({2: (1, 10, 1)})
    res = s.elect_master(B, 2, False, only_two, False)  # a broker asked: nothing changes
    assert res.code == R.CONTROLLER_ELECT_MASTER_FAILED and res.events == []
    res = commit(s, s.elect_master(B, None, False, only_two, False))  # the controller asked
    assert res.code == R.CONTROLLER_MASTER_NOT_AVAILABLE
    g = s.groups[B]
    assert g.master is None and g.master_epoch == 2 and g.sync_state_set == {1}
    res = commit(s, s.elect_master(B, None, False, only_two, True))  # enableElectUncleanMaster
    assert res.code == R.SUCCESS and g.master == 2 and g.master_epoch == 3


def test_designated_election_and_clean():
    s = _two()
    commit(s, s.alter_sync_state_set(B, 1, 1, {1, 2}, 1, lambda b: True))
    live = rank_of({1: (1, 0, 1), 2: (1, 0, 1), 3: (1, 0, 1)})
    assert s.elect_master(B, 3, True, live, False).code == R.CONTROLLER_ELECT_MASTER_FAILED
    res = commit(s, s.elect_master(B, 2, True, live, False))
    assert res.code == R.SUCCESS and s.groups[B].master == 2
    assert s.clean_broker_data(B, "3", False, lambda b: True).code == R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert s.clean_broker_data(B, None, False, lambda b: False).code == R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert s.clean_broker_data(B, "x", False, lambda b: False).code == R.CONTROLLER_INVALID_REQUEST
    commit(s, s.clean_broker_data(B, "3", False, lambda b: False))
    assert set(s.groups[B].brokers) == {1, 2}
    commit(s, s.clean_broker_data(B, None, True, lambda b: True))
    assert B not in s.groups
    assert s.clean_broker_data(B, None, True, lambda b: True).code == R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


ops = st.lists(st.tuples(st.sampled_from(["reg", "elect", "kill", "revive", "alter", "admin"]),
                         st.integers(1, 4), st.integers(0, 3)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_histories_keep_the_invariants_and_replay(history):
    s = ReplicasInfo()
    log = []
    dead: set[int] = set()
    offsets: dict[int, int] = {}

    def alive(b):
        return b not in dead

    def rank(b):
        return None if b in dead or b not in s.groups.get(B, None).brokers else (1, offsets.get(b, 0), b)

    def run(res):
        log.extend(res.events)
        commit(s, res)
        return res

    last_epoch = 0
    for op, n, k in history:
        g = s.groups.get(B)
        if op == "reg":
            bid = s.get_next_broker_id(C, B).header["nextBrokerId"]
            run(s.apply_broker_id(C, B, bid, f"h:{bid};0"))
            run(s.register_broker(C, B, bid, f"h:{bid}", alive))
        elif g is None:
            continue
        elif op == "elect":
            run(s.elect_master(B, None if k == 0 else n, False, rank, False))
        elif op == "admin":
            run(s.elect_master(B, n, True, rank, k == 3))
        elif op == "kill":
            dead.add(n)
        elif op == "revive":
            dead.discard(n)
            offsets[n] = offsets.get(n, 0) + k
        elif op == "alter" and g.master is not None:
            new = {g.master} | {b for b in g.brokers if (b + k) % 2 == 0}
            run(s.alter_sync_state_set(B, g.master, g.master_epoch, new, g.sync_state_set_epoch, alive))
        g = s.groups.get(B)
        if g is not None:
            assert g.sync_state_set <= set(g.brokers)
            if g.master is not None:
                assert g.master in g.sync_state_set
            assert g.master_epoch >= last_epoch
            last_epoch = g.master_epoch
    replayed = ReplicasInfo()
    for ev in log:
        replayed.apply(ev)
    assert replayed.to_json() == s.to_json()
    assert ReplicasInfo.from_json(s.to_json()).to_json() == s.to_json()
