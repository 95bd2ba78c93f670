"""RocketMQ 5.3.3's remoting client (``MQClientAPIImpl``: popMessageAsync, ACK_MESSAGE,
batchAckMessageAsync, changeInvisibleTimeAsync, NOTIFICATION) runs ``java/Pop5Probe.java``
against the Java 5.3.3 broker (with its name server) and against ``rocketstore serve``: the probe
prints PASS/FAIL per POP feature; ours must pass every feature Java's passes, and answer the same
codes to forged and foreign acks. A second test kills our broker with SIGKILL between a pop and
its invisible time: after the restart each un-acked message is revived once."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from .conftest import free_port, start_server

pytestmark = pytest.mark.interop

FEATURES = ["pop_ack", "batch_ack", "change_invisible", "revive_once", "orderly_pop",
            "forged_handle", "notification", "recall_timer", "pop_push_consumer",
            "topic_attributes", "heartbeat_v2"]
CLIENT_FEATURES = ["client_lite_pull_subscribe", "client_lite_pull_assign", "client_request_reply",
                   "client_peek"]
SETTINGS = {"recallMessageEnable": "true"}


def _home() -> str:
    from tests import referee
    return referee.home(referee.V5)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    home = _home()
    classes = tmp_path_factory.mktemp("pop5-classes")
    src = Path(__file__).with_name("java") / "Pop5Probe.java"
    r = subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return home, classes


def run_probe(probe, namesrv: str, tmp_path, suffix: str, only: str | None = None
              ) -> tuple[dict[str, str], dict[str, str]]:
    """(feature -> "PASS" or the failure, what -> answer code)."""
    home, classes = probe
    env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="128m", HOME=str(tmp_path))
    r = subprocess.run(["timeout", "400", os.path.join(home, "java-run"), "Pop5Probe", namesrv,
                        suffix, *([only] if only else [])],
                       capture_output=True, text=True, env=env)
    results, codes = {}, {}
    for ln in r.stdout.splitlines():
        parts = ln.split(" ", 2)
        if parts[0] == "PASS":
            results[parts[1]] = "PASS"
        elif parts[0] == "FAIL":
            results[parts[1]] = "FAIL " + (parts[2] if len(parts) > 2 else "")
        elif parts[0] == "CODE":
            codes[parts[1]] = parts[2]
    assert r.returncode == 0 and "DONE" in r.stdout, r.stdout[-4000:] + r.stderr[-4000:]
    print(r.stdout)
    return results, codes


def both_brokers(probe, tmp_path, features: list[str], only: str | None = None
                 ) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]:
    """The probe against the Java 5.3.3 broker, then against ours: (java, java codes, ours,
    our codes), the table printed."""
    from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv

    home, _ = probe
    ns = start_java_namesrv(home, str(tmp_path / "ns"))
    broker = None
    try:
        broker = start_java_broker(home, str(tmp_path / "jbroker"), ns.addr, "broker-j",
                                   extra=SETTINGS)
        java, java_codes = run_probe(probe, ns.addr, tmp_path, "j", only)
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in SETTINGS.items()))
    srv = start_server(str(tmp_path / "store"), "--config", str(conf))
    try:
        ours, our_codes = run_probe(probe, srv.namesrv, tmp_path, "o", only)
    finally:
        assert srv.stop() == 0, srv.log()
    print("feature                     java  rocketstore")
    for f in features:
        print(f"{f:27} {java.get(f, '-')[:4]:5} {ours.get(f, '-')[:4]}")
    return java, java_codes, ours, our_codes


def test_pop_probe_ours_passes_what_java_passes(probe, tmp_path):
    java, java_codes, ours, our_codes = both_brokers(probe, tmp_path, FEATURES)
    assert set(java) == set(FEATURES), java
    for f in FEATURES:
        if java[f] == "PASS":
            assert ours.get(f) == "PASS", (f, ours.get(f))
    assert our_codes == java_codes


def test_remoting_clients_ours_passes_what_java_passes(probe, tmp_path):
    """RocketMQ 5.3.3's DefaultLitePullConsumer (subscribe: poll, commit, a second consumer
    resumes; assign: seek, seekToBegin/End, commit, committed), request-reply (request, a
    consumer replying on the reply topic, a reply for a requester that is gone) and PEEK_MESSAGE
    against both brokers: Java passes each (the probe's own checks), ours must too, same codes."""
    java, java_codes, ours, our_codes = both_brokers(probe, tmp_path, CLIENT_FEATURES,
                                                     ",".join(CLIENT_FEATURES))
    assert java == {f: "PASS" for f in CLIENT_FEATURES}, java
    assert ours == java
    assert our_codes == java_codes


def test_pop_checkpoints_survive_sigkill_and_revive_once(probe, tmp_path):
    store = str(tmp_path / "store")
    ns_port = free_port()
    srv = start_server(store, namesrv_port=ns_port)
    try:
        got, _ = run_probe(probe, srv.namesrv, tmp_path, "k", "crash_pop")
        assert got == {"crash_pop": "PASS"}, got
        os.kill(srv.proc.pid, signal.SIGKILL)  # inside the 5 s invisible time, nothing acked
        srv.proc.wait(10)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(10)
    srv = start_server(store, namesrv_port=ns_port)
    try:
        got, _ = run_probe(probe, srv.namesrv, tmp_path, "k", "crash_revive")
    finally:
        assert srv.stop() == 0, srv.log()
    assert got == {"crash_revive": "PASS"}, got
