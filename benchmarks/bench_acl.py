"""What the plain ACL (``aclEnable=true``) costs the send and pull paths.

Question: how much does checking every request (parse the resources, HmacSHA1 over the header
values and the body, permission lookup) and signing it on the client side cost, per request and
end to end?

In-process (best of 5): the broker's check of one signed SEND_MESSAGE_V2 with a 1 KiB body and
of one PULL_MESSAGE, and the client's signing of the same send. End to end, on one broker with
ACL off and one with it on, alternated ``--rounds`` times on fresh stores: send 1 KiB messages,
one per request over 8 connections (signed when ACL is on), then pull them back 32 per request.

Usage: python benchmarks/bench_acl.py [--messages 6000] [--rounds 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from netutil import ab_report, send_and_pull

BODY = b"x" * 1024
TOPIC = "BenchAcl"
ACL_YML = f"""accounts:
  - accessKey: benchuser
    secretKey: bench-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB|SUB, TBW102=PUB]
    groupPerms: [bench=PUB|SUB, bench-pull=SUB]
"""


class Broker:
    def __init__(self, workdir: str, acl: bool) -> None:
        store = os.path.join(workdir, "store")
        extra = []
        if acl:
            os.makedirs(os.path.join(store, "conf"))
            with open(os.path.join(store, "conf", "plain_acl.yml"), "w") as fh:
                fh.write(ACL_YML)
            conf = os.path.join(workdir, "broker.conf")
            with open(conf, "w") as fh:
                fh.write("aclEnable=true\n")
            extra = ["--config", conf]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rocketstore.cli", "serve", "--store", store, "--port", "0",
             "--namesrv-port", "0", "--json", "--default-topic-queue-nums", "4",
             "-o", "mapped_file_size_commitlog=67108864", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.namesrv = json.loads(self.proc.stdout.readline())["namesrv"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def check_cost_us(n: int = 50_000) -> dict[str, float]:
    """µs per request: the broker's check of a signed send and pull, the client's signing."""
    import yaml

    from rocketstore.broker.acl.plain import load_snapshot, parse_request, validate
    from rocketstore.remoting.command import RemotingCommand
    from rocketstore.remoting.signing import sign_request

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "plain_acl.yml")
        with open(path, "w") as fh:
            fh.write(ACL_YML)
        snap = load_snapshot(path, lambda p: yaml.safe_load(open(p)))
    send = {"a": "bench", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": "UNIQ_KEY\x01AB12\x02WAIT\x01true",
            "j": "0", "k": "false", "m": "false"}
    pull = {"consumerGroup": "bench-pull", "topic": TOPIC, "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
            "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "0"}
    cmds = {"send": RemotingCommand.request(310, send, BODY),
            "pull": RemotingCommand.request(11, pull)}
    for c in cmds.values():
        sign_request(c, "benchuser", "bench-secret")

    def best(fn) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            runs.append((time.perf_counter() - t0) / n * 1e6)
        return min(runs)
    out = {f"check_{k}": best(lambda c=c: validate(snap, parse_request(c, "127.0.0.1:5000")))
           for k, c in cmds.items()}
    out["sign_send"] = best(lambda: sign_request(cmds["send"], "benchuser", "bench-secret"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    from rocketstore.client import SessionCredentials

    cost = check_cost_us()
    print("in-process, best of 5: " + ", ".join(f"{k} {v:.1f} µs" for k, v in cost.items()))
    creds = SessionCredentials("benchuser", "bench-secret")
    rates: dict[str, list[tuple[float, float]]] = {"off": [], "acl": []}
    for _ in range(a.rounds):
        for kind in ("off", "acl"):
            with tempfile.TemporaryDirectory() as d:
                b = Broker(d, kind == "acl")
                try:
                    rates[kind].append(asyncio.run(send_and_pull(
                        b.namesrv, TOPIC, BODY, a.messages,
                        credentials=creds if kind == "acl" else None)))
                finally:
                    b.stop()
    out: dict = {"load_avg": os.getloadavg()[0], "messages": a.messages, "rounds": a.rounds,
                 "in_process_us": cost}
    print(f"load average {out['load_avg']:.1f}; {a.messages} x 1 KiB, 8 connections, "
          f"{a.rounds} rounds each, alternated")
    ab_report(out, rates, "off", "acl")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
