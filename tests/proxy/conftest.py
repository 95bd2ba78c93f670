"""Fixtures for the gRPC (RocketMQ 5.x) tests: a real ``rocketstore serve --grpc-port 0``
subprocess, topics made beforehand (gRPC clients never create topics, as in RocketMQ 5), and
PyPI ``rocketmq-python-client==5.1.2`` in its own venv under ``.cache/`` (created on first run).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.broker.state.subgroups import SubscriptionGroupConfig, SubscriptionGroupManager

from tests.interop_clients import client_venv_python

from ..broker.conftest import Server, start_server

DRIVER = Path(__file__).with_name("grpc_client_driver.py")


def client_python() -> str:
    """The venv ``make interop-clients`` made with rocketmq-python-client (skip without it)."""
    return client_venv_python("grpc-client-venv", "rocketmq.v5.producer")


def run_client(py: str, tmp_path: Path, *args: str, timeout: float = 120):
    env = {**os.environ, "HOME": str(tmp_path)}  # the client logs under $HOME/logs
    r = subprocess.run([py, str(DRIVER), *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, f"driver {args} failed ({r.returncode}): {r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_script(py: str, tmp_path: Path, *steps: tuple, timeout: float = 180) -> list:
    """Run several driver commands in one client process (saves a start-up per step)."""
    return run_client(py, tmp_path, "script", json.dumps([list(map(str, st)) for st in steps]),
                      timeout=timeout)


def make_topics(store: str, topics: dict[str, int]) -> None:
    tm = TopicConfigManager(os.path.join(store, "config"))
    for name, queues in topics.items():
        tm.create(name, queues)


def make_groups(store: str, **groups: dict) -> None:
    """Subscription group configs, as mqadmin updateSubGroup leaves them."""
    sg = SubscriptionGroupManager(os.path.join(store, "config"))
    for name, kw in groups.items():
        sg.update(SubscriptionGroupConfig(name, **kw))


def start_grpc_server(store: str, topics: dict[str, int], *extra: str) -> Server:
    make_topics(store, topics)
    srv = start_server(store, "--grpc-port", "0", *extra)
    assert srv.grpc, "serve printed no gRPC endpoint"
    return srv


def write_conf(path: Path, **keys: object) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()), encoding="utf-8")
    return str(path)
