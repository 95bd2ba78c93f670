"""Real processes for the HA tests: ``rocketstore namesrv`` and ``rocketstore serve`` brokers
configured by a RocketMQ broker.conf, on 127.0.0.1 with free ports."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.broker.conftest import free_port

SEG = 1 << 20


def free_port_block() -> int:
    """A port p with p-2 .. p+1 free (fast port, remoting, HA)."""
    return free_port()


@dataclass
class Proc:
    proc: subprocess.Popen
    log_path: str
    ready: dict

    @property
    def addr(self) -> str:
        return self.ready.get("broker") or self.ready["namesrv"]

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def _start(cmd: list[str], log_path: str, timeout: float = 30.0) -> Proc:
    err = open(log_path, "a")
    env = dict(os.environ)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line or proc.poll() is not None:
            break
    if not line:
        proc.kill()
        raise RuntimeError(f"{cmd[3]} did not start: {open(log_path).read()[-3000:]}")
    ready = json.loads(line)
    assert ready["event"] == "ready", line
    return Proc(proc, log_path, ready)


def start_namesrv(workdir: str) -> Proc:
    os.makedirs(workdir, exist_ok=True)
    return _start([sys.executable, "-m", "rocketstore.cli", "namesrv", "--port", "0", "--json",
                   "--kv-config-path", os.path.join(workdir, "kv.json")],
                  os.path.join(workdir, "namesrv.log"))


def broker_conf(path: str, **keys) -> str:
    with open(path, "w") as fh:
        for k, v in keys.items():
            fh.write(f"{k}={v}\n")
    return path


def start_broker(workdir: str, namesrv: str, role: str, *, port: int | None = None,
                 name: str = "broker-ha", broker_id: int | None = None,
                 args: tuple[str, ...] = (), **keys) -> Proc:
    """``rocketstore serve`` with a broker.conf of RocketMQ's keys for ``role``."""
    os.makedirs(workdir, exist_ok=True)
    port = port or free_port_block()
    conf = dict(brokerClusterName="HaCluster", brokerName=name,
                brokerId=broker_id if broker_id is not None else (1 if role == "SLAVE" else 0),
                brokerRole=role, listenPort=port, brokerIP1="127.0.0.1", brokerIP2="127.0.0.1",
                namesrvAddr=namesrv, mappedFileSizeCommitLog=SEG,
                mappedFileSizeConsumeQueue=20000, maxHashSlotNum=1000, maxIndexNum=4000,
                haSendHeartbeatInterval=1000, slaveTimeout=1000, registerNameServerPeriod=10000)
    conf.update(keys)
    path = broker_conf(os.path.join(workdir, "broker.conf"), **conf)
    store = os.path.join(workdir, "store")
    return _start([sys.executable, "-m", "rocketstore.cli", "serve", "--store", store,
                   "--config", path, "--host", "127.0.0.1", "--json", "--log-level", "INFO", *args],
                  os.path.join(workdir, "serve.log"))
