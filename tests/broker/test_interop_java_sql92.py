"""RocketMQ 4.9.7's own Java client — DefaultMQPushConsumer with MessageSelector.bySql,
DefaultMQPullConsumer with bySql, DefaultMQProducer.request answered through
MessageUtil.createReplyMessage — against ``rocketstore serve`` and, as the control, against
RocketMQ's own broker with the same settings. Both must print the same lines."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import start_server

pytestmark = pytest.mark.interop

BROKER_SETTINGS = {"enablePropertyFilter": "true", "enableCalcFilterBitMap": "true",
                   "enableConsumeQueueExt": "true"}

# a BETWEEN 3 AND 5 OR color = 'red' (m10 is the red one); a >= 15 by pull; two replies
EXPECTED = sorted(
    ["BADSQL refused", "PUSHDONE true"]
    + [f"PUSH m{i}" for i in (3, 4, 5, 10)]
    + [f"PULL m{i}" for i in range(15, 20)]
    + [f"REPLY pong:ping{i} DefaultCluster_REPLY_TOPIC" for i in range(2)])


def _home() -> str:
    from tests import referee
    return referee.home(referee.V4)


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory):
    home = _home()
    classes = tmp_path_factory.mktemp("sqlj-classes")
    java = Path(__file__).with_name("java")
    subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes),
                    str(java / "SqlReplyClient.java"), str(java / "BrokerVersions.java")],
                   check=True, capture_output=True)
    return home, classes


def run_client(home: str, classes, namesrv: str, tmp_path) -> list[str]:
    env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="256m", HOME=str(tmp_path))
    r = subprocess.run(["timeout", "240", os.path.join(home, "java-run"), "SqlReplyClient",
                        namesrv, "x"], capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines()
             if ln.split(" ")[0] in ("BADSQL", "PUSH", "PUSHDONE", "PULL", "REPLY", "REPLYERR",
                                     "REQUESTERR", "DONE")]
    assert r.returncode == 0 and "DONE" in lines, r.stdout[-4000:] + r.stderr[-4000:]
    errs = [ln for ln in r.stderr.splitlines() if "Exception" in ln or ln.startswith("\tat ")]
    print("\n".join(errs[:60]))
    return [ln for ln in lines if ln != "DONE"]


def test_java_client_against_rocketstore(java_classes, tmp_path):
    home, classes = java_classes
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in BROKER_SETTINGS.items()))
    srv = start_server(str(tmp_path / "store"), "--config", str(conf))
    try:
        got = run_client(home, classes, srv.namesrv, tmp_path)
    finally:
        assert srv.stop() == 0, srv.log()
    assert got == EXPECTED
    ext = tmp_path / "store" / "consumequeue_ext" / "SqlJx"
    assert ext.is_dir() and any(ext.iterdir())


def test_java_client_against_java_broker_control(java_classes, tmp_path):
    from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv

    home, classes = java_classes
    ns = start_java_namesrv(home, str(tmp_path / "ns"))
    broker = None
    try:
        broker = start_java_broker(home, str(tmp_path / "broker"), ns.addr, "broker-j",
                                   extra=BROKER_SETTINGS)
        got = run_client(home, classes, ns.addr, tmp_path)
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()
    assert got == EXPECTED
