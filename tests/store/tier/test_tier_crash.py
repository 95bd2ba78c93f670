"""A real process killed with SIGKILL while it uploads to the tier: after each restart the
tier holds each queue's messages once, in order, with no gap (its own files are the truth)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.store.message_store import MessageStore

from .tierutil import check_queue_matches, local_records

HERE = os.path.dirname(__file__)


def _run_and_kill(root, tier, start, delay):
    env = dict(os.environ)
    src = os.path.abspath(os.path.join(HERE, "..", "..", "..", "src"))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_child.py"), root, tier,
                          str(start)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        word, cut = p.stdout.readline().split()
        assert word == "open"
        time.sleep(delay)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        p.stdout.close()
    return p.returncode, int(cut)


def test_sigkill_during_upload_leaves_no_gap_and_no_duplicate(tmp_path):
    root, tier = str(tmp_path / "store"), str(tmp_path / "tier")
    rnd = random.Random(7)
    cuts = 0
    for round_ in range(3):
        with_msgs = 0
        if os.path.isdir(root):
            cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                              mapped_file_size_consume_queue=2000, timer_wheel_enable=False)
            with MessageStore(cfg) as s:  # the local store alone: how many it holds
                with_msgs = sum(len(local_records(s, "CrashT", q)) for q in range(4))
        rc, cut = _run_and_kill(root, tier, with_msgs, 0.4 + rnd.random() * 0.4)
        assert rc == -signal.SIGKILL
        cuts += cut  # queues whose torn upload the open cut (the kill landed mid-upload)
    t = TierConfig(file_path=tier, broker_cluster_name="CrashC", broker_name="crash-b",
                   commitlog_max_size=16384, consume_queue_max_size=400, group_commit_timeout=1)
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=2000, tier=t, timer_wheel_enable=False)
    with MessageStore(cfg) as s:
        cuts += len(s.tier.cut_on_recover)
        assert s.tier.wait_caught_up(30)
        total = 0
        for q in range(4):
            rows = check_queue_matches(tier, "CrashC", "crash-b", s, "CrashT", q)
            assert len(rows) == len(local_records(s, "CrashT", q)) > 0
            bodies = [r[2] for r in rows]
            assert len(set(bodies)) == len(bodies)
            total += len(rows)
    print(f"{total} messages, {cuts} torn upload(s) cut on reopening after a kill")
