"""A RocketMQ 5 cluster with a rocketstore broker in it: RocketMQ 5.3.3's name server, a Java
5.3.3 broker and ``rocketstore serve`` in one cluster, RocketMQ's Java proxy (``proxyMode=cluster``)
in front of both, and RocketMQ's 5.x gRPC client (``rocketmq-client-java`` 5.2.0) talking to the
proxy only.

``java/Proxy5Probe.java`` runs each scenario (normal, FIFO, delay, transactional sends;
SimpleConsumer receive/ack/change-invisible-time; PushConsumer; tag and SQL92 filters; retries to
the DLQ) on topics it makes on one broker: once on the Java broker's, once on ours, the two runs
side by side through the same proxy. The Java broker's outcome is the expected one: ours must pass
every scenario Java's passes, and the proxy must never have been answered "request code not
supported" by our broker (its log says so when it was).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import referee

from ..broker.conftest import start_server

pytestmark = [pytest.mark.interop, referee.skip_unless(referee.V5)]

SCENARIOS = ["normal", "fifo", "delay", "transaction", "change_invisible", "tag_filter",
             "sql_filter", "push_consumer", "retry_to_dlq"]
BROKER_SETTINGS = {"enablePropertyFilter": "true"}
# short long-polls keep the "nothing more comes" receives short (the proxy's default floor is 5 s)
PROXY_SETTINGS = {"grpcClientConsumerMinLongPollingTimeoutMillis": 1000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tests.cluster.java_rocketmq import (start_java_broker, start_java_namesrv,
                                             start_java_proxy)

    home = referee.home(referee.V5)
    client_cp = Path(home, "client-java-classpath")
    if not client_cp.exists():
        pytest.skip("set-up did not resolve rocketmq-client-java (no client-java-classpath)")
    work = tmp_path_factory.mktemp("proxy-cluster")
    classes = work / "classes"
    src = Path(__file__).with_name("java") / "Proxy5Probe.java"
    # the gRPC client first: its shaded jar and RocketMQ 5.3.3's own proto classes share names
    cp = f"{client_cp.read_text().strip()}:{Path(home, 'classpath').read_text().strip()}"
    r = subprocess.run(["timeout", "180", "javac", "-nowarn", "-encoding", "UTF-8", "-cp", cp,
                        "-d", str(classes), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    started = []
    try:
        ns = start_java_namesrv(home, str(work / "ns"))
        started.append(ns)
        jb = start_java_broker(home, str(work / "jbroker"), ns.addr, "broker-j",
                               extra=BROKER_SETTINGS)
        started.append(jb)
        conf = work / "broker.conf"
        conf.write_text("brokerClusterName=DefaultCluster\n"
                        + "".join(f"{k}={v}\n" for k, v in BROKER_SETTINGS.items()))
        ours = start_server(str(work / "store"), "--config", str(conf), "--broker-name",
                            "broker-o", "--namesrv", ns.addr, "--workers", "1")
        proxy, endpoint = start_java_proxy(home, str(work / "proxy"), ns.addr,
                                           extra=PROXY_SETTINGS)
        started.append(proxy)
        yield {"home": home, "cp": f"{classes}:{cp}", "ns": ns.addr, "endpoint": endpoint,
               "ours": ours, "work": work, "proxy": proxy, "jbroker": jb.addr}
    finally:
        if "ours" in locals():
            assert ours.stop() == 0, ours.log()
        for p in reversed(started):
            p.stop()


def run_probes(cluster, runs: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    """Run the probe once per entry (name -> (brokerName, suffix)), all at once; name ->
    scenario -> "PASS" or "FAIL why"."""
    procs = {}
    for name, (broker, suffix) in runs.items():
        cmd = ["timeout", "300", os.environ.get("JAVA", "java"), "-Xmx192m",
               f"-Duser.home={cluster['work']}", "-cp", cluster["cp"], "Proxy5Probe",
               cluster["endpoint"], cluster["ns"], broker, suffix]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
    results = {}
    for name, p in procs.items():
        out, err = p.communicate()
        print(out)
        assert p.returncode == 0 and "DONE" in out, out[-4000:] + err[-4000:]
        got = {}
        for ln in out.splitlines():
            parts = ln.split(" ", 2)
            if parts[0] in ("PASS", "FAIL"):
                got[parts[1]] = "PASS" if parts[0] == "PASS" else "FAIL " + (parts[2:] or [""])[0]
        results[name] = got
    return results


def test_java_grpc_client_through_the_proxy_ours_passes_what_java_passes(cluster):
    res = run_probes(cluster, {"java": ("broker-j", "j"), "ours": ("broker-o", "o")})
    java, ours = res["java"], res["ours"]
    print("scenario          java  rocketstore")
    for s in SCENARIOS:
        print(f"{s:17} {java.get(s, '-')[:4]:5} {ours.get(s, '-')[:4]}")
    assert set(java) == set(SCENARIOS) and set(ours) == set(SCENARIOS), (java, ours)
    for s in SCENARIOS:
        if java[s] == "PASS":
            assert ours[s] == "PASS", (s, ours[s])
    unsupported = [ln for ln in cluster["ours"].log().splitlines() if "not supported" in ln]
    assert not unsupported, unsupported[:10]


def _topic_on(broker: str, namesrv: str, topic: str) -> None:
    """A 2-queue topic on one broker, waited for until the name server routes it."""
    import time

    from ..broker import admin_wire as w

    r = w.call(broker, 17, {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == 0, r.remark
    deadline = time.monotonic() + 60
    while w.call(namesrv, 105, {"topic": topic}).code != 0:
        assert time.monotonic() < deadline, f"{topic} never routed"
        time.sleep(0.3)


def test_python_grpc_client_through_the_proxy(cluster, tmp_path, monkeypatch):
    """rocketstore's Python 5.x gRPC client (PyPI ``rocketmq-python-client``, the driver of
    ``test_python_client``) through RocketMQ's Java proxy: normal sends, then a SimpleConsumer
    receives and acks them all and a further receive finds nothing; on a topic of the Java
    broker (the expected outcome) and on one of ours, through the same proxy."""
    from .conftest import client_python, run_script

    py = client_python()
    ep = cluster["endpoint"]
    monkeypatch.setenv("RMQ_SETTLE_S", "3")
    got = {}
    for name, broker in (("java", cluster["jbroker"]), ("ours", cluster["ours"].broker)):
        topic = f"PyProxy_{name}"
        _topic_on(broker, cluster["ns"], topic)
        sent, received, again = run_script(
            py, tmp_path, ("produce", ep, topic, 6, "normal"),
            ("receive", ep, topic, f"G_py_{name}", 6, 30, "ack"),
            ("receive", ep, topic, f"G_py_{name}", 1, 30, "ack", 1))
        got[name] = (sent, received, again)
    for name, (sent, received, again) in got.items():
        assert len({s["message_id"] for s in sent}) == 6, name
        by_id = {g["message_id"]: g for g in received}
        assert set(by_id) == {s["message_id"] for s in sent}, (name, received)
        for s in sent:
            g = by_id[s["message_id"]]
            assert (g["body"], g["tag"], g["keys"], g["attempt"], g["topic"]) == (
                s["body"], f"Tag{s['i'] % 2}", [f"key-{s['i']}"], 1, f"PyProxy_{name}"), name
            assert g["properties"].get("seq") == str(s["i"]), name
        assert again == [], (name, again)


def test_node_grpc_client_through_the_proxy(cluster, tmp_path):
    """npm ``rocketmq-client-nodejs`` (the driver of ``test_node_client``) through RocketMQ's
    Java proxy: a Producer sends, a SimpleConsumer receives them all, moves one's invisible time
    and acks each, and a further receive finds nothing; on a topic of the Java broker (the
    expected outcome) and on one of ours, through the same proxy."""
    import json

    from .test_node_client import DRIVER, _node_modules

    mods = _node_modules()
    env = {**os.environ, "NODE_PATH": str(mods), "HOME": str(tmp_path)}
    got = {}
    for name, broker in (("java", cluster["jbroker"]), ("ours", cluster["ours"].broker)):
        topic = f"NodeProxy_{name}"
        _topic_on(broker, cluster["ns"], topic)
        r = subprocess.run(["node", str(DRIVER), cluster["endpoint"], topic, f"G_node_{name}",
                            "6"], capture_output=True, text=True, timeout=180, env=env)
        assert r.returncode == 0, (name, r.stdout[-2000:], r.stderr[-3000:])
        got[name] = json.loads(r.stdout.strip().splitlines()[-1])
    for name, out in got.items():
        sent_ids = {s["message_id"] for s in out["sent"]}
        assert len(sent_ids) == 6 and out["changed"], (name, out)
        assert {g["message_id"] for g in out["got"]} == sent_ids, (name, out)
        assert sorted(g["body"] for g in out["got"]) == [f"node-body-{i}" for i in range(6)]
        assert all(g["tag"] == "NodeTag" and g["from"] == "node" and g["attempt"] == 1
                   for g in out["got"]), (name, out["got"])
        assert out["again"] == 0, (name, out)  # all acked, the one whose invisible time moved too
