"""Our controller as a real process (``rocketstore controller --config``), stopped by PID, and a
small synchronous remoting call for the tests."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import pytest

from rocketstore.client.transport import RemotingClient
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.fastjson import dumps, loads
from tests.broker.conftest import free_port


@dataclass
class Controller:
    proc: subprocess.Popen
    addr: str
    conf: str
    ready: dict

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def write_conf(path: str, store: str, port: int | None = None, **extra) -> str:
    port = port or free_port()
    with open(path, "w") as fh:
        fh.write(f"listenPort={port}\ncontrollerStorePath={store}\n")
        for k, v in extra.items():
            fh.write(f"{k}={v}\n")
    return path


def start_controller(conf: str, log_path: str | None = None, *args: str) -> Controller:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.join(os.path.dirname(__file__), "..", "..", "src"),
                                                    env.get("PYTHONPATH", "")] if p)
    err = open(log_path, "a") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "controller", "--config", conf,
                             "--json", "--log-level", "INFO", *args], stdout=subprocess.PIPE, stderr=err,
                            text=True, start_new_session=True, env=env)
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise RuntimeError(f"controller exited {proc.returncode} before it was ready")
    ready = json.loads(line)
    return Controller(proc, ready["controller"], conf, ready)


@pytest.fixture
def controllers():
    started: list[Controller] = []

    def start(conf: str, log_path: str | None = None, *args: str) -> Controller:
        c = start_controller(conf, log_path, *args)
        started.append(c)
        return c
    yield start
    for c in started:
        c.kill()


def call(addr: str, code: int, fields: dict | None = None, body=None, oneway: bool = False,
         timeout: float = 5.0) -> RemotingCommand | None:
    """One request to ``addr``; a dict or list body is sent as JSON."""
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = dumps(body).encode()

    async def go():
        c = RemotingClient(addr)
        await c.connect()
        try:
            cmd = RemotingCommand.request(code, fields or {}, body or b"", oneway=oneway, language="JAVA")
            if oneway:
                c.invoke_oneway(cmd)
                await asyncio.sleep(0.2)
                return None
            return await c.invoke(cmd, timeout)
        finally:
            c.close()
    return asyncio.run(go())


def body_of(resp: RemotingCommand):
    return loads(resp.body) if resp.body else None


def stop_all(procs: list) -> None:
    """Stop every process of ``procs`` (``Proc``-like: ``stop()`` and ``proc``), the last
    started first; one that does not stop cleanly is SIGKILLed with its process group."""
    for p in reversed(procs):
        try:
            p.stop()
        except Exception:  # noqa: BLE001
            os.killpg(p.proc.pid, signal.SIGKILL)

