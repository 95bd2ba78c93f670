"""Read-only commands write nothing, refuse what is not a store and work beside a live broker."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from rocketstore import Message, MessageStore, NotAStoreError, PutStatus, StoreConfig
from tests.broker.conftest import start_server

SMALL = dict(mapped_file_size_commitlog=64 * 1024, mapped_file_size_consume_queue=20 * 100,
             max_hash_slot_num=64, max_index_num=256)


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                       text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def snapshot(root: str) -> dict:
    """Every path under ``root`` (the root too) with its type, size, mtime and content hash."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        st = os.stat(dirpath)
        out[dirpath] = ("dir", st.st_mtime_ns, tuple(sorted(dirnames + filenames)))
        for n in filenames:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            out[p] = ("file", st.st_size, st.st_mtime_ns, digest)
    return out


READ_ONLY_COMMANDS = [
    ("inspect",),
    ("verify",),
    ("get", "--topic", "T", "--queue", "0", "--offset", "0"),
    ("query", "--topic", "T", "--key", "k"),
    ("query", "--msg-id", "0A00000100002A9F0000000000000000"),
]


@pytest.mark.parametrize("cmd", READ_ONLY_COMMANDS, ids=lambda c: "-".join(c[:2]))
def test_read_only_command_on_a_directory_that_is_not_a_store(tmp_path, cmd):
    d = tmp_path / "etc"
    (d / "sub").mkdir(parents=True)
    (d / "passwd").write_text("root:x:0:0\n")
    (d / "sub" / "conf").write_bytes(b"\x00\x01")
    before = snapshot(str(d))
    p = run(cmd[0], "--store", str(d), *cmd[1:], check=False)
    assert p.returncode != 0
    assert "not a store" in p.stderr, p.stderr
    assert snapshot(str(d)) == before  # no checkpoint, config/, lock or abort appeared


def read_queue(store, topic, q):
    out, off = [], 0
    while True:
        g = store.get_message("g", topic, q, off, 32)
        if not g.messages:
            return out
        out += [m.body.decode() for m in g.messages]
        off = g.next_begin_offset


