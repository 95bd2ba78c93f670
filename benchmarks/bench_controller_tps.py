"""SYNC send TPS of a controller-mode group with ``allAckInSyncStateSet=true`` (issue 31 §8):
our group next to RocketMQ 5.3.3's, same run, same producer load.

Two groups, both kept running, each of two replicas in controller mode
(``allAckInSyncStateSet=true``: a SEND_OK means the slave holds the message too), ASYNC_FLUSH,
64 MiB CommitLog segments, RocketMQ 5.3.3's name server:
  ours   two ``rocketstore serve`` under ``rocketstore controller``
  java   two RocketMQ 5.3.3 brokers under RocketMQ's ControllerStartup (one DLedger peer)
The load is RocketMQ's own benchmark Producer (``producer-bench -w SENDERS -s 1024``: one
connection, SENDERS synchronous senders of 1 KiB) against each group's name server in turn; its
last 10 s window is the result (the first includes the warm-up). Repetitions alternate the
groups (the order turned each time); the broker CPU per message is the master's and the
slave's CPU over that window. ``--profile DIR``: py-spy record of our master and slave for one
window of the first repetition, summarized (busy threads, top functions).

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_controller_tps.py --senders 8 --reps 2
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from bench_vs_java import child_pids, run_java_producer  # noqa: E402

from tests import referee  # noqa: E402
from tests.cluster import java_rocketmq as jr  # noqa: E402
from tests.controller.conftest import start_controller, write_conf  # noqa: E402
from tests.controller.test_java_brokers import BN, sync_state  # noqa: E402
from tests.ha.ha_helpers import wait_for  # noqa: E402
from tests.ha.procs import free_port_block  # noqa: E402

SEG = 64 * 1024 * 1024
TOPIC = "TpsTopic"


class Roles:
    """What ``run_java_producer`` reads a broker's CPU from: pid -> role."""

    def __init__(self, name: str, roles: dict[int, str]) -> None:
        self.name, self.roles, self.reput_tids = name, roles, []


def java_pid(p) -> int:
    """The JVM under a launcher's ``timeout`` wrapper."""
    kids = child_pids(p.proc.pid)
    return kids[0] if kids else p.proc.pid


class Group:
    def __init__(self, kind: str, home: str, tmp: str) -> None:
        self.kind = kind
        self.procs: list = []
        self.ns = jr.start_java_namesrv(home, os.path.join(tmp, "ns"))
        self.procs.append(self.ns)
        if kind == "java":
            jc = jr.start_java_controller(home, os.path.join(tmp, "ctl"))
            self.procs.append(jc)
            self.ctl = jc.addr
        else:
            oc = start_controller(write_conf(os.path.join(tmp, "c.conf"), os.path.join(tmp, "cstore")),
                                  os.path.join(tmp, "controller.log"))
            self.procs.append(oc)
            self.ctl = oc.addr
        self.brokers = []
        for i in (1, 2):
            wd = os.path.join(tmp, f"b{i}")
            if kind == "java":
                b = jr.controller_mode_broker(home, wd, self.ns.addr, self.ctl, BN, extra={
                    "mappedFileSizeCommitLog": str(SEG)})
            else:
                from tests.controller.test_our_brokers import start_ctl_broker
                b = start_ctl_broker(wd, self.ns.addr, self.ctl, free_port_block(),
                                     mappedFileSizeCommitLog=SEG, defaultTopicQueueNums=4,
                                     controllerHeartBeatTimeoutMills=6000)
            self.brokers.append(b)
            self.procs.append(b)
            if i == 1:
                wait_for(lambda: sync_state(self.ctl).get("masterBrokerId") == 1, 90, "the master", 0.3)
        wait_for(lambda: len(sync_state(self.ctl).get("inSyncReplicas", [])) == 2, 120,
                 "both replicas in the SyncStateSet", 0.3)

    def roles(self) -> Roles:
        out: dict[int, str] = {}
        for b, role in zip(self.brokers, ("master", "slave")):
            if self.kind == "java":
                out[java_pid(b)] = role
            else:
                out[b.proc.pid] = role
                for k in child_pids(b.proc.pid):
                    out[k] = f"{role}-worker"
        return Roles(self.kind, out)

    def close(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001
                try:
                    os.killpg(p.proc.pid, signal.SIGKILL)
                except OSError:
                    pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    referee.export_env()
    home = os.environ.get(referee.ENV[referee.V5])
    if not home:
        sys.exit(referee.reason(referee.V5))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tps-ours-") as t1, \
            tempfile.TemporaryDirectory(prefix="tps-java-") as t2:
        groups = {}
        try:
            groups["ours"] = Group("ours", home, t1)
            groups["java"] = Group("java", home, t2)
            for rep in range(args.reps):
                order = ["ours", "java"] if rep % 2 == 0 else ["java", "ours"]
                for kind in order:
                    g = groups[kind]
                    prof = args.profile if (args.profile and rep == 0 and kind == "ours") else None
                    with tempfile.TemporaryDirectory(prefix="tps-bench-") as wd:
                        r = run_java_producer(g.ns.addr, TOPIC, args.senders, args.seconds, home, wd,
                                              broker=g.roles(), profile=prof)
                    r.update(group=kind, rep=rep + 1, senders=args.senders)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
        finally:
            for g in groups.values():
                g.close()
    med = {}
    for kind in ("ours", "java"):
        xs = [r["msgs_per_s"] for r in rows if r["group"] == kind and "msgs_per_s" in r]
        if xs:
            med[kind] = statistics.median(xs)
            print(f"{kind}: SYNC send TPS (allAckInSyncStateSet) median {med[kind]:.0f} over "
                  f"{len(xs)} windows: {xs}")
    if len(med) == 2:
        print(f"ours / java: {med['ours'] / med['java']:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
