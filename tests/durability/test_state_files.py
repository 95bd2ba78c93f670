"""The broker's state files (``config/*.json``, the name server's ``kvConfig.json``): written
atomically, read leniently as RocketMQ's ``ConfigManager`` reads them.

* A damaged file (torn, garbage, not UTF-8, not a JSON object) is read from its ``.bak`` —
  RocketMQ's ``load()`` falls back to ``loadBak()`` on any decode error — and nothing is
  written while reading; the damaged bytes are kept (``<name>.damaged``) by the next write,
  which does not rotate them into ``.bak`` over the good backup.
* Both damaged: a clear error naming the file, nothing written, nothing emptied.
* A crash at any step of a write (process exits after each write, fsync or rename, or while
  the temp file is half written) leaves a file that loads as the old or the new version.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from rocketstore.broker.namesrv.kvconfig import KVConfigManager
from rocketstore.broker.state.offsets import ConsumerOffsetManager, DelayOffsetStore
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.broker.state.subgroups import SubscriptionGroupConfig, SubscriptionGroupManager


def _snapshot(d) -> dict:
    out = {}
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        st = os.stat(p)
        with open(p, "rb") as fh:
            out[n] = (st.st_size, st.st_mtime_ns, hashlib.sha256(fh.read()).hexdigest())
    return out


# kind -> (file name, open(dir), write version v, read the version back (None: empty))
def _topics_write(m, v):
    m.create(f"T{v}", 4)
    m.persist()  # a single create goes to the change journal; the whole file is what is tested


def _topics_read(m):
    names = sorted(t.topic_name for t in m.topics() if t.topic_name.startswith("T") and
                   t.topic_name[1:].isdigit())
    return max((int(n[1:]) for n in names), default=None)


def _offsets_write(m, v):
    m.commit("G", "T", 0, v)
    m.persist()


def _offsets_read(m):
    o = m.query("G", "T", 0)
    return None if o < 0 else o


def _delay_write(m, v):
    m.set(1, v)
    m.persist()


def _delay_read(m):
    return m.get(1) or None


def _groups_write(m, v):
    m.update(SubscriptionGroupConfig(group_name=f"G{v}"))
    m.persist()


def _groups_read(m):
    vs = [int(g[1:]) for g in m.names() if g[:1] == "G" and g[1:].isdigit()]
    return max(vs, default=None)


def _kv_write(m, v):
    m.put("NS", "k", str(v))


def _kv_read(m):
    s = m.get("NS", "k")
    return None if s is None else int(s)


KINDS = {
    "topics": ("topics.json", TopicConfigManager, _topics_write, _topics_read),
    "consumerOffset": ("consumerOffset.json", ConsumerOffsetManager, _offsets_write, _offsets_read),
    "delayOffset": ("delayOffset.json", DelayOffsetStore, _delay_write, _delay_read),
    "subscriptionGroup": ("subscriptionGroup.json", SubscriptionGroupManager, _groups_write,
                          _groups_read),
    "kvConfig": ("kvConfig.json", lambda d: KVConfigManager(os.path.join(d, "kvConfig.json")),
                 _kv_write, _kv_read),
}

DAMAGE = {
    "torn": lambda b: b[: len(b) // 2],
    "garbage": lambda b: b"\x00\x17 not json \xff" * 3,
    "not-utf8": lambda b: b"\xff\xfe" + b,
    "not-an-object": lambda b: b"[1, 2, 3]",
}


def _two_versions(d, kind):
    name, make, write, read = KINDS[kind]
    m = make(str(d))
    write(m, 1)
    m = make(str(d))
    write(m, 2)  # now: file = v2, .bak = v1
    assert read(make(str(d))) == 2
    return os.path.join(str(d), name)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_damaged_state_file_is_read_from_its_backup(tmp_path, kind, damage):
    name, make, write, read = KINDS[kind]
    path = _two_versions(tmp_path, kind)
    with open(path, "rb") as fh:
        good = fh.read()
    bad = DAMAGE[damage](good)
    with open(path, "wb") as fh:
        fh.write(bad)
    before = _snapshot(tmp_path)
    m = make(str(tmp_path))  # RocketMQ's load(): decode fails -> loadBak()
    assert read(m) == 1
    assert _snapshot(tmp_path) == before  # reading wrote nothing
    write(m, 3)
    assert read(make(str(tmp_path))) == 3
    with open(path + ".damaged", "rb") as fh:
        assert fh.read() == bad  # the damaged bytes are kept for the operator...
    os.remove(path)
    assert read(make(str(tmp_path))) == 1  # ...and the good backup was not replaced by them


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_state_file_and_backup_both_damaged_is_a_clear_error(tmp_path, kind):
    name, make, write, read = KINDS[kind]
    path = _two_versions(tmp_path, kind)
    for p in (path, path + ".bak"):
        with open(p, "r+b") as fh:
            fh.truncate(7)
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError) as ei:
        make(str(tmp_path))
    assert name in str(ei.value) and "damaged" in str(ei.value)
    assert _snapshot(tmp_path) == before


CRASH_CHILD = r"""
import os, sys
from rocketstore.broker.state import files as state
kind_file, step, torn = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
n = [0]
real_replace, real_fsync = os.replace, os.fsync
def tick():
    n[0] += 1
    if n[0] == step:
        os._exit(9)  # the process dies here: nothing after this runs
