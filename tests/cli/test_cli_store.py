"""The CLI as a user runs it: real processes, real store directories."""
import json
import subprocess
import sys

import pytest


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def test_put_get_inspect_round_trip(tmp_path):
    store = str(tmp_path / "s")
    out = json.loads(run("put", "--store", store, "--topic", "T", "--tags", "A", "--keys", "k1,k2",
                         "--queue", "1", "--json", "one", "two").stdout)
    assert [o["status"] for o in out] == ["PUT_OK", "PUT_OK"] and out[1]["queue_offset"] == 1
    got = json.loads(run("get", "--store", store, "--topic", "T", "--queue", "1", "--offset", "0",
                         "--json").stdout)
    assert got["status"] == "FOUND" and [m["body"] for m in got["messages"]] == ["one", "two"]
    assert got["messages"][0]["keys"] == ["k1", "k2"]
    info = json.loads(run("inspect", "--store", store, "--json").stdout)
    assert info["topics"]["T"] == [{"queue_id": 1, "min_offset": 0, "max_offset": 2}]
    assert info["commitlog"]["max_offset"] > 0
    text = run("inspect", "--store", store).stdout
    assert "topic T: q1[0..2)" in text


def test_errors_are_one_line_and_nonzero(tmp_path):
    p = run("get", "--store", str(tmp_path / "missing"), "--topic", "T", "--queue", "0",
            "--offset", "0", check=False)
    assert p.returncode != 0 and "no such store directory" in p.stderr
    p = run("put", "--store", str(tmp_path / "s"), "--topic", "a/b", "x", check=False)
    assert p.returncode == 1 and "MESSAGE_ILLEGAL" in p.stdout


def test_demo_without_spark(tmp_path):
    p = run("demo", "--store", str(tmp_path / "d"), "--messages", "600", "--no-spark", "--json")
    rep = json.loads(p.stdout)
    assert rep["written"] == rep["read"] == rep["reopened_total"] == 600
    assert rep["query_hits"] >= 1
