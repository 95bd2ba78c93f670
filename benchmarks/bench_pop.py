"""POP receive+ack throughput through RocketMQ's Java proxy: our broker vs the Java broker behind it.

One RocketMQ 5 cluster as ``tests/proxy/test_java_proxy_cluster.py`` builds it: RocketMQ 5.3.3's
name server, a Java 5.3.3 broker (``broker-j``) and ``rocketstore serve`` (``broker-o``, one
worker process) in ``DefaultCluster``, one Java proxy (``proxyMode=cluster``) in front. RocketMQ's
5.x Java gRPC client (``rocketmq-client-java`` 5.2.0, ``Proxy5Probe``'s ``bench_pop``) sends N
1 KiB messages to a topic of one broker, then SimpleConsumers receive 32 at a time and ack each
message until all are acked: the proxy turns those into POP_MESSAGE and ACK_MESSAGE on the
broker holding the topic. Run for the Java broker, then for ours (one at a time, same proxy);
prints msg/s of the receive+ack phase (and of the send phase) and ours / Java.

    .venv/bin/python benchmarks/bench_pop.py --messages 2000 --consumers 4
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker.conftest import start_server  # noqa: E402
from tests.cluster.java_rocketmq import (start_java_broker, start_java_namesrv,  # noqa: E402
                                        start_java_proxy)

PY_SPY = next((p for p in (Path(sys.executable).with_name("py-spy"),) if p.exists()), "py-spy")
JAVA_DISK_GUARDS = {"diskSpaceWarningLevelRatio": "98", "diskSpaceCleanForciblyRatio": "98"}
HOME = os.path.expanduser(os.environ.get("ROCKETMQ5_HOME", "~/.cache/rocketstore/referee/5.3.3"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1, help="runs per broker (best kept)")
    ap.add_argument("--brokers", default="java,rocketstore",
                    help="which brokers to run, comma-separated (default both)")
    ap.add_argument("--profile", metavar="FILE",
                    help="record our broker (all its processes) with py-spy during its runs: "
                         "FILE.svg flame graph, or collapsed stacks when FILE ends in .txt")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pop-"))
    client_cp = Path(HOME, "client-java-classpath").read_text().strip()
    cp = f"{client_cp}:{Path(HOME, 'classpath').read_text().strip()}"
    classes = work / "classes"
    src = ROOT / "tests" / "proxy" / "java" / "Proxy5Probe.java"
    subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", cp, "-d", str(classes),
                    str(src)], check=True, capture_output=True)
    started, ours = [], None
    try:
        ns = start_java_namesrv(HOME, str(work / "ns"))
        started.append(ns)
        # RocketMQ refuses puts once the disk holding its store is 90 % full (and cleans files
        # forcibly from 85 %): on a shared machine near that, the Java broker's pops fail on
        # their checkpoint writes; its guards move to 98 % so a busy disk is not measured
        started.append(start_java_broker(HOME, str(work / "jbroker"), ns.addr, "broker-j",
                                         extra=JAVA_DISK_GUARDS))
        conf = work / "broker.conf"
        conf.write_text("brokerClusterName=DefaultCluster\n")
        ours = start_server(str(work / "store"), "--config", str(conf), "--broker-name",
                            "broker-o", "--namesrv", ns.addr, "--workers", "1")
        proxy, endpoint = start_java_proxy(HOME, str(work / "proxy"), ns.addr)
        started.append(proxy)
        results: dict[str, tuple[float, float]] = {}
        for rnd in range(args.rounds):
            for name, broker in (("java", "broker-j"), ("rocketstore", "broker-o")):
                if name not in args.brokers.split(","):
                    continue
                spy = None
                if args.profile and name == "rocketstore":
                    fmt = "raw" if args.profile.endswith(".txt") else "flamegraph"
                    spy = subprocess.Popen([PY_SPY, "record", "--subprocesses", "--nonblocking",
                                            "-f", fmt, "-o", args.profile,
                                            "--pid", str(ours.proc.pid)],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                r = subprocess.run(
                    ["timeout", "600", "java", "-Xmx512m", f"-Duser.home={work}",
                     f"-DBENCH_N={args.messages}", f"-DBENCH_CONSUMERS={args.consumers}",
                     "-cp", f"{classes}:{cp}", "Proxy5Probe", endpoint, ns.addr, broker,
                     f"b{name[0]}{rnd}", "bench_pop"], capture_output=True, text=True)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                    spy.wait(timeout=60)
                m = re.search(r"BENCH pop n=(\d+) consumers=\d+ send_ms=(\d+) recv_ack_ms=(\d+)",
                              r.stdout)
                if not m or "PASS bench_pop" not in r.stdout:  # reported; other rounds count
                    print(f"{name} round {rnd} failed: {r.stdout[-1500:]}{r.stderr[-1500:]}",
                          file=sys.stderr)
                    continue
                n, send_ms, recv_ms = (int(x) for x in m.groups())
                rate = (n * 1000 / max(recv_ms, 1), n * 1000 / max(send_ms, 1))
                if name not in results or rate[0] > results[name][0]:
                    results[name] = rate
        print(f"POP receive+ack through RocketMQ 5.3.3's proxy, {args.messages} x 1 KiB, "
              f"{args.consumers} SimpleConsumers (best of {args.rounds})")
        print(f"{'broker':12} {'recv+ack msg/s':>15} {'send msg/s':>11}")
        for name, (recv, send) in results.items():
            print(f"{name:12} {recv:15.0f} {send:11.0f}")
        missing = [b for b in args.brokers.split(",") if b not in results]
        if missing:
            sys.exit(f"no round of {', '.join(missing)} succeeded")
        if len(results) == 2:
                print(f"rocketstore / java: receive+ack "
                  f"{results['rocketstore'][0] / results['java'][0]:.2f}x, "
                  f"send {results['rocketstore'][1] / results['java'][1]:.2f}x")
    finally:
        if ours is not None:
            ours.stop()
        for p in reversed(started):
            p.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