def replace(a, b):
    tick(); real_replace(a, b); tick()
def fsync(fd):
    tick(); real_fsync(fd); tick()
os.replace, os.fsync = replace, fsync
if torn:
    import builtins
    real_open = builtins.open
    class Torn:
        def __init__(self, fh): self.fh = fh
        def __enter__(self): return self
        def __exit__(self, *a): self.fh.close()
        def write(self, b):
            self.fh.write(b[: len(b) // 2]); self.fh.flush(); os._exit(9)
        def __getattr__(self, k): return getattr(self.fh, k)
    def topen(p, mode="r", *a, **k):
        fh = real_open(p, mode, *a, **k)
        return Torn(fh) if str(p).endswith(".tmp") and "w" in mode else fh
    builtins.open = topen
state.write_json_atomic(kind_file, {"offsetTable": {"T@G": {"0": 2}}})
print("DONE")
"""


def test_a_crash_at_any_step_of_a_state_write_leaves_old_or_new(tmp_path):
    """Exit after every write, fsync and rename of ``write_json_atomic`` (and mid-write of the
    temp file): the file then loads as the old version or the new one, never an error."""
    seen = set()
    for torn in (True, False):
        for step in range(1, 30):
            d = tmp_path / f"{int(torn)}-{step}"
            d.mkdir()
            m = ConsumerOffsetManager(str(d))
            m.commit("G", "T", 0, 1)
            m.persist()
            p = subprocess.run([sys.executable, "-c", CRASH_CHILD,
                                str(d / "consumerOffset.json"), str(step), str(int(torn))],
                               capture_output=True, text=True, timeout=60)
            v = ConsumerOffsetManager(str(d)).query("G", "T", 0)
            assert v in (1, 2), (torn, step, os.listdir(d))
            seen.add(v)
            if torn or "DONE" in p.stdout:
                assert p.returncode == 0 or torn, p.stderr
                break
            assert p.returncode == 9, p.stderr
        else:
            raise AssertionError("the write never completed")
    assert seen == {1, 2}


def test_read_only_commands_on_a_store_with_damaged_state_files_write_nothing(tmp_path):
    """``topics``/``consumers``/``status --store`` over a store whose config files are damaged:
    the backups are read, nothing changes on disk."""
    from rocketstore import Message, MessageStore, StoreConfig
    from tests.cli.test_read_only import SMALL, run, snapshot
    root = tmp_path / "s"
    with MessageStore(StoreConfig(store_path_root_dir=str(root), **SMALL)) as s:
        for i in range(5):
            assert s.put_message(Message("RoT", b"m%d" % i, queue_id=0)).ok
        assert s.wait_dispatched(30)
    cfg = str(root / "config")
    for v in (1, 2):
        m = ConsumerOffsetManager(cfg)
        m.commit("RoG", "RoT", 0, v)
        m.persist()
        t = TopicConfigManager(cfg)
        t.create("RoT", 1 + v)
        t.update(t.get("RoT").__class__("RoT", 1 + v, 1 + v))
        t.persist()  # the whole file (a single change goes to the journal)
    for n in ("consumerOffset.json", "topics.json"):
        with open(os.path.join(cfg, n), "r+b") as fh:
            fh.truncate(9)
    before = snapshot(str(root))
    out = json.loads(run("topics", "--store", str(root), "--json").stdout)
    row = [r for r in out["topics"] if r["topic"] == "RoT"][0]
    assert row["readQueueNums"] == 2 and row["messages"] == 5
    out = json.loads(run("consumers", "--store", str(root), "--json").stdout)
    assert "RoG" in json.dumps(out)
    run("status", "--store", str(root), "--json")
    run("verify", "--store", str(root), check=False)
    assert snapshot(str(root)) == before


@pytest.fixture
def small_fs(tmpfs_factory):
    return tmpfs_factory("256k")


def test_state_write_on_a_full_disk_keeps_the_old_file_and_retries(small_fs):
    """A state-file write that finds the disk full fails, leaves the old version whole, and
    the change is written by the next persist once there is space (it is still owed)."""
    from tests.conftest import fill_disk
    d = str(small_fs / "config")
    os.makedirs(d)
    m = ConsumerOffsetManager(d)
    m.commit("G", "T", 0, 1)
    m.persist()
    filler = str(small_fs / "filler")
    fill_disk(filler)
    m.commit("G", "T", 0, 2)
    with pytest.raises(OSError):
        m.persist()
    assert ConsumerOffsetManager(d).query("G", "T", 0) == 1  # the old version, whole
    os.remove(filler)
    m.persist()  # no new commit: the failed write is still owed
    assert ConsumerOffsetManager(d).query("G", "T", 0) == 2
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
