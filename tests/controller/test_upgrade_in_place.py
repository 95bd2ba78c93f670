"""A RocketMQ 4.9 master/slave pair upgrades in place to controller mode, as RocketMQ's
docs/en/controller/deploy.md ("Upgrade Considerations") says: stop the pair once their CommitLogs
are aligned, restart both on the same store directories with ``enableControllerMode=true`` under
a controller, the old master first.

A pair of ``rocketstore serve`` (brokerRole SYNC_MASTER / SLAVE, 4.9 HA) takes messages and a
consumer group commits offsets; both stop; both restart in controller mode under ``rocketstore
controller``. Every old message is read back exactly once, the committed offsets are still
there, new sends are acknowledged by both replicas (allAckInSyncStateSet), and when the master
is SIGKILLed the old slave is elected and takes sends, with every acknowledged message (old and
new) readable from it."""
from __future__ import annotations

import os
import signal
import time

from rocketstore.client.consumer import PullConsumer
from rocketstore.client.producer import Producer
from rocketstore.remoting.codes import RequestCode
from tests.ha.ha_helpers import wait_for
from tests import referee
from tests.cluster import java_rocketmq as jr
from tests.ha.procs import SEG, free_port_block, start_broker, start_namesrv

from .conftest import call, write_conf
from .test_java_brokers import BN, namesrv_ids, sync_state
from .test_mixed_groups import members, send_n
from .test_our_brokers import TOPIC, commitlog_bytes, read_keys, start_ctl_broker

GROUP = "upgrade-cg"
COMMITTED = {0: 7, 1: 4}  # queue -> offset the group commits before the upgrade


def committed(ns: str) -> dict[int, int | None]:
    with PullConsumer(GROUP, ns) as c:
        return {q: c.committed_offset(TOPIC, q) for q in COMMITTED}


def slave_offset(addr: str, q: int) -> int | None:
    r = call(addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q})
    return int(r.ext_fields["offset"]) if r.code == 0 else None


def route_ready(ns: str) -> bool:
    try:
        with PullConsumer(GROUP, ns) as c:
            return len(c.queues(TOPIC)) == 2
    except Exception:  # noqa: BLE001 - no route yet
        return False


def run_49_pair(tmp_path, ns, procs: list) -> tuple[dict[str, int], dict[str, bytes]]:
    """A 4.9 SYNC_MASTER/SLAVE pair of ours at ``tmp_path``/m and /s takes 60 messages and the
    group's committed offsets, is aligned and stopped; returns its ports and what it stored."""
    ports = {"m": free_port_block(), "s": free_port_block()}
    old = dict(name=BN, brokerClusterName="DefaultCluster", defaultTopicQueueNums=2,
               registerNameServerPeriod=1000)
    m = start_broker(str(tmp_path / "m"), ns.addr, "SYNC_MASTER", port=ports["m"], **old)
    procs.append(m)
    s = start_broker(str(tmp_path / "s"), ns.addr, "SLAVE", port=ports["s"], **old)
    procs.append(s)
    stored: dict[str, bytes] = {}  # SEND_OK, or stored on the master before the slave came
    with Producer("upgrade-pg", ns.addr) as p:
        for i in range(60):
            body = b"old%d|" % i * 6
            r = p.send(TOPIC, body)
            assert r.status in ("SEND_OK", "SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT"), r.status
            stored[r.msg_id] = body
    wait_for(lambda: route_ready(ns.addr), 30, "the topic's route", 0.3)
    with PullConsumer(GROUP, ns.addr) as c:
        for q, off in COMMITTED.items():
            c.commit_offset(TOPIC, q, off)
    assert committed(ns.addr) == COMMITTED
    # deploy.md: the pair's CommitLogs aligned before the stop
    wait_for(lambda: commitlog_bytes(str(tmp_path / "s" / "store")) ==
             commitlog_bytes(str(tmp_path / "m" / "store")), 30, "the slave to catch up", 0.3)
    assert m.stop() == 0 and s.stop() == 0
    assert not os.path.exists(tmp_path / "m" / "store" / "epochFileCheckpoint")  # a 4.9 store
    return ports, stored


