"""broker.conf keys that switch RocketMQ's broker into a mode ours does not run
(enableDLegerCommitLog) are refused before anything is created, never ignored; controller mode
(enableControllerMode, served since) is refused the same way when its settings cannot work."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("key", ["enableDLegerCommitLog"])
def test_serve_refuses_a_mode_it_does_not_run(tmp_path, key):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\n{key} = true\n")
    store = tmp_path / "store"
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(store),
                        "--config", str(conf), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{key}=true" in p.stderr and "Traceback" not in p.stderr
    assert not os.path.exists(store), "a refused start must create no store"


def test_serve_takes_the_mode_keys_when_false(tmp_path):
    """false is RocketMQ's default and means a plain broker: accepted, no warning about the key."""
    conf = tmp_path / "broker.conf"
    conf.write_text("enableControllerMode=false\nenableDLegerCommitLog=false\n")
    p = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                          str(tmp_path / "store"), "--config", str(conf), "--port", "0",
                          "--namesrv-port", "0", "--workers", "1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert '"ready"' in line, line + (p.stderr.read() if p.poll() is not None else "")
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    assert "enableControllerMode" not in err and "enableDLegerCommitLog" not in err, err


@pytest.mark.parametrize("conf_text,port,why", [
    ("enableControllerMode=true\n", "10911", "needs controllerAddr"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1\n", "10911", "want HOST:PORT"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\nsyncBrokerMetadataPeriod=x\n",
     "10911", "syncBrokerMetadataPeriod='x': not a number"),
    ("enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878\n", "0", "fixed listenPort"),
])
def test_serve_refuses_controller_mode_that_cannot_work(tmp_path, conf_text, port, why):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n" + conf_text)
    store = tmp_path / "store"
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(store),
                        "--config", str(conf), "--port", port],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    assert why in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not os.path.exists(store), "a refused start must create no store"


def test_serve_refuses_a_store_of_another_broker_group(tmp_path):
    """The store's brokerIdentity (RocketMQ's cluster#brokerName#id) names another group: the
    broker does not start (it would take another replica's id), before any controller call."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "brokerIdentity").write_text("OtherCluster#broker-a#1")
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nenableControllerMode=true\n"
                    "controllerAddr=127.0.0.1:9\n")
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store", str(store),
                        "--config", str(conf), "--port", "10911", "--namesrv-port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "belongs to OtherCluster/broker-a" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert sorted(os.listdir(store)) == ["brokerIdentity"]  # nothing else created