def _crashed_store(root: str) -> list[tuple[int, str]]:
    """A store left as a killed process leaves it: abort file, dispatch behind, a torn tail."""
    script = f"""
import os, sys
from rocketstore import Message, MessageStore, StoreConfig
cfg = StoreConfig(store_path_root_dir={root!r}, **{SMALL!r})
s = MessageStore(cfg)
for i in range(300):
    r = s.put_message(Message("T", b"body-%d" % i, keys=["k%d" % (i % 7)], queue_id=i % 2))
    assert r.status.name == "PUT_OK"
s.wait_dispatched(30)
s.commitlog.flush()
os._exit(0)  # no shutdown: abort stays, checkpoint lags
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    # a torn record at the end: a plausible header then garbage, never completed
    cl = os.path.join(root, "commitlog")
    last = sorted(os.listdir(cl))[-1]
    with MessageStore.open_read_only(root) as ro:
        end = ro.get_max_phy_offset()
    with open(os.path.join(cl, last), "r+b") as fh:
        fh.seek(end % SMALL["mapped_file_size_commitlog"])
        fh.write((500).to_bytes(4, "big") + bytes.fromhex("daa320a7") + b"\xff" * 40)
    return [(i % 2, "body-%d" % i) for i in range(300)]


def test_read_only_open_of_a_crashed_store_writes_nothing_and_reads_everything(tmp_path):
    root = str(tmp_path / "s")
    written = _crashed_store(root)
    assert os.path.exists(os.path.join(root, "abort"))
    before = snapshot(root)
    with MessageStore.open_read_only(root) as ro:
        assert ro.read_only
        assert ro.recovery_report.truncated_at is not None  # would truncate the torn tail...
        for q in (0, 1):
            assert read_queue(ro, "T", q) == [b for qq, b in written if qq == q]
        assert len(ro.query_message("T", "k3", max_num=64).messages) == len(range(3, 300, 7))
        r = ro.put_message(Message("T", b"x"))
        assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "read-only" in r.error
    assert snapshot(root) == before  # ...but did not
    for cmd in (("inspect", "--json"), ("get", "--topic", "T", "--queue", "1", "--offset", "130",
                                        "--max", "200", "--json"),
                ("query", "--topic", "T", "--key", "k3", "--max", "64", "--json")):
        out = json.loads(run(cmd[0], "--store", root, *cmd[1:]).stdout)
        if cmd[0] == "get":
            assert out["messages"][-1]["body"] == "body-299" and out["max_offset"] == 150
        if cmd[0] == "query":
            assert out["count"] == len(range(3, 300, 7))
        if cmd[0] == "inspect":
            assert out["read_only"] and not out["last_exit_ok"]
            assert out["topics"]["T"][1]["max_offset"] == 150
    assert snapshot(root) == before


def test_open_read_only_refuses_a_directory_that_is_not_a_store(tmp_path):
    (tmp_path / "x").write_text("x")
    before = snapshot(str(tmp_path))
    with pytest.raises(NotAStoreError):
        MessageStore.open_read_only(str(tmp_path))
    with pytest.raises(NotAStoreError):
        MessageStore(StoreConfig(store_path_root_dir=str(tmp_path), read_only=True))
    assert snapshot(str(tmp_path)) == before


def test_read_only_open_beside_a_store_open_for_writing(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(StoreConfig(store_path_root_dir=root, **SMALL)) as w:
        for i in range(50):
            assert w.put_message(Message("T", b"m%d" % i, keys=["a"])).ok
        assert w.wait_dispatched(30)
        with MessageStore.open_read_only(root) as ro:
            assert len(read_queue(ro, "T", 0)) == 50
            assert w.put_message(Message("T", b"after")).ok  # the writer is not disturbed
        p = run("get", "--store", root, "--topic", "T", "--queue", "0", "--offset", "40",
                "--json")
        assert [m["body"] for m in json.loads(p.stdout)["messages"]][-2:] == ["m49", "after"]
    with MessageStore(StoreConfig(store_path_root_dir=root, **SMALL)) as w:
        assert w.get_max_offset_in_queue("T", 0) == 51
        assert w.recovery_report.truncated_at is None


def test_read_only_commands_beside_a_live_serve(tmp_path):
    from rocketstore.client import Producer
    store = str(tmp_path / "store")
    srv = start_server(store)
    try:
        with Producer("PG", srv.namesrv) as p:
            sent = [p.send("LiveT", f"v{i}".encode(), keys=["lk"], queue_id=0) for i in range(12)]
        assert all(s.status == "SEND_OK" for s in sent)
        q = json.loads(run("query", "--store", store, "--topic", "LiveT", "--key", "lk",
                           "--json").stdout)
        assert sorted(m["body"] for m in q["messages"]) == sorted(f"v{i}" for i in range(12))
        g = json.loads(run("get", "--store", store, "--topic", "LiveT", "--queue", "0",
                           "--offset", "0", "--json").stdout)
        assert [m["body"] for m in g["messages"]] == [f"v{i}" for i in range(12)]
        info = json.loads(run("inspect", "--store", store, "--json").stdout)
        assert info["topics"]["LiveT"][0]["max_offset"] == 12
        v = run("verify", "--store", store, check=False)
        assert "store is open in another process" not in v.stdout + v.stderr
        with Producer("PG", srv.namesrv) as p:  # the broker still takes writes
            assert p.send("LiveT", b"later", queue_id=0).status == "SEND_OK"
    finally:
        assert srv.stop() == 0, srv.log()


def test_read_only_commands_change_no_byte_of_a_live_store(tmp_path):
    """A live ``serve`` (lock held, abort file present, dispatch and flush threads mid-way) is
    frozen with SIGSTOP so that it writes nothing meanwhile; every read-only command is run
    against its store; not one file, size, mtime or directory entry may change."""
    import signal
    from rocketstore.client import Producer
    store = str(tmp_path / "store")
    srv = start_server(store)
    try:
        with Producer("PG", srv.namesrv) as p:
            for i in range(40):
                assert p.send(f"Frozen{i % 2}", b"f%d" % i, keys=["fk"], queue_id=i % 2).status \
                    == "SEND_OK"
        time.sleep(1.5)  # let the broker write its checkpoint and state files once
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            before = snapshot(store)
            for cmd in (("inspect", "--json"), ("verify",), ("topics", "--all", "--json"),
                        ("consumers", "--json"),
                        ("get", "--topic", "Frozen1", "--queue", "1", "--offset", "0", "--json"),
                        ("query", "--topic", "Frozen0", "--key", "fk", "--json")):
                p = run(cmd[0], "--store", store, *cmd[1:], check=False)
                assert p.returncode == 0 or cmd[0] == "verify", (cmd, p.stdout, p.stderr)
                if cmd[0] == "get":
                    assert len(json.loads(p.stdout)["messages"]) == 20
            assert snapshot(store) == before
        finally:
            srv.proc.send_signal(signal.SIGCONT)
    finally:
        assert srv.stop() == 0, srv.log()
