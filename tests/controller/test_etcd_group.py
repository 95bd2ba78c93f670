"""A replicated controller group (``controllerType=etcd``): three ``rocketstore controller``
processes on a real three-member etcd cluster. One leads; the others answer RocketMQ's
CONTROLLER_NOT_LEADER and name the leader in GET_CONTROLLER_METADATA; SIGKILL of the leader, or of
an etcd member, loses no decision; a leader paused past its lease (SIGSTOP) and woken again can
no longer decide — its writes are fenced in etcd — and steps down."""
from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.controller.codes import ControllerResponse as R
from tests import referee
from tests.broker.conftest import free_port
from tests.etcdserver import start_etcd_cluster

from .conftest import body_of, call, stop_all, write_conf
from .test_controller_process import BN, CL, FakeBrokerLink, _scrape

LEASE_S = 2


@pytest.fixture
def etcd(tmp_path):
    cluster = start_etcd_cluster(str(tmp_path / "etcd"))
    yield cluster
    cluster.stop()


def _group(tmp_path, etcd, controllers, n: int = 3) -> list:
    ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    out = []
    for i, port in enumerate(ports):
        conf = write_conf(str(tmp_path / f"c{i}.conf"), str(tmp_path / f"store{i}"), port,
                          controllerType="etcd", etcdEndpoints=etcd.endpoints,
                          etcdLeaseSeconds=LEASE_S, controllerDLegerSelfId=f"n{i}",
                          controllerDLegerPeers=peers, scanNotActiveBrokerInterval=500)
        out.append(controllers(conf, str(tmp_path / f"c{i}.log"), "--metrics-port", "0"))
    return out


def _meta(addr: str) -> dict | None:
    try:
        r = call(addr, Q.CONTROLLER_GET_METADATA_INFO, {}, timeout=3)
    except (OSError, asyncio.TimeoutError):
        return None
    return r.ext_fields if r is not None and r.code == R.SUCCESS else None


