"""How long from a master's death to the first accepted send, under our controller and under
RocketMQ's own (ControllerStartup 5.3.3)?

Each round: RocketMQ 5.3.3's name server, the controller, two 5.3.3 brokers in controller mode
(allAckInSyncStateSet=true, the slave in the SyncStateSet), 50 sends; then the master is
SIGKILLed and a producer (ours) sends in a tight loop through the name server. Reported per
round: kill -> the controller names a new master (polled with GET_SYNC_STATE_DATA every 20 ms),
kill -> the first SEND_OK. Rounds alternate ours / Java's on the same machine.

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_failover.py --rounds 3

``--kills N`` asks issue 31's question instead: one group each of our brokers (``rocketstore
serve`` in controller mode) under our controller, and of RocketMQ 5.3.3's brokers under its own
controller, both kept running; the master is SIGKILLed N times in each (the two groups take
turns), the killed broker restarted and waited for back in the SyncStateSet each time; reported
per group: kill -> first SEND_OK, p50 / p99 / max.

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_failover.py --kills 20
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from rocketstore.client.producer import Producer  # noqa: E402
from tests import referee  # noqa: E402
from tests.broker.conftest import free_port  # noqa: E402
from tests.cluster import java_rocketmq as jr  # noqa: E402
from tests.controller.conftest import start_controller, write_conf  # noqa: E402
from tests.controller.test_java_brokers import BN, TOPIC, send_some, sync_state  # noqa: E402
from tests.ha.ha_helpers import wait_for  # noqa: E402


def one_round(home: str, which: str, tmp: str) -> dict:
    procs = []
    ctl_kill = None
    ns = jr.start_java_namesrv(home, os.path.join(tmp, "ns"))
    procs.append(ns)
    try:
        if which == "java":
            jc = jr.start_java_controller(home, os.path.join(tmp, "ctl"))
            procs.append(jc)
            ctl = jc.addr
        else:
            oc = start_controller(write_conf(os.path.join(tmp, "c.conf"), os.path.join(tmp, "cstore")))
            ctl_kill = oc.kill
            ctl = oc.addr
        b1 = jr.controller_mode_broker(home, os.path.join(tmp, "b1"), ns.addr, ctl, BN)
        procs.append(b1)
        wait_for(lambda: sync_state(ctl).get("masterBrokerId") == 1, 60, "the first master", 0.2)
        b2 = jr.controller_mode_broker(home, os.path.join(tmp, "b2"), ns.addr, ctl, BN)
        procs.append(b2)
        wait_for(lambda: len(sync_state(ctl).get("inSyncReplicas", [])) == 2, 60, "the SyncStateSet", 0.2)
        acked: dict = {}
        send_some(ns.addr, 50, 0, acked)
        os.killpg(b1.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        b1.proc.wait(10)
        elected = None
        sent = None
        p = Producer("bench-failover", ns.addr).start()
        while time.monotonic() - t0 < 120 and (sent is None or elected is None):
            if elected is None and sync_state(ctl).get("masterBrokerId") == 2:
                elected = time.monotonic() - t0
            if sent is None:
                try:
                    if p.send(TOPIC, b"after").status == "SEND_OK":
                        sent = time.monotonic() - t0
                except Exception:  # noqa: BLE001 - no master yet / stale route
                    p.shutdown()
                    p = Producer("bench-failover", ns.addr).start()
            time.sleep(0.02)
        p.shutdown()
        return {"controller": which, "elected_s": elected, "first_send_s": sent}
    finally:
        for pr in reversed(procs):
            try:
                pr.stop()
            except Exception:  # noqa: BLE001
                os.killpg(pr.proc.pid, signal.SIGKILL)
        if ctl_kill:
            ctl_kill()


class KillGroup:
    """Two replicas of ``kind`` under that kind's controller, for repeated master kills."""

    def __init__(self, kind: str, home: str, tmp: str) -> None:
        self.kind, self.home, self.tmp = kind, home, tmp
        self.procs: list = []
        self.ns = jr.start_java_namesrv(home, os.path.join(tmp, "ns"))
        self.procs.append(self.ns)
        if kind == "java":
            jc = jr.start_java_controller(home, os.path.join(tmp, "ctl"))
            self.procs.append(jc)
            self.ctl = jc.addr
        else:
            oc = start_controller(write_conf(os.path.join(tmp, "c.conf"), os.path.join(tmp, "cstore"),
                                             scanNotActiveBrokerInterval=1000),
                                  os.path.join(tmp, "controller.log"))
            self.procs.append(oc)
            self.ctl = oc.addr
        self.ports = {"b1": free_port(), "b2": free_port()}
        self.brokers: dict = {}
        self.start("b1")
        wait_for(lambda: sync_state(self.ctl).get("masterBrokerId") == 1, 60, "the first master", 0.2)
        self.start("b2")
        self.whole()
        send_some(self.ns.addr, 20, 0, {})

    def start(self, name: str) -> None:
        workdir = os.path.join(self.tmp, name)
        if self.kind == "java":
            self.brokers[name] = jr.controller_mode_broker(self.home, workdir, self.ns.addr,
                                                           self.ctl, BN)
        else:
            from tests.controller.test_our_brokers import start_ctl_broker
            self.brokers[name] = start_ctl_broker(
                workdir, self.ns.addr, self.ctl, self.ports[name], brokerName=BN,
                controllerHeartBeatTimeoutMills=6000, syncBrokerMetadataPeriod=1000)

    def whole(self) -> None:
        wait_for(lambda: (lambda r: len(r) == 2 and all(x["alive"] for x in r))(
            sync_state(self.ctl).get("inSyncReplicas", [])), 120, "both in the SyncStateSet", 0.2)

    def kill_master(self) -> float:
        addr = sync_state(self.ctl)["masterAddress"]
        name = next(n for n, b in self.brokers.items() if b.addr == addr)
        b = self.brokers[name]
        if self.kind == "java":
            os.killpg(b.proc.pid, signal.SIGKILL)
        else:
            b.proc.kill()
        t0 = time.monotonic()
        self.last_kill_wall = time.time()  # for matching the logs (--keep)
        sent = None
        p = Producer("bench-failover", self.ns.addr, retries=0, timeout_s=3).start()
        while time.monotonic() - t0 < 120 and sent is None:
            try:
                if p.send(TOPIC, b"after").status == "SEND_OK":
                    sent = time.monotonic() - t0
            except Exception:  # noqa: BLE001 - no master yet / stale route
                p.shutdown()
                p = Producer("bench-failover", self.ns.addr, retries=0, timeout_s=3).start()
            time.sleep(0.02)
        p.shutdown()
        b.proc.wait(10)
        self.start(name)
        self.whole()
        return sent if sent is not None else float("inf")

    def close(self) -> None:
        for pr in list(self.brokers.values()) + list(reversed(self.procs)):
            try:
                pr.stop()
            except Exception:  # noqa: BLE001
                pass


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def kill_loop(home: str, kills: int, keep: str | None) -> None:
    import contextlib
    if keep:  # the groups' directories (logs, stores) are kept for a look afterwards
        os.makedirs(keep, exist_ok=True)
        dirs = contextlib.nullcontext((tempfile.mkdtemp(dir=keep, prefix="ours-"),
                                       tempfile.mkdtemp(dir=keep, prefix="java-")))
    else:
        dirs = contextlib.nullcontext(None)
    with dirs as kept, tempfile.TemporaryDirectory(prefix="failover-ours-") as t1, \
            tempfile.TemporaryDirectory(prefix="failover-java-") as t2:
        if kept:
            t1, t2 = kept
        groups = {"ours": KillGroup("ours", home, t1), "java": KillGroup("java", home, t2)}
        times: dict[str, list[float]] = {"ours": [], "java": []}
        try:
            for i in range(kills):
                for kind, g in groups.items():
                    t = g.kill_master()
                    times[kind].append(t)
                    print(json.dumps({"group": kind, "kill": i + 1, "first_send_s": round(t, 3),
                                      "killed_at": round(g.last_kill_wall, 3)}), flush=True)
        finally:
            for g in groups.values():
                g.close()
    for kind, xs in times.items():
        print(f"{kind}: kill -> first SEND_OK over {len(xs)} kills: p50 {_pct(xs, 0.5):.3f} s, "
              f"p99 {_pct(xs, 0.99):.3f} s, max {max(xs):.3f} s, min {min(xs):.3f} s")
    print(f"ours / java p50: {_pct(times['ours'], 0.5) / _pct(times['java'], 0.5):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kills", type=int, default=0)
    ap.add_argument("--keep", default=None, help="keep the --kills groups' directories here")
    args = ap.parse_args()
    referee.export_env()
    home = os.environ.get(referee.ENV[referee.V5])
    if not home:
        sys.exit(referee.reason(referee.V5))
    if args.kills:
        kill_loop(home, args.kills, args.keep)
        return
    rows = []
    for i in range(args.rounds):
        for which in ("ours", "java"):
            with tempfile.TemporaryDirectory(prefix=f"failover-{which}-") as tmp:
                r = one_round(home, which, tmp)
                rows.append(r)
                print(json.dumps(r), flush=True)
    for which in ("ours", "java"):
        sent = [r["first_send_s"] for r in rows if r["controller"] == which and r["first_send_s"]]
        el = [r["elected_s"] for r in rows if r["controller"] == which and r["elected_s"]]
        if sent:
            print(f"{which}: elected median {statistics.median(el):.3f} s, first send median "
                  f"{statistics.median(sent):.3f} s (min {min(sent):.3f}, max {max(sent):.3f}) "
                  f"over {len(sent)} rounds")


if __name__ == "__main__":
    main()
