"""The fault loop (``faults.py``) on a controller-mode group: two replicas
(``allAckInSyncStateSet=true``) — RocketMQ 5.3.3's brokers, and ours (``rocketstore serve`` in
controller mode) — under three of our controllers on etcd, producers and a
reader running throughout, and one fault after another: the master SIGKILLed, the master paused
past its heartbeat timeout (SIGSTOP, then SIGCONT: a stale master wakes up), the leader
controller SIGKILLed, the master cut off from every controller (a proxy the test controls), a
slave paused. After each, the loop waits for the group to take writes again. The checker then
proves nothing acknowledged was lost or stored twice, no reader was served backwards, and the
replicas' epoch files agree. ``ROCKETSTORE_FAULT_ROUNDS`` repeats the list (default once)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.controller.codes import ControllerResponse as R
from tests import referee
from tests.broker.conftest import free_port
from tests.cluster import java_rocketmq as jr
from tests.ha.ha_helpers import TcpProxy, wait_for

from . import faults
from .conftest import body_of, call
from .test_etcd_group import LEASE_S, _group, _wait_leader, etcd  # noqa: F401 - the fixture

pytestmark = referee.skip_unless(referee.V5)
BN, TOPIC = "broker-f", "FaultTopic"
HB_TIMEOUT_MS = 6000  # the brokers' controllerHeartBeatTimeoutMills (controller_mode_broker)


def signal_broker(b, sig: int) -> None:
    """A Java broker runs in a process group of its own (launcher + JVM); ours is one process."""
    if isinstance(b, jr.JavaProc):
        os.killpg(b.proc.pid, sig)
    else:
        b.proc.send_signal(sig)


class Group:
    """Two replicas of ``kind`` ("java" or "ours"), each talking to the controllers through
    proxies of its own (so one replica alone can be cut off), and the three controllers."""

    def __init__(self, kind, home, tmp, ns, nodes) -> None:
        self.kind, self.home, self.tmp, self.ns, self.nodes = kind, home, tmp, ns, nodes
        self.proxies: dict[str, list[TcpProxy]] = {}
        self.brokers: dict = {}
        self.ports: dict[str, int] = {}  # ours keep their listenPort across restarts

    def leader(self):
        return _wait_leader([c for c in self.nodes if c.proc.poll() is None], timeout=LEASE_S * 5 + 15)

    def start(self, name: str) -> None:
        if name not in self.proxies:
            self.proxies[name] = [TcpProxy(int(c.addr.rsplit(":", 1)[1])) for c in self.nodes]
        addrs = ";".join(f"127.0.0.1:{p.port}" for p in self.proxies[name])
        workdir = os.path.join(self.tmp, name)
        if self.kind == "java":
            self.brokers[name] = jr.controller_mode_broker(
                self.home, workdir, self.ns.addr, addrs, BN,
                extra={"haMaxTimeSlaveNotCatchup": "5000"})
        else:
            from .test_our_brokers import start_ctl_broker
            port = self.ports.setdefault(name, free_port())
            self.brokers[name] = start_ctl_broker(
                workdir, self.ns.addr, addrs, port, brokerName=BN,
                controllerHeartBeatTimeoutMills=HB_TIMEOUT_MS, haMaxTimeSlaveNotCatchup=5000,
                defaultTopicQueueNums=4)

    def state(self) -> dict:
        try:
            r = call(self.leader().addr, Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, [BN])
        except (OSError, AssertionError):
            return {}
        return (body_of(r)["replicasInfoTable"].get(BN) or {}) if r.code == R.SUCCESS else {}

    def master(self) -> str:
        addr = self.state().get("masterAddress")
        return next(n for n, b in self.brokers.items() if b.addr == addr)

    def healthy(self, load: faults.Load, timeout: float = 120) -> None:
        """Until both replicas are in the SyncStateSet and alive, and new sends are acked."""
        def whole():
            st = self.state()
            reps = st.get("inSyncReplicas", [])
            return len(reps) == 2 and all(r["alive"] for r in reps)
        wait_for(whole, timeout, "both replicas back in the SyncStateSet", 0.5)
        n = load.acked_count()
        wait_for(lambda: load.acked_count() >= n + 20, 60, "sends acknowledged again", 0.2)

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                signal_broker(b, signal.SIGCONT)
                b.stop()
            except Exception:  # noqa: BLE001
                pass
        for ps in self.proxies.values():
            for p in ps:
                p.close()


def _kill_master(g: Group, log: list) -> None:
    name = g.master()
    signal_broker(g.brokers[name], signal.SIGKILL)
    g.brokers[name].proc.wait(10)
    wait_for(lambda: g.state().get("masterAddress") not in (None, g.brokers[name].addr), 40,
             "another master", 0.2)
    g.start(name)  # the same store: it comes back as a slave
    log.append(f"SIGKILL master {name}, restarted")


def _pause_master(g: Group, log: list) -> None:
    name = g.master()
    b = g.brokers[name]
    signal_broker(b, signal.SIGSTOP)
    try:
        wait_for(lambda: g.state().get("masterAddress") not in (None, b.addr),
                 HB_TIMEOUT_MS / 1000 + 30, "the paused master replaced", 0.2)
    finally:
        signal_broker(b, signal.SIGCONT)  # a stale master wakes up
    log.append(f"SIGSTOP master {name} past its heartbeat timeout, SIGCONT")


def _kill_leader_controller(g: Group, log: list) -> None:
    old = g.leader()
    old.kill()
    new = g.leader()
    log.append(f"SIGKILL leader controller {old.addr} -> {new.addr}")


def _cut_master(g: Group, log: list) -> None:
    name = g.master()
    for p in g.proxies[name]:
        p.cut()
    try:
        wait_for(lambda: g.state().get("masterAddress") not in (None, g.brokers[name].addr),
                 HB_TIMEOUT_MS / 1000 + 30, "the cut-off master replaced", 0.2)
        time.sleep(3)  # it goes on thinking it leads for a while
    finally:
        for p in g.proxies[name]:
            p.restore()
    log.append(f"master {name} cut off from every controller, healed")


def _pause_slave(g: Group, log: list) -> None:
    m = g.master()
    name = next(n for n in g.brokers if n != m)
    signal_broker(g.brokers[name], signal.SIGSTOP)
    time.sleep(8)  # past haMaxTimeSlaveNotCatchup: the master shrinks its SyncStateSet
    signal_broker(g.brokers[name], signal.SIGCONT)
    log.append(f"SIGSTOP slave {name} 8 s, SIGCONT")


FAULTS = [_kill_master, _pause_master, _kill_leader_controller, _cut_master, _pause_slave]


@pytest.fixture(params=["ours", "java"])
def group(request, tmp_path, etcd, controllers):  # noqa: F811 - the etcd fixture
    home = referee.home(referee.V5)
    nodes = _group(tmp_path, etcd, controllers)
    ns = jr.start_java_namesrv(home, str(tmp_path / "ns"))
    g = Group(request.param, home, str(tmp_path), ns, nodes)
    yield g
    g.stop()
    ns.stop()


def test_fault_loop_loses_nothing_acknowledged(group, controllers, tmp_path):
    g = group
    g.leader()
    g.start("b1")
    wait_for(lambda: g.state().get("masterAddress") == g.brokers["b1"].addr, 60, "the first master", 0.5)
    g.start("b2")
    load = faults.Load(g.ns.addr, TOPIC).start()
    log: list[str] = []
    t0 = time.monotonic()
    try:
        g.healthy(load)
        for _ in range(int(os.environ.get("ROCKETSTORE_FAULT_ROUNDS", "1"))):
            for fault in FAULTS:
                fault(g, log)
                g.healthy(load)
    finally:
        h = load.stop()
    final = faults.read_history(g.ns.addr, TOPIC)
    epochs = {b.addr: faults.epoch_entries(call, b.addr) for b in g.brokers.values()
              if b.proc.poll() is None}
    report = faults.check(h, final, epochs)
    print(f"fault loop: {len(log)} faults in {time.monotonic() - t0:.0f} s: {log}; {report}")
    assert report["acked"] > 100, report
    # each fault moves the master at most once (or not at all): an epoch far above the number of
    # faults means the group flapped — masters deposed while they lived
    elected = max(report["epochs"])
    assert 3 <= elected <= 2 * len(log) + 1, report
