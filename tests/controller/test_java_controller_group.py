"""Three ``rocketstore serve`` brokers of one group under RocketMQ 5.3.3's own controller run as a
three-node DLedger group (ControllerStartup with controllerDLegerPeers n0..n2 and one
controllerDLegerSelfId per node; our name server). The brokers find the controller leader among
``controllerAddr`` (GET_CONTROLLER_METADATA), heartbeat to every node, and

1. the master is SIGKILLed: the Java leader elects a SyncStateSet member, which takes sends;
2. the controller leader is SIGKILLed: the two other nodes elect a new leader, the brokers move to
   it, and the master takes the third broker back into the SyncStateSet through it;
3. that master is SIGKILLed too: the new controller leader elects the last broker, which takes
   sends. Every acknowledged message is read back exactly once.
Skipped, with set-up's reason, without the referee's 5.3.3 release."""
from __future__ import annotations

import os
import signal
import time

from rocketstore.controller.codes import ControllerRequest as Q
from tests import referee
from tests.cluster import java_rocketmq as jr
from tests.ha.ha_helpers import wait_for
from tests.ha.procs import free_port_block, start_namesrv

from .conftest import body_of, call
from .test_java_brokers import BN, namesrv_ids
from .test_mixed_groups import send_n
from .test_our_brokers import read_keys, start_ctl_broker

pytestmark = referee.skip_unless(referee.V5)


def leader_of(nodes: list[jr.JavaProc]) -> str | None:
    """The leader's address as a living node's GET_CONTROLLER_METADATA (1005) names it."""
    for n in nodes:
        if n.proc.poll() is not None:
            continue
        try:
            r = call(n.addr, Q.CONTROLLER_GET_METADATA_INFO, {}, timeout=3)
        except Exception:  # noqa: BLE001 - a node still starting
            continue
        lead = r.ext_fields.get("controllerLeaderAddress") if r.code == 0 else None
        if lead and any(m.addr == lead and m.proc.poll() is None for m in nodes):
            return lead
    return None


def group_state(nodes: list[jr.JavaProc]) -> dict:
    lead = leader_of(nodes)
    if lead is None:
        return {}
    r = call(lead, Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, [BN], timeout=3)
    return (body_of(r)["replicasInfoTable"].get(BN) or {}) if r.code == 0 else {}


def members(nodes) -> set[int]:
    return {r["brokerId"] for r in group_state(nodes).get("inSyncReplicas", [])}


def test_our_brokers_fail_over_under_a_three_node_java_controller_group(tmp_path):
    home = referee.home(referee.V5)
    nodes: list[jr.JavaProc] = []
    procs: list = []
    try:
        nodes = jr.start_java_controller_group(home, str(tmp_path / "ctl"), 3,
                                               {"scanNotActiveBrokerInterval": "1000"})
        first_leader = wait_for(lambda: leader_of(nodes), 60, "a controller leader", 0.5)
        ns = start_namesrv(str(tmp_path / "ns"))
        procs.append(ns)
        ctl_addr = ";".join(n.addr for n in nodes)
        b = {}
        for i in (1, 2, 3):
            b[i] = start_ctl_broker(str(tmp_path / f"b{i}"), ns.addr, ctl_addr, free_port_block())
            procs.append(b[i])
        assert b[1].ready["role"] == "SYNC_MASTER"
        assert [b[i].ready["controller_broker_id"] for i in (1, 2, 3)] == [1, 2, 3]
        acked: dict[str, bytes] = {}
        send_n(ns.addr, 1, "topic", acked)
        wait_for(lambda: members(nodes) == {1, 2, 3}, 60, "both slaves in the SyncStateSet", 0.5)
        send_n(ns.addr, 40, "a", acked)  # each SEND_OK: all three hold it

        # 1. the master dies; the Java leader elects a slave
        b[1].proc.send_signal(signal.SIGKILL)
        b[1].proc.wait(10)
        t_kill = time.monotonic()
        st = wait_for(lambda: (lambda s: s if s.get("masterBrokerId") in (2, 3) else None)(
            group_state(nodes)), 40, "the Java controller group to elect a slave", 0.2)
        m1 = st["masterBrokerId"]
        send_n(ns.addr, 30, "b", acked)
        print(f"first failover: sends accepted {time.monotonic() - t_kill:.2f} s after the kill")
        other = 5 - m1  # the remaining slave of 2 and 3
        wait_for(lambda: members(nodes) == {m1, other}, 60, "the other slave back in the SyncStateSet", 0.5)

        # 2. the controller leader dies; the other two elect a new leader
        dead = next(n for n in nodes if n.addr == leader_of(nodes))
        os.killpg(dead.proc.pid, signal.SIGKILL)
        dead.proc.wait(10)
        t_ctl = time.monotonic()
        new_leader = wait_for(lambda: leader_of(nodes), 60, "a new controller leader", 0.5)
        assert new_leader != dead.addr
        print(f"controller leader {dead.addr} (first leader {first_leader}) killed; "
              f"{new_leader} leads after {time.monotonic() - t_ctl:.2f} s")
        # the group's state survived (a new leader answers once it has replayed its log)
        wait_for(lambda: group_state(nodes).get("masterBrokerId") == m1, 30,
                 "the group at the new leader", 0.3)
        wait_for(lambda: all(r["alive"] for r in group_state(nodes).get("inSyncReplicas", [])), 30,
                 "the brokers' heartbeats at the new leader", 0.5)
        send_n(ns.addr, 20, "c", acked)

        # 3. the master dies again; the new controller leader elects the last broker
        b[m1].proc.send_signal(signal.SIGKILL)
        b[m1].proc.wait(10)
        t_kill = time.monotonic()
        wait_for(lambda: group_state(nodes).get("masterBrokerId") == other, 40,
                 "the new controller leader to elect the last broker", 0.2)
        send_n(ns.addr, 20, "d", acked)
        print(f"second failover: sends accepted {time.monotonic() - t_kill:.2f} s after the kill")
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == b[other].addr, 30,
                 "the last broker as brokerId 0", 0.3)
        got = read_keys(ns.addr)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)), "a message served twice"
        assert set(acked) <= set(keys), f"{len(set(acked) - set(keys))} acknowledged messages lost"
        bodies = dict(got)
        assert all(bodies[k] == v for k, v in acked.items())
    finally:
        for p in reversed(procs):
            p.stop()
        for n in nodes:
            if n.proc.poll() is None:
                os.killpg(n.proc.pid, signal.SIGKILL)
                n.proc.wait(10)