def test_a_49_master_slave_pair_upgrades_in_place_to_controller_mode(controllers, tmp_path):
    procs: list = []
    try:
        ns = start_namesrv(str(tmp_path / "ns"))
        procs.append(ns)
        ports, stored = run_49_pair(tmp_path, ns, procs)

        # the upgrade: same stores, controller mode, the old master first
        ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                     scanNotActiveBrokerInterval=500), str(tmp_path / "ctl.log"))
        m = start_ctl_broker(str(tmp_path / "m"), ns.addr, ctl.addr, ports["m"], defaultTopicQueueNums=2)
        procs.append(m)
        assert m.ready["role"] == "SYNC_MASTER" and m.ready["controller_broker_id"] == 1
        s = start_ctl_broker(str(tmp_path / "s"), ns.addr, ctl.addr, ports["s"], defaultTopicQueueNums=2)
        procs.append(s)
        assert s.ready["role"] == "SLAVE" and s.ready["controller_broker_id"] == 2
        wait_for(lambda: members(ctl.addr) == {1, 2}, 40, "the old slave in the SyncStateSet", 0.3)
        wait_for(lambda: namesrv_ids(ns.addr) == {0: m.addr, 2: s.addr}, 30,
                 "the name server to show the upgraded pair", 0.3)
        got = read_keys(ns.addr)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)) == len(stored) and dict(got) == stored
        assert committed(ns.addr) == COMMITTED, "consumer offsets lost in the upgrade"
        acked: dict[str, bytes] = {}
        send_n(ns.addr, 30, "new", acked)  # each SEND_OK: both replicas hold it

        # the slave copies the group's offsets from its master (SlaveSynchronize, 3 s after it
        # learns its master, as RocketMQ 5's ReplicasManager schedules it) before the failover
        wait_for(lambda: {q: slave_offset(s.addr, q) for q in COMMITTED} == COMMITTED, 30,
                 "the slave to hold the group's offsets", 0.5)

        # a failover: the old slave is elected and serves everything
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait(10)
        t_kill = time.monotonic()
        wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30, "the old slave elected", 0.2)
        send_n(ns.addr, 20, "after", acked)
        print(f"sends accepted {time.monotonic() - t_kill:.2f} s after the upgraded master died")
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == s.addr, 30, "the old slave as brokerId 0", 0.3)
        got = read_keys(ns.addr)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)), "a message served twice"
        assert dict(got) == {**stored, **acked}
        assert committed(ns.addr) == COMMITTED, "the new master lacks the group's offsets"
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()


@referee.skip_unless(referee.V5)
def test_java_53_brokers_upgrade_our_49_stores_in_place(controllers, tmp_path):
    """The same upgrade done by RocketMQ 5.3.3's own brokers on the stores our 4.9 pair wrote
    (same segment sizes): they read the old messages and offsets, take sends, fail over."""
    home = referee.home(referee.V5)
    procs: list = []
    try:
        ns = start_namesrv(str(tmp_path / "ns"))
        procs.append(ns)
        _, stored = run_49_pair(tmp_path, ns, procs)
        ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                     scanNotActiveBrokerInterval=1000), str(tmp_path / "ctl.log"))
        same = {"mappedFileSizeCommitLog": str(SEG), "mappedFileSizeConsumeQueue": "20000",
                "maxHashSlotNum": "1000", "maxIndexNum": "4000", "defaultTopicQueueNums": "2"}
        m = jr.controller_mode_broker(home, str(tmp_path / "m"), ns.addr, ctl.addr, BN, extra=same)
        procs.append(m)
        wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 1, 60, "the Java master", 0.3)
        s = jr.controller_mode_broker(home, str(tmp_path / "s"), ns.addr, ctl.addr, BN, extra=same)
        procs.append(s)
        wait_for(lambda: members(ctl.addr) == {1, 2}, 60, "the Java slave in the SyncStateSet", 0.5)
        wait_for(lambda: namesrv_ids(ns.addr) == {0: m.addr, 2: s.addr}, 30,
                 "the name server to show the upgraded pair", 0.3)
        got = read_keys(ns.addr)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)) == len(stored) and dict(got) == stored
        assert committed(ns.addr) == COMMITTED, "consumer offsets lost in the upgrade"
        acked: dict[str, bytes] = {}
        send_n(ns.addr, 20, "new", acked)
        os.killpg(m.proc.pid, signal.SIGKILL)
        m.proc.wait(10)
        wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30, "the old slave elected", 0.2)
        send_n(ns.addr, 20, "after", acked)
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == s.addr, 30, "the old slave as brokerId 0", 0.3)
        got = read_keys(ns.addr)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)), "a message served twice"
        assert dict(got) == {**stored, **acked}
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()
