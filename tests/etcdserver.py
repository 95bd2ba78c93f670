"""A real etcd cluster on 127.0.0.1 for the replicated controller group's tests: Debian's
etcd-server, unpacked at set-up by ``scripts/etcd/install.py`` (``make etcd``); tests skip
with its recorded reason when it could not be installed. Each member gets its own data dir and
two ports (client, peer) from the shared port counter."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def _state() -> dict:
    env = os.environ.get("ROCKETSTORE_ETCD_CACHE")
    path = (Path(env) if env else Path.home() / ".cache" / "rocketstore" / "etcd") / "etcd.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"error": f"{path} missing: run `make etcd` (scripts/etcd/install.py)"}


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: str
    log_path: str
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"


@dataclass
class EtcdCluster:
    binary: str
    members: list[EtcdMember] = field(default_factory=list)

    @property
    def endpoints(self) -> str:
        """The members' client addresses, as ``etcdEndpoints`` takes them."""
        return ",".join(m.endpoint for m in self.members)

    def _cmd(self, m: EtcdMember, state: str) -> list[str]:
        initial = ",".join(f"{x.name}=http://127.0.0.1:{x.peer_port}" for x in self.members)
        return [self.binary, "--name", m.name, "--data-dir", m.data_dir,
                "--listen-client-urls", f"http://127.0.0.1:{m.client_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{m.client_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                "--initial-cluster", initial, "--initial-cluster-state", state,
                "--initial-cluster-token", "rocketstore-test",
                "--heartbeat-interval", "100", "--election-timeout", "1000"]

    def start_member(self, m: EtcdMember, state: str = "new") -> None:
        with open(m.log_path, "ab") as log:
            m.proc = subprocess.Popen(self._cmd(m, state), stdout=log, stderr=log)

    def kill(self, m: EtcdMember) -> None:
        if m.proc is not None and m.proc.poll() is None:
            m.proc.send_signal(signal.SIGKILL)
            m.proc.wait(10)

    def healthy(self, m: EtcdMember) -> bool:
        try:
            with urllib.request.urlopen(f"http://{m.endpoint}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        live = [m for m in self.members if m.proc is not None and m.proc.poll() is None]
        while time.monotonic() < deadline:
            if live and all(self.healthy(m) for m in live):
                return
            time.sleep(0.2)
        logs = "\n".join(Path(m.log_path).read_text(errors="replace")[-1500:] for m in live)
        raise RuntimeError(f"etcd did not become healthy within {timeout} s:\n{logs}")

    def stop(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.terminate()
                try:
                    m.proc.wait(10)
                except subprocess.TimeoutExpired:
                    m.proc.kill()
                    m.proc.wait(10)


def start_etcd_cluster(root: str, size: int = 3) -> EtcdCluster:
    """``size`` etcd members under ``root``, healthy (skips when etcd is not installed)."""
    from tests.broker.conftest import free_port

    st = _state()
    binary = st.get("binary")
    if st.get("error") or not binary or not os.path.exists(binary):
        pytest.skip(f"no etcd server: {st.get('error') or 'etcd binary missing'}")
    cluster = EtcdCluster(binary)
    for i in range(size):
        d = os.path.join(root, f"etcd{i}")
        os.makedirs(d, exist_ok=True)
        cluster.members.append(EtcdMember(f"e{i}", free_port(), free_port(),
                                          os.path.join(d, "data"), os.path.join(d, "etcd.log")))
    for m in cluster.members:
        cluster.start_member(m)
    try:
        cluster.wait_healthy()
    except RuntimeError:
        cluster.stop()
        raise
    return cluster
