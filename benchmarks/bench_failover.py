"""How long from a master's death to the first accepted send, under our controller and under
RocketMQ's own (ControllerStartup 5.3.3)?

Each round: RocketMQ 5.3.3's name server, the controller, two 5.3.3 brokers in controller mode
(allAckInSyncStateSet=true, the slave in the SyncStateSet), 50 sends; then the master is
SIGKILLed and a producer (ours) sends in a tight loop through the name server. Reported per
round: kill -> the controller names a new master (polled with GET_SYNC_STATE_DATA every 20 ms),
kill -> the first SEND_OK. Rounds alternate ours / Java's on the same machine.

    PYTHONPATH=src:. .venv/bin/python benchmarks/bench_failover.py --rounds 3
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    referee.export_env()
    home = os.environ.get(referee.ENV[referee.V5])
    if not home:
        sys.exit(referee.reason(referee.V5))
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
