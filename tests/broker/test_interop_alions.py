"""npm ``ali-ons@3.12.0`` (a pure-JavaScript RocketMQ 4.x client) against ``rocketstore serve``.

It speaks differently from the C++ client: SEND_MESSAGE_V2 with single-letter headers, JSON
numbers and booleans in request headers, enum *names* in heartbeats, oneway offset commits.
Installed with npm into ``.cache/interop-node`` on first run; skipped where node is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.broker.state.files import load_json_lenient

from tests.interop_clients import node_modules

from .conftest import start_server

pytestmark = pytest.mark.interop
DRIVER = Path(__file__).with_name("interop_alions.js")


def _node_modules() -> Path:
    if not shutil.which("node"):
        pytest.skip("node not installed")
    mods = node_modules("interop-node", "ali-ons")
    if not (mods / "urllib").exists():
        pytest.skip("urllib@2 not installed beside ali-ons (run `make interop-clients`)")
    return mods


def test_alions_produce_and_consume(tmp_path):
    mods = _node_modules()
    srv = start_server(str(tmp_path / "store"))
    n = 20
    try:
        # ali-ons does not fall back to TBW102's route: the topic exists first, as it must
        # with RocketMQ's name server (a lookup creates no topic)
        from rocketstore.client.admin import AdminClient
        with AdminClient(namesrv=srv.namesrv) as admin:
            admin.create_topic("AliTopic", 4, 4)
        env = {**os.environ, "HOME": str(tmp_path)}
        # the driver produces, then consumes with a fresh group
        r = subprocess.run(["node", str(DRIVER), str(mods), srv.namesrv, "AliTopic", "CG_ali",
                            str(n)], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        assert srv.stop() == 0, srv.log()
    sent, got = out["sent"], out["received"]
    assert [s["status"] for s in sent] == ["SEND_OK"] * n
    assert sorted(g["body"] for g in got) == sorted(f"ali-{i}" for i in range(n))
    by_body = {g["body"]: g for g in got}
    for s in sent:
        g = by_body[f"ali-{s['i']}"]
        assert g["msgId"] == s["msgId"]  # ali-ons ids are offset message ids
        assert g["tags"] == f"Tag{s['i'] % 2}" and g["keys"] == f"akey-{s['i']}"
        assert int(g["queueId"]) == int(s["queueId"]) and g["queueOffset"] == s["queueOffset"]
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                      mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=1000,
                      max_index_num=4000)
    with MessageStore(cfg) as store:
        maxes = {str(q): store.get_max_offset_in_queue("AliTopic", q) for q in range(4)}
    offsets = load_json_lenient(str(tmp_path / "store" / "config" / "consumerOffset.json"))
    committed = {k: int(v) for k, v in offsets["offsetTable"]["AliTopic@CG_ali"].items()}
    assert committed == maxes
