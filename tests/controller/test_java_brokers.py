"""RocketMQ 5.3.3's own brokers (``enableControllerMode=true``) under OUR controller, with
RocketMQ's name server: they get their ids and roles from us, the master shows as brokerId 0, the
slave joins the SyncStateSet; the master is SIGKILLed, we elect the SyncStateSet's other member,
sends go on and every acknowledged message is read back. Skipped, with set-up's reason, without
the referee's 5.3.3 release."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rocketstore.client.producer import Producer
from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.remoting.codes import RequestCode
from tests import referee
from tests.cluster import java_rocketmq as jr
from tests.ha.ha_helpers import wait_for
from tests.ha.test_ha_serve import read_all

from .conftest import body_of, call, stop_all, write_conf

pytestmark = referee.skip_unless(referee.V5)
BN, TOPIC = "broker-a", "CtlTopic"


def sync_state(ctl: str) -> dict:
    r = call(ctl, Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, [BN])
    assert r.code == 0, r.remark
    return body_of(r)["replicasInfoTable"].get(BN) or {}


def namesrv_ids(ns: str) -> dict[int, str]:
    """brokerId -> address of broker-a as RocketMQ's name server shows it."""
    r = call(ns, RequestCode.GET_BROKER_CLUSTER_INFO, {})
    table = body_of(r)["brokerAddrTable"]
    return {int(k): v for k, v in (table.get(BN) or {}).get("brokerAddrs", {}).items()}


def send_some(ns: str, n: int, start: int, acked: dict, deadline_s: float = 60) -> float:
    """Send ``n`` messages (retrying while the group has no master); returns the time the first
    one was accepted."""
    first = None
    i = start
    end = time.monotonic() + deadline_s
    while i < start + n:
        assert time.monotonic() < end, f"sends not accepted for {deadline_s} s (at {i})"
        try:
            with Producer("ctl-pg", ns) as p:
                while i < start + n:
                    body = f"m{i}".encode() * 8
                    r = p.send(TOPIC, body)
                    if r.status != "SEND_OK":
                        raise ConnectionError(r.status)
                    first = first or time.monotonic()
                    acked[r.msg_id] = body
                    i += 1
        except Exception:  # noqa: BLE001 - no master yet, a stale route: retry
            time.sleep(0.2)
    return first


class Sender(threading.Thread):
    """Sends without pause until stopped, through every error (no master, a stale route);
    ``acked`` holds what was acknowledged with SEND_OK, ``accepted_at`` when."""

    def __init__(self, ns: str) -> None:
        super().__init__(daemon=True)
        self.ns = ns
        self.acked: dict[str, bytes] = {}
        self.accepted_at: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                with Producer("ctl-pg-live", self.ns) as p:
                    while not self.stop.is_set():
                        body = f"live{i}".encode() * 4
                        i += 1
                        r = p.send(TOPIC, body)
                        if r.status != "SEND_OK":
                            raise ConnectionError(r.status)
                        self.acked[r.msg_id] = body
                        self.accepted_at.append(time.monotonic())
            except Exception:  # noqa: BLE001 - retried
                time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path, request):
    home = referee.home(getattr(request, "param", referee.V5))
    procs = []
    ns = jr.start_java_namesrv(home, str(tmp_path / "ns"))
    procs.append(ns)
    yield home, ns, procs
    stop_all(procs)


