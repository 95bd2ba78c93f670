"""A group that mixes RocketMQ 5.3.3's own broker and ``rocketstore serve`` under RocketMQ
5.3.3's own controller (ControllerStartup; our name server), both ways round, over the auto-switch
HA wire:

1. our master, Java slave: the Java slave handshakes, replicates and is taken into the
   SyncStateSet by our master; with allAckInSyncStateSet a SEND_OK then means it acknowledged;
2. our master is SIGKILLed: the Java controller elects the Java broker, which takes sends;
3. our broker comes back: a slave of the Java master now, it replicates and the Java master
   takes it into the SyncStateSet (SEND_OK again means our slave acknowledged). Every
   acknowledged message is read back exactly once, and both epoch caches are the same.
Skipped, with set-up's reason, without the referee's 5.3.3 release."""
from __future__ import annotations

import os
import signal
import time

from rocketstore.client.producer import Producer
from rocketstore.controller.codes import ControllerRequest as Q
from tests import referee
from tests.cluster import java_rocketmq as jr
from tests.ha.ha_helpers import wait_for
from tests.ha.procs import free_port_block, start_namesrv

from .conftest import body_of, call, stop_all
from .test_java_brokers import BN, namesrv_ids, sync_state
from .test_our_brokers import TOPIC, read_keys, start_ctl_broker

pytestmark = referee.skip_unless(referee.V5)
SEG4 = 4 * 1024 * 1024  # the Java broker's CommitLog segment (tests/cluster/java_rocketmq.py)
JAVA_KEYS = {"haSendHeartbeatInterval": "1000", "controllerHeartBeatTimeoutMills": "4000"}


def send_n(ns: str, n: int, tag: str, acked: dict, deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    i = 0
    while i < n:
        assert time.monotonic() < end, f"only {i} of {n} sends acknowledged in {deadline_s} s"
        try:
            with Producer("ctl-mixed-pg", ns, retries=0) as p:
                while i < n:
                    body = f"{tag}{i}|".encode() * 5
                    r = p.send(TOPIC, body)
                    if r.status != "SEND_OK":
                        raise ConnectionError(r.status)
                    acked[r.msg_id] = body
                    i += 1
        except Exception:  # noqa: BLE001 - no master yet, a stale route, a slave not caught up
            time.sleep(0.3)


def members(ctl: str) -> set[int]:
    return {r["brokerId"] for r in sync_state(ctl).get("inSyncReplicas", [])}


def test_java_master_our_slave_then_our_master_java_slave(tmp_path):
    home = referee.home(referee.V5)
    procs: list = []
    ours = None
    try:
        ctl = jr.start_java_controller(home, str(tmp_path / "ctl"),
                                       {"scanNotActiveBrokerInterval": "1000"})
        procs.append(ctl)
        ns = start_namesrv(str(tmp_path / "ns"))  # ours: one JVM less to start
        procs.append(ns)
        port = free_port_block()
        ours = start_ctl_broker(str(tmp_path / "ours"), ns.addr, ctl.addr, port,
                                mappedFileSizeCommitLog=SEG4, defaultTopicQueueNums=4)
        assert ours.ready["role"] == "SYNC_MASTER" and ours.ready["controller_broker_id"] == 1
        java = jr.controller_mode_broker(home, str(tmp_path / "java"), ns.addr, ctl.addr, BN,
                                         extra=JAVA_KEYS)
        procs.append(java)
        acked: dict[str, bytes] = {}
        send_n(ns.addr, 1, "topic", acked)  # the topic exists (the slave may not be in yet)
        wait_for(lambda: members(ctl.addr) == {1, 2}, 60,
                 "our master to take the Java slave into the SyncStateSet", 0.5)
        send_n(ns.addr, 60, "o", acked)  # each SEND_OK: the Java slave holds it
        wait_for(lambda: namesrv_ids(ns.addr) == {0: ours.addr, 2: java.addr}, 30,
                 "the name server to show our master and the Java slave", 0.3)

        os.kill(ours.proc.pid, signal.SIGKILL)  # our master dies
        ours.proc.wait(10)
        t_kill = time.monotonic()
        wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30,
                 "the Java controller to elect the Java broker", 0.2)
        send_n(ns.addr, 40, "j", acked)
        print(f"the Java broker took sends {time.monotonic() - t_kill:.2f} s after our master died")

        # our broker returns: a slave of the Java master now
        ours = start_ctl_broker(str(tmp_path / "ours"), ns.addr, ctl.addr, port,
                                mappedFileSizeCommitLog=SEG4, defaultTopicQueueNums=4)
        assert ours.ready["role"] == "SLAVE" and ours.ready["controller_broker_id"] == 1
        wait_for(lambda: members(ctl.addr) == {1, 2}, 60,
                 "the Java master to take our slave into the SyncStateSet", 0.5)
        send_n(ns.addr, 40, "k", acked)  # each SEND_OK: our slave holds it
        wait_for(lambda: namesrv_ids(ns.addr) == {0: java.addr, 1: ours.addr}, 30,
                 "the name server to show the Java master and our slave", 0.3)
        got = read_keys(ns.addr, 4)
        keys = [k for k, _ in got]
        assert set(acked) <= set(keys) and len(keys) == len(set(keys))
        bodies = dict(got)
        assert all(bodies[k] == v for k, v in acked.items())
        theirs = body_of(call(java.addr, Q.GET_BROKER_EPOCH_CACHE, {}))
        mine = wait_for(lambda: (lambda b: b if len(b["epochList"]) == 2 else None)(
            body_of(call(ours.addr, Q.GET_BROKER_EPOCH_CACHE, {}))), 20, "our second epoch", 0.3)
        assert [(e["epoch"], e["startOffset"]) for e in theirs["epochList"]] == \
            [(e["epoch"], e["startOffset"]) for e in mine["epochList"]]
    finally:
        if ours is not None:
            ours.stop()
        stop_all(procs)
