"""``rocketstore tier status|verify --store DIR [--json]`` as a user runs it."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from rocketstore.store.message_store import MessageStore

from .test_tier_store import BROKER, put, store_cfg


def cli(*args):
    env = dict(os.environ)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "src"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "tier", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_status_and_verify(tmp_path):
    with MessageStore(store_cfg(tmp_path)) as s:
        put(s, 40)
        assert s.tier.wait_caught_up(30)
    store = str(tmp_path / "store")
    r = cli("status", "--store", store, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["broker"] == BROKER and doc["backend"] == "posix"
    assert sorted((q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) for q in doc["queues"]) == \
        [("TierT", 0, 0, 20), ("TierT", 1, 0, 20)]
    r = cli("verify", "--store", store)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr
    cl = sorted(glob.glob(str(tmp_path / "tier" / "*" / BROKER / "TierT" / "1" / "COMMIT_LOG" / "*")))
    with open(cl[-1], "ab") as fh:
        fh.write(b"\x00" * 30)  # a torn upload
    r = cli("verify", "--store", store, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert not doc["ok"] and any("30 byte(s) past" in p for p in doc["problems"])
    assert [q["ok"] for q in sorted(doc["queues"], key=lambda q: q["queueId"])] == [True, False]
    r = cli("status", "--store", str(tmp_path / "nothing"))
    assert r.returncode == 2 and "no tier known" in r.stderr


def test_verify_takes_a_tier_instead_of_a_store(tmp_path):
    """``rocketstore verify --store <posix tier base>``: every queue of every broker checked."""
    with MessageStore(store_cfg(tmp_path)) as s:
        put(s, 40)
        assert s.tier.wait_caught_up(30)
    tier = str(tmp_path / "tier")
    env_cli = [sys.executable, "-m", "rocketstore.cli", "verify", "--store", tier, "--json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "src"))
    r = subprocess.run(env_cli, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["records"] == 40 and sorted((q["broker"], q["queueId"]) for q in doc["queues"]) == \
        [(BROKER, 0), (BROKER, 1)]
    cl = sorted(glob.glob(os.path.join(tier, "*", BROKER, "TierT", "0", "COMMIT_LOG", "*")))
    with open(cl[0], "r+b") as fh:  # a body byte of the first record (the CRC covers the body)
        at = fh.read().find(b"body-00000-") + 6
        fh.seek(at)
        fh.write(b"Z")
    r = subprocess.run(env_cli, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "fails its checks" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(env_cli[:-1] + ["--option", "objectStoreEndpont=http://x"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "objectStoreEndpoint" in r.stderr, r.stderr
