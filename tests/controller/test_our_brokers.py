"""Three ``rocketstore serve`` brokers of one group in controller mode under ``rocketstore
controller``: the controller gives ids and roles, the master shows at the name server as
brokerId 0, SYNC sends wait for every SyncStateSet member (allAckInSyncStateSet).

The master is frozen (SIGSTOP) under a live producer: the controller misses its heartbeats and
elects a slave, which takes sends within seconds. A send is then made to the frozen master; when
it wakes (a stale master) it writes that message, but cannot have it acknowledged (its
SyncStateSet members left; the controller refuses to shrink the set of a deposed master), learns
its new role, comes back as a slave and sets its divergent tail aside in quarantine. Every
acknowledged message is read back exactly once; the stale write is neither acknowledged nor
served. Then the old master is SIGKILLed and restarted: it rejoins as a slave. Last a slave
dies: the master shrinks its SyncStateSet and acknowledges sends again."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

from rocketstore.client.producer import Producer
from tests.ha.ha_helpers import pull_every, wait_for
from tests.ha.procs import SEG, Proc, _start, broker_conf, free_port_block, start_namesrv

from .conftest import write_conf
from .test_java_brokers import BN, namesrv_ids, sync_state

TOPIC = "CtlOurTopic"


def start_ctl_broker(workdir: str, ns: str, ctl: str, port: int, *args: str, **keys) -> Proc:
    os.makedirs(workdir, exist_ok=True)
    conf = dict(brokerClusterName="DefaultCluster", brokerName=BN, listenPort=port,
                brokerIP1="127.0.0.1", namesrvAddr=ns, enableControllerMode="true",
                controllerAddr=ctl, allAckInSyncStateSet="true", brokerHeartbeatInterval=500,
                controllerHeartBeatTimeoutMills=3000, syncBrokerMetadataPeriod=2000,
                checkSyncStateSetPeriod=1000, haMaxTimeSlaveNotCatchup=10000,
                haSendHeartbeatInterval=500, slaveTimeout=2000, registerNameServerPeriod=3000,
                mappedFileSizeCommitLog=SEG, mappedFileSizeConsumeQueue=20000,
                maxHashSlotNum=1000, maxIndexNum=4000, defaultTopicQueueNums=2)
    conf.update(keys)
    path = broker_conf(os.path.join(workdir, "broker.conf"), **conf)
    import sys
    return _start([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                   os.path.join(workdir, "store"), "--config", path, "--host", "127.0.0.1",
                   "--json", "--log-level", "INFO", *args], os.path.join(workdir, "serve.log"))


def read_keys(ns: str, queues: int = 2) -> list[tuple[str, bytes]]:
    return [(m.uniq_key, m.body) for _, m in pull_every(ns, TOPIC, queues)]


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


def send_direct(addr: str, body: bytes) -> int:
    """One SEND_MESSAGE_V2 to the broker at ``addr``; its response code (-1: no answer)."""
    import asyncio

    from rocketstore.client.transport import RemotingClient
    from rocketstore.remoting.codes import RequestCode
    from rocketstore.remoting.command import RemotingCommand

    async def go() -> int:
        c = RemotingClient(addr)
        await c.connect()
        try:
            cmd = RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2,
                {"a": "ctl-orphan", "b": TOPIC, "c": "TBW102", "d": 2, "e": 0, "f": 0,
                 "g": int(time.time() * 1000), "h": 0, "i": "", "j": 0, "k": False, "m": False},
                body, language="JAVA")
            return (await c.invoke(cmd, 15)).code
        except Exception:  # noqa: BLE001 - the broker restarting under the request
            return -1
        finally:
            c.close()
    return asyncio.run(go())


def commitlog_bytes(store: str) -> bytes:
    d = os.path.join(store, "commitlog")
    return b"".join(open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))).rstrip(b"\0")


def test_our_group_fails_over_and_the_old_master_rejoins(controllers, tmp_path):
    procs: list[Proc] = []
    try:
        ns = start_namesrv(str(tmp_path / "ns"))
        procs.append(ns)
        ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                     scanNotActiveBrokerInterval=500), str(tmp_path / "ctl.log"),
                          "--metrics-port", "0")
        ports = [free_port_block() for _ in range(3)]
        b = {}
        for i, port in enumerate(ports, 1):
            ops = ("--metrics-port", "0") if i == 1 else ()
            b[i] = start_ctl_broker(str(tmp_path / f"b{i}"), ns.addr, ctl.addr, port, *ops)
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
        os.kill(b[1].proc.pid, signal.SIGSTOP)  # the master freezes
        t_kill = time.monotonic()
        st = wait_for(lambda: (lambda s: s if s.get("masterBrokerId") in (2, 3) else None)(
            sync_state(ctl.addr)), 30, "a slave elected", 0.1)
        new = b[st["masterBrokerId"]]
        wait_for(lambda: any(t > t_kill + 0.5 for t in live.accepted_at), 30,
                 "sends accepted by the new master", 0.1)
        t_first = min(t for t in live.accepted_at if t > t_kill + 0.5)
        wait_for(lambda: namesrv_ids(ns.addr).get(0) == new.addr, 30, "new master as brokerId 0", 0.3)

        # a send to the stale master, made while it is frozen: it writes it when it wakes
        orphan_box: list = []

        def stale_send() -> None:
            orphan_box.append(send_direct(b[1].addr, b"orphan" * 10))
        t = threading.Thread(target=stale_send)
        t.start()
        time.sleep(0.5)
        os.kill(b[1].proc.pid, signal.SIGCONT)
        t.join(30)
        assert orphan_box and orphan_box[0] != 0, f"the stale master acknowledged: {orphan_box}"
        wait_for(lambda: {r["brokerId"] for r in sync_state(ctl.addr).get("inSyncReplicas", [])}
                 == {1, 2, 3}, 40, "the stale master back as a slave in the SyncStateSet", 0.3)
        time.sleep(1.0)
        live.stop.set()
        live.join(30)
        acked.update(live.acked)
        print(f"first send accepted {t_first - t_kill:.2f} s after the freeze; "
              f"{len(live.acked)} live sends acknowledged")
        assert b[1].proc.poll() is None
        assert '"role": "SLAVE"' in "".join(b[1].proc.stdout.readline() for _ in range(1))
        # restarted in its process as a slave, its /metrics follows the new broker
        wait_for(lambda: 'rocketstore_ha_role{role="SLAVE"} 1.0' in urllib.request.urlopen(
            b[1].ready["metrics"], timeout=10).read().decode(), 10, "/metrics of the slave", 0.3)

        # every acknowledged message, exactly once, from the new master
        got = wait_for(lambda: (lambda ks: ks if set(acked) <= {k for k, _ in ks} else None)(
            read_keys(ns.addr)), 30, "every acknowledged message", 0.5)
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys)), "a message served twice"
        bodies = dict(got)
        assert all(bodies[k] == v for k, v in acked.items())
        assert not any(v == b"orphan" * 10 for v in bodies.values())  # never served

        # its divergent tail, the stale write among it, is in quarantine, not destroyed
        qroot = tmp_path / "b1" / "store" / "quarantine"
        manifests = [json.load(open(qroot / d / "manifest.json")) for d in os.listdir(qroot)] \
            if qroot.exists() else []
        assert manifests and sum(m["bytes"] for m in manifests) > 0, "no divergent tail kept"
        assert b"orphan" * 10 in b"".join(open(qroot / d / f, "rb").read() for d in os.listdir(qroot)
                                         for f in os.listdir(qroot / d) if f != "manifest.json")
        # and its CommitLog holds the new master's bytes
        wait_for(lambda: commitlog_bytes(str(tmp_path / "b1" / "store")) ==
                 commitlog_bytes(str(new.ready["store"])), 30, "the old master to catch up", 0.5)

        # killed and restarted, the old master comes back as a slave; in between, `rocketstore
        # salvage` shows the stale write among what the cut set aside
        b[1].kill()
        import subprocess
        import sys
        out = subprocess.run([sys.executable, "-m", "rocketstore.cli", "salvage", "--store",
                              str(tmp_path / "b1" / "store"), "--dry-run", "--json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        events = json.loads(out.stdout)["events"]
        assert events and events[0]["status"] == "dry run" and events[0]["found"] >= 1, events
        b[1] = start_ctl_broker(str(tmp_path / "b1"), ns.addr, ctl.addr, ports[0])
        procs.append(b[1])
        assert b[1].ready["role"] == "SLAVE" and b[1].ready["controller_broker_id"] == 1
        wait_for(lambda: namesrv_ids(ns.addr) == {0: new.addr, **{i: b[i].addr for i in (1, 2, 3)
                                                                  if b[i] is not new}}, 30,
                 "the name server to show one master and two slaves", 0.3)
        # a slave dies: its master drops it from the SyncStateSet at once (the connection
        # closed) and allAck sends are acknowledged again without it
        gone = next(i for i in (2, 3) if b[i] is not new)
        b[gone].kill()
        t_gone = time.monotonic()
        wait_for(lambda: gone not in {r["brokerId"] for r in sync_state(ctl.addr)
                                      .get("inSyncReplicas", [])}, 15, "the SyncStateSet to shrink", 0.1)
        with Producer("ctl-our-pg", ns.addr, retries=0) as p:
            wait_for(lambda: p.send(TOPIC, b"after-slave-death").status == "SEND_OK", 15,
                     "an acknowledged send without the dead slave", 0.1)
        print(f"sends acknowledged again {time.monotonic() - t_gone:.2f} s after a slave died")

        # an operator's view: `rocketstore status --controller` names the master, the
        # SyncStateSet without the dead slave, and the last failover (from our controller's
        # /metrics): what this test did, not what the controller is asked again
        import subprocess
        import sys
        args = [sys.executable, "-m", "rocketstore.cli", "status", "--namesrv", ns.addr,
                "--controller", f"127.0.0.1:1;{ctl.addr}",  # a dead address first: the next answers
                "--controller-metrics", ctl.ready["metrics"]]
        out = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        g = json.loads(out.stdout)["controller"]["groups"][BN]
        new_id = st["masterBrokerId"]
        assert (g["masterBrokerId"], g["masterAddress"]) == (new_id, new.addr)
        assert gone not in {r["brokerId"] for r in g["inSyncReplicas"]}
        assert {r["brokerId"]: r["alive"] for r in g["notInSyncReplicas"]}.get(gone) is False
        assert g["lastFailover"]["toId"] == new_id and g["lastFailover"]["fromId"] == 1
        assert g["lastFailover"]["at"] >= time.time() - 600
        text = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert text.returncode == 0, text.stderr
        assert f"group {BN}: master {new_id} " in text.stdout, text.stdout
        assert "last failover: " in text.stdout and f"1 -> {new_id}" in text.stdout, text.stdout
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                try:
                    os.kill(p.proc.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.stop()
