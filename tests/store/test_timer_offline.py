"""``rocketstore verify`` and ``rocketstore rebuild`` know the timer files: verify checks the
timerlog units, the wheel and the checkpoint and names the damaged file; rebuild writes the wheel
again from the timerlog, byte for byte what the running store wrote."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from rocketstore import MessageStore
from rocketstore.spark.rebuild_job import rebuild
from rocketstore.store.verify import verify_store

from .test_timer import cfg, drain, now_ms, timer_put


def _store_with_timers(root):
    c = cfg(root, mapped_file_size_timer_log=52 * 8, timer_roll_window_slot=600)
    with MessageStore(c) as s:
        t0 = now_ms()
        for i in range(12):
            assert timer_put(s, "T", b"soon%d" % i, t0 + 200 + 20 * i).ok
        for i in range(10):
            assert timer_put(s, "T", b"later%d" % i, t0 + 3500 + 50 * i).ok
        assert len(drain(s, "T", 12, 5)) == 12
        deadline = time.monotonic() + 5
        while s.timer.enqueued < 22 and time.monotonic() < deadline:
            time.sleep(0.01)
    return c, t0


def test_verify_and_rebuild_know_the_timer_files(tmp_path):
    root = str(tmp_path / "s")
    c, t0 = _store_with_timers(root)
    assert len(os.listdir(os.path.join(root, "timerlog"))) >= 3  # 22 units, 7 per file
    report = verify_store(root, c)
    assert report.ok, [str(p) for p in report.problems]
    assert report.timer_units == 22
    wheel = os.path.join(root, "timerwheel")
    before = open(wheel, "rb").read()
    os.unlink(wheel)
    res = rebuild(root, engine="local", cfg=c)
    assert res.timer_slots > 0
    assert open(wheel, "rb").read() == before  # the same bytes, from the timerlog alone
    with MessageStore(c) as s:  # the rebuilt wheel delivers what was pending
        got = drain(s, "T", 22, 8)
        assert sorted(m.body for m, _ in got) == sorted([b"soon%d" % i for i in range(12)] +
                                                        [b"later%d" % i for i in range(10)])
        for m, _ in got[12:]:
            assert m.store_timestamp >= t0 + 3500


def test_verify_names_damaged_timer_files(tmp_path):
    root = str(tmp_path / "s")
    c, _ = _store_with_timers(root)
    pristine = str(tmp_path / "pristine")
    shutil.copytree(root, pristine)
    # a unit's magic overwritten in the second timerlog file
    files = sorted(os.listdir(os.path.join(root, "timerlog")))
    with open(os.path.join(root, "timerlog", files[1]), "r+b") as fh:
        fh.seek(52 + 12)
        fh.write((0x7F).to_bytes(4, "big"))
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "verify", "--store", root],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"timerlog/{files[1]} @ 52: not a timerlog unit" in r.stdout, r.stdout
    # a pending slot pointing elsewhere; a wheel of the wrong size
    shutil.rmtree(root)
    shutil.copytree(pristine, root)
    ck = open(os.path.join(root, "config", "timercheck"), "rb").read()
    read_ms = int.from_bytes(ck[:8], "big")
    wheel = os.path.join(root, "timerwheel")
    data = bytearray(open(wheel, "rb").read())
    n = len(data) // 32
    for i in range(n):  # the first live slot at or after the read time
        t = int.from_bytes(data[i * 32:i * 32 + 8], "big")
        if t >= read_ms // 100 and t % n == i:
            data[i * 32 + 16:i * 32 + 24] = (10 ** 6).to_bytes(8, "big")
            break
    else:
        raise AssertionError("no pending slot")
    open(wheel, "wb").write(data)
    report = verify_store(root, c)
    assert not report.ok and any(p.file == "timerwheel" and "last unit 1000000" in p.what
                                 for p in report.problems), [str(p) for p in report.problems]
    with open(wheel, "r+b") as fh:
        fh.truncate(4096)
    report = verify_store(root, c)
    assert any(p.file == "timerwheel" and "not 38707200" in p.what for p in report.errors)


def test_status_of_a_closed_store_counts_waiting_timers(tmp_path):
    import json
    root = str(tmp_path / "s")
    c = cfg(root)
    with MessageStore(c) as s:
        later = now_ms() + 3_600_000
        for i in range(4):
            assert timer_put(s, "T", b"w%d" % i, later + i).ok
        deadline = time.monotonic() + 5
        while s.timer.enqueued < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    r = subprocess.run([sys.executable, "-m", "rocketstore.cli", "status", "--store", root, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rt = json.loads(r.stdout)["brokers"][0]["runtime"]
    assert rt["timerCongestNum"] == "4" and rt["timerOffsetBehind"] == "0"
