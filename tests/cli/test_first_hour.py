"""What a new user ran into in the first hour, each as a real process on real directories:
``put`` on a wrong path, a store reopened without its sizes, reads that return less than
asked, a missing topic, a misspelt broker.conf key, and one error convention for every command
(``error:`` on stderr; exit 1 for a user error, 2 for a usage error)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

from rocketstore import Message, MessageStore, StoreConfig

SMALL = ["-o", "mapped_file_size_commitlog=65536", "-o", "mapped_file_size_consume_queue=2000",
         "-o", "max_hash_slot_num=100", "-o", "max_index_num=400"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *args], capture_output=True,
                          text=True, timeout=120, input=stdin)


def _tree(root) -> dict:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[p] = os.path.getsize(p)
    return out


def test_put_refuses_a_non_empty_directory_that_is_not_a_store(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("my notes\n")
    (home / "photos").mkdir()
    before = _tree(home)
    p = run("put", "--store", str(home), "--topic", "T", "hello")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.startswith("error: ") and "not a store directory" in p.stderr, p.stderr
    assert _tree(home) == before and sorted(os.listdir(home)) == ["notes.txt", "photos"]


def test_put_creates_a_store_only_in_an_empty_or_missing_directory_with_the_sizes_given(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for d in (empty, tmp_path / "missing"):
        p = run("put", "--store", str(d), "--topic", "T", *SMALL, "hello")
        assert p.returncode == 0, p.stderr
        [seg] = os.listdir(d / "commitlog")
        assert os.path.getsize(d / "commitlog" / seg) == 65536  # not 1 GiB for 5 bytes
    # a second put, without the sizes, appends to the same store
    p = run("put", "--store", str(empty), "--topic", "T", "again", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)[0]["queue_offset"] == 1, p.stderr


def test_message_store_opens_an_existing_store_with_its_saved_sizes(tmp_path):
    root = str(tmp_path / "s")
    small = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=65536,
                        mapped_file_size_consume_queue=20000, max_hash_slot_num=100,
                        max_index_num=400)
    with MessageStore(small) as store:
        assert store.put_message(Message(topic="T", body=b"x")).ok
    with MessageStore(StoreConfig(store_path_root_dir=root)) as store:  # no sizes given
        assert store.cfg.mapped_file_size_commitlog == 65536
        assert store.cfg.mapped_file_size_consume_queue == 20000
        assert store.put_message(Message(topic="T", body=b"y")).queue_offset == 1
    try:  # a size the caller did set, and that differs, is still refused
        MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20))
    except Exception as exc:  # noqa: BLE001
        assert "mapped_file_size_commitlog=65536" in str(exc)
    else:
        raise AssertionError("opened with the wrong segment size")


def _store_with(tmp_path, n: int, key: str = "same") -> str:
    store = str(tmp_path / "s")
    bodies = [f"m{i}" for i in range(n)]
    p = run("put", "--store", store, "--topic", "T", "--keys", key, *SMALL, *bodies)
    assert p.returncode == 0, p.stderr
    return store


def test_get_and_query_say_when_they_return_less_than_asked(tmp_path):
    store = _store_with(tmp_path, 70)
    p = run("get", "--store", store, "--topic", "T", "--queue", "0", "--offset", "0",
            "--max", "10000")
    shown = len([ln for ln in p.stdout.splitlines() if ln.startswith("  [")])
    assert p.returncode == 0 and 0 < shown < 70
    assert f"note: {shown} of the 10000 asked for returned" in p.stderr, p.stderr
    assert f"--offset {shown}" in p.stderr
    p = run("query", "--store", store, "--topic", "T", "--key", "same")
    assert p.returncode == 0 and p.stdout.startswith("32 message(s)"), p.stdout
    assert "note: 32 shown" in p.stderr and "more may match" in p.stderr, p.stderr
    p = run("get", "--store", store, "--topic", "T", "--queue", "0", "--offset", "0",
            "--max", "5")
    assert p.returncode == 0 and "note:" not in p.stderr  # got what was asked


def test_get_on_a_missing_topic_is_an_error(tmp_path):
    store = _store_with(tmp_path, 1)
    p = run("get", "--store", store, "--topic", "Nope", "--queue", "0", "--offset", "0")
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "'Nope'" in p.stderr, \
        (p.returncode, p.stderr)


def test_inspect_shows_index_fill_as_a_percentage(tmp_path):
    store = _store_with(tmp_path, 3)
    out = run("inspect", "--store", store).stdout
    index_lines = [ln for ln in out.splitlines() if ln.startswith("index ")]
    assert index_lines and all(re.search(r"entries \(\d+\.\d%\)", ln) for ln in index_lines), out
    assert "e-0" not in out


def test_one_error_convention(tmp_path):
    usage = run("get", "--store", str(tmp_path), "--queue", "0", "--offset", "0")  # no --topic
    assert usage.returncode == 2 and usage.stderr.splitlines()[-1].startswith("error: "), \
        usage.stderr
    assert "--help" in usage.stderr
    user = run("get", "--store", str(tmp_path / "missing"), "--topic", "T", "--queue", "0",
               "--offset", "0")
    assert user.returncode == 1 and user.stderr.startswith("error: "), user.stderr
    bad = run("send", "--namesrv", "127.0.0.1:1", "--topic", "T", "--timeout", "1", "x")
    assert bad.returncode == 1 and bad.stderr.startswith("error: "), bad.stderr
    assert "Error: " not in usage.stderr + user.stderr + bad.stderr


def _free_port() -> int:
    from tests.broker.conftest import free_port  # shared by every test process (see there)
    return free_port()


def test_serve_warns_once_about_a_misspelt_broker_conf_key(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nlistenPor=10911\nautoCreateTopicEnabel=true\n"
                    "deleteWhen=04\nfileReservedTime=48\nbrokerRole=ASYNC_MASTER\n")
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                             str(tmp_path / "s"), "--config", str(conf), "--port",
                             str(_free_port()), "--namesrv-port", str(_free_port()), *SMALL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("rocketstore broker on")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    err = proc.stderr.read()
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert sorted(warnings) == sorted([
        f"warning: {conf}: unknown key 'listenPor' ignored (did you mean 'listenPort'?)",
        f"warning: {conf}: unknown key 'autoCreateTopicEnabel' ignored "
        "(did you mean 'autoCreateTopicEnable'?)"]), err