def _wait_leader(nodes, timeout: float = 20.0, not_addr: str | None = None):
    """The one node that says isLeader, once every live node names it as the leader."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        metas = {c.addr: _meta(c.addr) for c in nodes}
        leaders = [a for a, m in metas.items() if m and m.get("isLeader") == "true"]
        if len(leaders) == 1 and leaders[0] != not_addr and all(
                m and m.get("controllerLeaderAddress") == leaders[0] for m in metas.values()):
            return next(c for c in nodes if c.addr == leaders[0])
        seen = metas
        time.sleep(0.2)
    raise AssertionError(f"no single leader within {timeout} s: {seen}")


def _replica(addr: str):
    r = call(addr, Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BN})
    return r.code, r.ext_fields, (body_of(r) if r.code == R.SUCCESS else None)


def test_one_leader_followers_refuse_and_a_killed_leader_loses_nothing(tmp_path, etcd, controllers):
    nodes = _group(tmp_path, etcd, controllers)
    leader = _wait_leader(nodes)
    followers = [c for c in nodes if c is not leader]
    m = _meta(followers[0].addr)
    assert m["isLeader"] == "false" and m["group"] and m["peers"].count(";") == 3, m
    for f in followers:  # followers decide nothing, and say so with RocketMQ's code and remark
        r = call(f.addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CL, "brokerName": BN})
        assert (r.code, r.remark) == (R.CONTROLLER_NOT_LEADER, "The controller is not in leader state")

    async def first():
        b1 = FakeBrokerLink(leader.addr, "127.0.0.1:1001")
        b2 = FakeBrokerLink(leader.addr, "127.0.0.1:1002")
        assert await b1.join() == 1
        r = await b1.ask(Q.CONTROLLER_ELECT_MASTER, {"clusterName": CL, "brokerName": BN,
                                                    "brokerId": 1, "designateElect": False})
        assert r.code == R.SUCCESS and r.ext_fields["masterEpoch"] == "1", r.remark
        assert await b2.join() == 2
        r = await b1.ask(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                         {"brokerName": BN, "masterBrokerId": 1, "masterEpoch": 1},
                         {"syncStateSet": [1, 2], "syncStateSetEpoch": 1})
        assert r.code == R.SUCCESS and r.ext_fields["newSyncStateSetEpoch"] == "2", r.remark
        return b1, b2
    loop = asyncio.new_event_loop()
    b1, b2 = loop.run_until_complete(first())
    code, before, set_before = _replica(leader.addr)
    assert code == R.SUCCESS and set_before == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    # /metrics: the leader shows the group, a follower says it does not lead and shows none
    lead_m, foll_m = _scrape(leader.ready["metrics"]), _scrape(followers[0].ready["metrics"])
    assert lead_m["rocketstore_controller_leader"][0][1] == 1
    assert [v for _, v in lead_m["rocketstore_controller_master_epoch"]] == [1]
    assert foll_m["rocketstore_controller_leader"][0][1] == 0
    assert "rocketstore_controller_master_epoch" not in foll_m

    t0 = time.monotonic()
    leader.kill()  # SIGKILL: its lease stops being renewed
    new = _wait_leader(followers, timeout=LEASE_S * 5 + 10)
    took = time.monotonic() - t0
    code, after, set_after = _replica(new.addr)
    assert code == R.SUCCESS
    assert (after["masterBrokerId"], after["masterAddress"], after["masterEpoch"]) == \
        (before["masterBrokerId"], before["masterAddress"], before["masterEpoch"]) == ("1", "127.0.0.1:1001", "1")
    assert set_after == set_before
    # the new leader goes on from the same state: the next id, and an id already taken refused
    r = call(new.addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CL, "brokerName": BN})
    assert r.ext_fields["nextBrokerId"] == "3"
    r = call(new.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": 2, "registerCheckCode": "127.0.0.1:9;1"})
    assert r.code == R.CONTROLLER_BROKER_ID_INVALID

    # one etcd member dies too: the group still decides (two of three members are a quorum)
    etcd.kill(etcd.members[0])
    r = call(new.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": 3, "registerCheckCode": "127.0.0.1:1003;1"}, timeout=15)
    assert r.code == R.SUCCESS, r.remark
    r = call(new.addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CL, "brokerName": BN})
    assert r.ext_fields["nextBrokerId"] == "4"
    for b in (b1, b2):
        b.c.close()
    loop.close()
    print(f"leader SIGKILLed -> new leader answering in {took:.1f} s (lease {LEASE_S} s)")


def test_a_leader_paused_past_its_lease_cannot_decide_when_it_wakes(tmp_path, etcd, controllers):
    nodes = _group(tmp_path, etcd, controllers, n=2)
    old = _wait_leader(nodes)
    other = next(c for c in nodes if c is not old)
    r = call(old.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:1001;1"})
    assert r.code == R.SUCCESS, r.remark

    os.killpg(old.proc.pid, signal.SIGSTOP)
    try:
        new = _wait_leader([other], timeout=LEASE_S * 5 + 10)
        r = call(new.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
                 "appliedBrokerId": 2, "registerCheckCode": "127.0.0.1:1002;1"})
        assert r.code == R.SUCCESS, r.remark
    finally:
        os.killpg(old.proc.pid, signal.SIGCONT)
    # at once after waking, before its campaign loop notices: its own state still has id 2
    # free, so only the fence in etcd stands between it and a second owner of id 2
    r = call(old.addr, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": CL, "brokerName": BN,
             "appliedBrokerId": 2, "registerCheckCode": "127.0.0.1:6666;1"})
    assert r.code != R.SUCCESS, "a deposed leader's write was accepted"
    m = _meta(old.addr)
    deadline = time.monotonic() + 10
    while m.get("isLeader") == "true" and time.monotonic() < deadline:
        time.sleep(0.2)
        m = _meta(old.addr)
    assert m["isLeader"] == "false" and m["controllerLeaderAddress"] == new.addr, m
    # the state in etcd has the new leader's decision, not the stale one's
    r = call(new.addr, Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": CL, "brokerName": BN})
    assert r.ext_fields["nextBrokerId"] == "3"


def test_several_peers_without_etcd_are_refused(tmp_path):
    import subprocess
    import sys
    conf = write_conf(str(tmp_path / "c.conf"), str(tmp_path / "s"),
                      controllerDLegerPeers="n0-127.0.0.1:1;n1-127.0.0.1:2", controllerDLegerSelfId="n0")
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "controller", "--config", conf],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "controllerType=etcd" in p.stderr, p.stderr
    assert not (tmp_path / "s").exists()  # nothing created


@referee.skip_unless(referee.V5)
def test_java_brokers_fail_over_under_our_group_after_its_leader_died(tmp_path, etcd, controllers):
    """RocketMQ 5.3.3's brokers with ``controllerAddr`` naming all three controllers: they find
    the leader through GET_CONTROLLER_METADATA, keep their roles when the leader is SIGKILLed,
    and the next leader fails the group over when the master is SIGKILLed too; every
    acknowledged message is read back."""
    from tests.cluster import java_rocketmq as jr
    from tests.ha.ha_helpers import wait_for
    from tests.ha.test_ha_serve import read_all

    from .test_java_brokers import TOPIC, namesrv_ids, send_some
    from .test_mqadmin_java_control import mqadmin

    home = referee.home(referee.V5)
    nodes = _group(tmp_path, etcd, controllers)
    leader = _wait_leader(nodes)
    ns = jr.start_java_namesrv(home, str(tmp_path / "ns"))
    procs = [ns]

    def state(addr: str) -> dict:
        r = call(addr, Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, [BN])
        return (body_of(r)["replicasInfoTable"].get(BN) or {}) if r.code == R.SUCCESS else {}
    try:
        addrs = ";".join(c.addr for c in nodes)
        b1 = jr.controller_mode_broker(home, str(tmp_path / "b1"), ns.addr, addrs, BN)
        procs.append(b1)
        wait_for(lambda: state(leader.addr).get("masterBrokerId") == 1, 60, "the first master", 0.5)
        b2 = jr.controller_mode_broker(home, str(tmp_path / "b2"), ns.addr, addrs, BN)
        procs.append(b2)
        wait_for(lambda: len(state(leader.addr).get("inSyncReplicas", [])) == 2, 60,
                 "the slave to join the SyncStateSet", 0.5)
        acked: dict[str, bytes] = {}
        send_some(ns.addr, 100, 0, acked)
        # mqadmin 5.3.3 asked a follower names the leader, as against RocketMQ's DLedger group
        follower = next(c for c in nodes if c is not leader)
        meta = mqadmin(home, "getControllerMetaData", "-a", follower.addr)
        assert f"#ControllerLeaderAddress\t{leader.addr}" in meta, meta
        assert meta.count("#Peer:") == 3, meta

        leader.kill()
        new = _wait_leader([c for c in nodes if c is not leader], timeout=LEASE_S * 5 + 10)
        st = state(new.addr)
        assert (st["masterBrokerId"], st["masterAddress"], st["masterEpoch"]) == (1, b1.addr, 1)
        assert sorted(r["brokerId"] for r in st["inSyncReplicas"]) == [1, 2]
        # the brokers move their heartbeats to the new leader: both alive there
        wait_for(lambda: all(r["alive"] for r in state(new.addr).get("inSyncReplicas", [])), 40,
                 "the brokers to heartbeat the new leader", 0.5)

        os.killpg(b1.proc.pid, signal.SIGKILL)
        b1.proc.wait(10)
        wait_for(lambda: state(new.addr).get("masterBrokerId") == 2, 40, "the new leader to elect", 0.2)
        assert state(new.addr)["masterEpoch"] == 2
        send_some(ns.addr, 50, 100, acked, deadline_s=60)
        assert len(acked) == 150
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == b2.addr, 30,
                 "the name server to show the new master as brokerId 0", 0.5)
        found = wait_for(lambda: (lambda f: f if set(acked) <= set(f) else None)(read_all(ns.addr, TOPIC)),
                         30, "every acknowledged message on the new master", 0.5)
        assert all(found[k] == v for k, v in acked.items())
    finally:
        stop_all(procs)
