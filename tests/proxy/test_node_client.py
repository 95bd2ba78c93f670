"""npm ``rocketmq-client-nodejs`` (a second RocketMQ 5.x gRPC client) against ``rocketstore serve``.

Installed under ``.cache/grpc-node`` on first run; skipped (visibly) when node or npm is absent.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketstore.client import PullConsumer

from tests.interop_clients import node_modules

from .conftest import start_grpc_server

pytestmark = pytest.mark.interop
DRIVER = Path(__file__).with_name("grpc_node_driver.js")


def _node_modules() -> Path:
    if not shutil.which("node"):
        pytest.skip("node not installed: the Node.js RocketMQ 5.x client test needs it")
    return node_modules("grpc-node", "rocketmq-client-nodejs")


def test_node_client_sends_receives_changes_invisible_time_and_acks(tmp_path):
    mods = _node_modules()
    srv = start_grpc_server(str(tmp_path / "store"), {"NodeTopic": 2})
    try:
        env = {**os.environ, "NODE_PATH": str(mods), "HOME": str(tmp_path)}
        r = subprocess.run(["node", str(DRIVER), srv.grpc, "NodeTopic", "G_node", "6"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        sent_ids = {s["message_id"] for s in out["sent"]}
        assert len(sent_ids) == 6 and out["changed"]
        assert sorted(g["body"] for g in out["got"]) == [f"node-body-{i}" for i in range(6)]
        assert {g["message_id"] for g in out["got"]} == sent_ids
        assert all(g["tag"] == "NodeTag" and g["from"] == "node" and g["attempt"] == 1
                   for g in out["got"])
        assert out["again"] == 0  # acked, including the one whose invisible time moved
        c = PullConsumer("CG_node_check", srv.namesrv)  # the 4.x view of the same messages
        try:
            pulled = [m for q in range(2) for m in c.pull("NodeTopic", q, 0, 32).messages]
        finally:
            c.shutdown()
        assert {m.uniq_key for m in pulled} == sent_ids
        assert all(m.tags == "NodeTag" and m.properties.get("from") == "node" for m in pulled)
    finally:
        assert srv.stop() == 0, srv.log()