@pytest.mark.parametrize("cluster", [referee.V5, referee.V5_NEWEST], indirect=True)
def test_java_brokers_fail_over_under_our_controller(cluster, controllers, tmp_path):
    home, ns, procs = cluster
    ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                 scanNotActiveBrokerInterval=1000), str(tmp_path / "ctl.log"))
    b1 = jr.controller_mode_broker(home, str(tmp_path / "b1"), ns.addr, ctl.addr, BN)
    procs.append(b1)
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 1, 60, "the first master", 0.5)
    b2 = jr.controller_mode_broker(home, str(tmp_path / "b2"), ns.addr, ctl.addr, BN)
    procs.append(b2)
    wait_for(lambda: len(sync_state(ctl.addr).get("inSyncReplicas", [])) == 2, 60,
             "the slave to join the SyncStateSet", 0.5)
    st = sync_state(ctl.addr)
    assert st["masterAddress"] == b1.addr and st["masterEpoch"] == 1
    assert {r["brokerId"]: r["brokerAddress"] for r in st["inSyncReplicas"]} == {1: b1.addr, 2: b2.addr}
    assert all(r["alive"] for r in st["inSyncReplicas"])
    wait_for(lambda: namesrv_ids(ns.addr) == {0: b1.addr, 2: b2.addr}, 30,
             "the name server to show the master as brokerId 0", 0.5)

    acked: dict[str, bytes] = {}
    send_some(ns.addr, 150, 0, acked)
    assert len(acked) == 150
    live = Sender(ns.addr)  # sends go on while the master dies
    live.start()
    wait_for(lambda: len(live.acked) >= 50, 30, "the live sender", 0.1)

    os.killpg(b1.proc.pid, signal.SIGKILL)  # the master dies
    t_kill = time.monotonic()
    b1.proc.wait(10)
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30, "our controller to elect", 0.1)
    t_elected = time.monotonic()
    st = sync_state(ctl.addr)
    assert st["masterAddress"] == b2.addr and st["masterEpoch"] == 2
    assert [r["brokerId"] for r in st["inSyncReplicas"]] == [2]
    first = send_some(ns.addr, 100, 150, acked, deadline_s=60)
    wait_for(lambda: namesrv_ids(ns.addr).get(0) == b2.addr, 30, "the new master as brokerId 0", 0.5)
    wait_for(lambda: any(t > first for t in live.accepted_at), 30, "the live sender to resume", 0.1)
    live.stop.set()
    live.join(30)
    print(f"elected {t_elected - t_kill:.2f} s after the kill; first send accepted after "
          f"{first - t_kill:.2f} s; {len(live.acked)} acknowledged by the live sender")
    assert len(acked) == 250
    acked.update(live.acked)
    # the new master heard of its promotion from us (NOTIFY_BROKER_ROLE_CHANGED), not by polling
    assert any("Receive notifyBrokerRoleChanged request" in open(os.path.join(d, f), errors="replace").read()
               for d, _, fs in os.walk(str(tmp_path / "b2")) for f in fs if f.endswith(".log")), \
        "the new master's log shows no notifyBrokerRoleChanged"
    found = wait_for(lambda: (lambda f: f if set(acked) <= set(f) else None)(read_all(ns.addr, TOPIC)),
                     30, "every acknowledged message on the new master", 0.5)
    assert all(found[k] == v for k, v in acked.items())
    # the epoch file the new master keeps starts its epoch 2 where epoch 1 ended
    r = call(b2.addr, Q.GET_BROKER_EPOCH_CACHE, {})
    epochs = body_of(r)["epochList"]
    assert [e["epoch"] for e in epochs] == [1, 2], epochs

    # the old master comes back (same store and id, a new port): it is told it is a slave,
    # catches up and rejoins the SyncStateSet; the controller records its new address
    b1 = jr.controller_mode_broker(home, str(tmp_path / "b1"), ns.addr, ctl.addr, BN)
    procs.append(b1)
    wait_for(lambda: len(sync_state(ctl.addr).get("inSyncReplicas", [])) == 2, 60,
             "the old master to rejoin the SyncStateSet as a slave", 0.5)
    st = sync_state(ctl.addr)
    assert st["masterBrokerId"] == 2 and st["masterEpoch"] == 2
    assert {r["brokerId"]: r["brokerAddress"] for r in st["inSyncReplicas"]} == {1: b1.addr, 2: b2.addr}
    wait_for(lambda: namesrv_ids(ns.addr) == {0: b2.addr, 1: b1.addr}, 30,
             "the name server to show the old master as slave 1", 0.5)


def test_our_controller_sigkilled_under_running_java_brokers(cluster, controllers, tmp_path):
    """SIGKILL our controller while two 5.3.3 brokers run, restart it on the same port: it comes
    back with the group (ids, master, epochs, SyncStateSet), does not depose the living master
    while the brokers re-heartbeat, and still fails over when the master then dies."""
    home, ns, procs = cluster
    conf = write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                      scanNotActiveBrokerInterval=1000, scanInactiveMasterInterval=2000)
    ctl = controllers(conf, str(tmp_path / "ctl.log"))
    b1 = jr.controller_mode_broker(home, str(tmp_path / "b1"), ns.addr, ctl.addr, BN)
    procs.append(b1)
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 1, 60, "the first master", 0.5)
    b2 = jr.controller_mode_broker(home, str(tmp_path / "b2"), ns.addr, ctl.addr, BN)
    procs.append(b2)
    wait_for(lambda: len(sync_state(ctl.addr).get("inSyncReplicas", [])) == 2, 60, "the SyncStateSet", 0.5)
    before = sync_state(ctl.addr)
    ctl.kill()
    time.sleep(2)
    ctl = controllers(conf, str(tmp_path / "ctl.log"))
    assert ctl.ready["groups"] == 1
    after = sync_state(ctl.addr)
    for k in ("masterBrokerId", "masterAddress", "masterEpoch", "syncStateSetEpoch"):
        assert after[k] == before[k], k
    strip = lambda rs: [(r["brokerId"], r["brokerAddress"]) for r in rs]  # noqa: E731
    assert strip(after["inSyncReplicas"]) == strip(before["inSyncReplicas"])
    # the brokers find the restarted controller and heartbeat again; nobody is deposed
    wait_for(lambda: all(r["alive"] for r in sync_state(ctl.addr)["inSyncReplicas"]), 30,
             "the brokers' heartbeats to the restarted controller", 0.5)
    time.sleep(4)  # two inactive-master scans
    st = sync_state(ctl.addr)
    assert st["masterBrokerId"] == 1 and st["masterEpoch"] == before["masterEpoch"]
    acked: dict[str, bytes] = {}
    send_some(ns.addr, 30, 0, acked)
    os.killpg(b1.proc.pid, signal.SIGKILL)
    b1.proc.wait(10)
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30, "the failover", 0.1)
    send_some(ns.addr, 30, 30, acked)
    found = wait_for(lambda: (lambda f: f if set(acked) <= set(f) else None)(read_all(ns.addr, TOPIC)),
                     30, "every acknowledged message", 0.5)
    assert all(found[k] == v for k, v in acked.items())
