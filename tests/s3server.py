"""A real S3-compatible server on 127.0.0.1 for the S3 tier tests: versitygw (posix backend),
installed by ``scripts/s3server/install.py`` (``make test`` runs it). Objects are files below
``<root>/<bucket>/``, so a test can check the keys without the server. Tests skip only when
set-up could not install it, with set-up's reason. Credentials are random per run and never
printed."""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


#: how long a test waits for the build that ``make test`` runs beside the suite
BUILD_WAIT_S = 1500


def _read_state(cache: Path) -> dict:
    try:
        return json.loads((cache / "s3server.json").read_text())
    except (OSError, ValueError):
        return {"error": f"set-up has not installed the S3 server ({cache}/s3server.json is "
                         "missing): run `make test` or `python scripts/s3server/install.py`"}


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
        return True
    except (OSError, TypeError, ValueError):
        return False


def _state() -> dict:
    """set-up's record; while the build started by ``make test`` is still running (``pending``),
    wait for it."""
    env = os.environ.get("ROCKETSTORE_S3SERVER_CACHE")
    cache = Path(env) if env else Path.home() / ".cache" / "rocketstore" / "s3server"
    deadline = time.monotonic() + BUILD_WAIT_S
    st = _read_state(cache)
    while st.get("pending") and _alive(st.get("pid")) and time.monotonic() < deadline:
        time.sleep(2)
        st = _read_state(cache)
    if st.get("pending"):
        return {"error": f"the S3 server's build (pid {st.get('pid')}) did not finish"}
    return st


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    root: str  # the posix directory behind it: <root>/<bucket>/<key>
    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _free_port() -> int:
    from tests.broker.conftest import free_port  # below the ephemeral range (see there)
    return free_port()


def start_s3_server(root: str, buckets=("tier",)) -> S3Server:
    st = _state()
    binary = st.get("binary")
    if st.get("error") or not binary or not os.path.exists(binary):
        pytest.skip(f"no S3 server: {st.get('error') or 'versitygw binary missing'}")
    os.makedirs(root, exist_ok=True)
    for b in buckets:  # a bucket is a directory of the posix backend
        os.makedirs(os.path.join(root, b), exist_ok=True)
    port = _free_port()
    ak, sk = "ak" + secrets.token_hex(8), secrets.token_hex(16)
    env = dict(os.environ, ROOT_ACCESS_KEY_ID=ak, ROOT_SECRET_ACCESS_KEY=sk)
    proc = subprocess.Popen([binary, "--port", f"127.0.0.1:{port}", "posix", root], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"versitygw exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        raise RuntimeError("versitygw did not listen within 20 s")
    return S3Server(f"http://127.0.0.1:{port}", ak, sk, root, proc)
