"""Three ``rocketstore serve`` brokers of one group in controller mode under ``rocketstore
controller``: the controller gives ids and roles, the master shows at the name server as
brokerId 0, SYNC sends wait for every SyncStateSet member (allAckInSyncStateSet). Both slaves
freeze (SIGSTOP) until the master drops their HA connections, a send then is written on the
master only (not acknowledged: FLUSH_SLAVE_TIMEOUT), and the master is SIGKILLed: a slave is
elected, takes sends within seconds, every acknowledged message is read back exactly
once, and the old master comes back as a slave with its divergent tail in quarantine — never
acknowledged, never served, not destroyed."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

from rocketstore.client.consumer import PullConsumer
from rocketstore.client.producer import Producer
from tests.ha.ha_helpers import wait_for
from tests.ha.procs import SEG, Proc, _start, broker_conf, free_port_block, start_namesrv

from .conftest import write_conf
from .test_java_brokers import BN, namesrv_ids, sync_state

TOPIC = "CtlOurTopic"


def start_ctl_broker(workdir: str, ns: str, ctl: str, port: int, **keys) -> Proc:
    os.makedirs(workdir, exist_ok=True)
    conf = dict(brokerClusterName="DefaultCluster", brokerName=BN, listenPort=port,
                brokerIP1="127.0.0.1", namesrvAddr=ns, enableControllerMode="true",
                controllerAddr=ctl, allAckInSyncStateSet="true", brokerHeartbeatInterval=500,
                controllerHeartBeatTimeoutMills=12000, syncBrokerMetadataPeriod=1000,
                checkSyncStateSetPeriod=1000, haMaxTimeSlaveNotCatchup=20000,
                haSendHeartbeatInterval=500, haHousekeepingInterval=2000, slaveTimeout=2000, registerNameServerPeriod=3000,
                mappedFileSizeCommitLog=SEG, mappedFileSizeConsumeQueue=20000,
                maxHashSlotNum=1000, maxIndexNum=4000, defaultTopicQueueNums=2)
    conf.update(keys)
    path = broker_conf(os.path.join(workdir, "broker.conf"), **conf)
    import sys
    return _start([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                   os.path.join(workdir, "store"), "--config", path, "--host", "127.0.0.1",
                   "--json", "--log-level", "INFO"], os.path.join(workdir, "serve.log"))


def read_keys(ns: str) -> list[tuple[str, bytes]]:
    out = []
    with PullConsumer("ctl-reader", ns) as c:
        for q in range(2):
            off = 0
            while True:
                r = c.pull(TOPIC, q, off, 32)
                if r.status != "FOUND":
                    break
                out.extend((m.uniq_key, m.body) for m in r.messages)
                off = r.next_begin_offset
    return out


class Sender(threading.Thread):
    def __init__(self, ns: str, tag: str) -> None:
        super().__init__(daemon=True)
        self.ns, self.tag = ns, tag
        self.acked: dict[str, bytes] = {}
        self.accepted_at: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                with Producer("ctl-our-pg", self.ns, retries=0) as p:
                    while not self.stop.is_set():
                        body = f"{self.tag}{i}|".encode() * 6
                        i += 1
                        r = p.send(TOPIC, body)
                        if r.status == "SEND_OK":
                            self.acked[r.msg_id] = body
                            self.accepted_at.append(time.monotonic())
            except Exception:  # noqa: BLE001 - no master for a moment, a stale route
                time.sleep(0.05)


def commitlog_bytes(store: str) -> bytes:
    d = os.path.join(store, "commitlog")
    return b"".join(open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))).rstrip(b"\0")


def test_our_group_fails_over_and_the_old_master_rejoins(controllers, tmp_path):
    procs: list[Proc] = []
    try:
        ns = start_namesrv(str(tmp_path / "ns"))
        procs.append(ns)
        ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                     scanNotActiveBrokerInterval=500), str(tmp_path / "ctl.log"))
        ports = [free_port_block() for _ in range(3)]
        b = {}
        for i, port in enumerate(ports, 1):
            b[i] = start_ctl_broker(str(tmp_path / f"b{i}"), ns.addr, ctl.addr, port)
            procs.append(b[i])
        assert b[1].ready["role"] == "SYNC_MASTER" and b[1].ready["broker_id"] == 0
        assert [b[i].ready["role"] for i in (2, 3)] == ["SLAVE", "SLAVE"]
        assert [b[i].ready["controller_broker_id"] for i in (1, 2, 3)] == [1, 2, 3]
        # the persistent ids, as RocketMQ writes them
        assert open(str(tmp_path / "b2" / "store" / "brokerIdentity")).read() == f"DefaultCluster#{BN}#2"
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == b[1].addr, 30, "master as brokerId 0", 0.3)
        with Producer("ctl-our-pg", ns.addr) as p:
            p.send(TOPIC, b"first")  # the topic exists
        wait_for(lambda: len(sync_state(ctl.addr).get("inSyncReplicas", [])) == 3, 40,
                 "both slaves in the SyncStateSet", 0.3)
        acked: dict[str, bytes] = {}
        with Producer("ctl-our-pg", ns.addr, retries=0) as p:
            for i in range(60):
                r = p.send(TOPIC, b"pre%d|" % i * 8)
                assert r.status == "SEND_OK", r.status
                acked[r.msg_id] = b"pre%d|" % i * 8

        live = Sender(ns.addr, "live")
        live.start()
        wait_for(lambda: len(live.acked) >= 30, 30, "the live sender", 0.1)
        for i in (2, 3):  # the slaves freeze: the master drops their connections
            os.kill(b[i].proc.pid, signal.SIGSTOP)
        wait_for(lambda: b[1].log().count("auto-switch HA connection from") >= 2, 15,
                 "the master to drop both slaves", 0.1)
        with Producer("ctl-orphan", ns.addr, retries=0) as p:  # written on the master only
            orphan = p.send(TOPIC, b"orphan" * 10)
        assert orphan.status == "FLUSH_SLAVE_TIMEOUT", orphan.status
        os.kill(b[1].proc.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        b[1].proc.wait(10)
        for i in (2, 3):
            os.kill(b[i].proc.pid, signal.SIGCONT)
        old_log = commitlog_bytes(str(tmp_path / "b1" / "store"))
        st = wait_for(lambda: (lambda s: s if s.get("masterBrokerId") in (2, 3) else None)(
            sync_state(ctl.addr)), 30, "a slave elected", 0.1)
        new = b[st["masterBrokerId"]]
        wait_for(lambda: any(t > t_kill for t in live.accepted_at), 30,
                 "sends accepted by the new master", 0.1)
        t_first = min(t for t in live.accepted_at if t > t_kill)
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == new.addr, 30, "new master as brokerId 0", 0.3)
        time.sleep(1.0)
        live.stop.set()
        live.join(30)
        acked.update(live.acked)
        print(f"first send accepted {t_first - t_kill:.2f} s after the kill; "
              f"{len(live.acked)} live sends acknowledged")

        # every acknowledged message, exactly once, from the new master
        got = wait_for(lambda: (lambda ks: ks if set(acked) <= {k for k, _ in ks} else None)(
            read_keys(ns.addr)), 30, "every acknowledged message", 0.5)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)), "a message served twice"
        bodies = dict(got)
        assert all(bodies[k] == v for k, v in acked.items())
        assert orphan.msg_id not in bodies  # never acknowledged, not served by the new master

        # the old master returns: a slave now, its unreplicated tail set aside, not served
        b[1] = start_ctl_broker(str(tmp_path / "b1"), ns.addr, ctl.addr, ports[0])
        procs.append(b[1])
        assert b[1].ready["role"] == "SLAVE"
        wait_for(lambda: {r["brokerId"] for r in sync_state(ctl.addr).get("inSyncReplicas", [])}
                 == {1, 2, 3}, 40, "the old master back in the SyncStateSet", 0.3)
        st = sync_state(ctl.addr)
        assert st["masterBrokerId"] == new.ready["controller_broker_id"]
        qroot = tmp_path / "b1" / "store" / "quarantine"
        manifests = [json.load(open(qroot / d / "manifest.json")) for d in os.listdir(qroot)] \
            if qroot.exists() else []
        assert manifests and sum(m["bytes"] for m in manifests) > 0, "no divergent tail kept"
        cut = min(m["cut_at"] for m in manifests)
        assert len(old_log) > cut  # the old master had written past the common point
        assert b"orphan" * 10 in b"".join(open(qroot / d / f, "rb").read() for d in os.listdir(qroot)
                                         for f in os.listdir(qroot / d) if f != "manifest.json")
        # and its CommitLog now holds the new master's bytes, not its own tail
        wait_for(lambda: commitlog_bytes(str(tmp_path / "b1" / "store")) ==
                 commitlog_bytes(str(new.ready["store"])), 30, "the old master to catch up", 0.5)
        assert commitlog_bytes(str(tmp_path / "b1" / "store"))[:cut] == old_log[:cut]
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                try:
                    os.kill(p.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.stop()
