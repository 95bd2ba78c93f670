"""Timer messages survive SIGKILL at any moment: each scheduled message is delivered exactly
once, never before its time, and at once when its time passed while the writer was down.

The child (``timer_child.py``) kills itself at a chosen instant (``store/syncprobe.py``'s crash
points): a timerlog file just created (``timerlog-roll``), a unit appended with its wheel slot
not yet updated (``timer-wheel-update``), inside the timer checkpoint's flush
(``timer-checkpoint``), and right after a due message was re-put to its topic with the dequeue
cursor not yet moved (``timer-dequeue-put``). Random kills from outside follow.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore import MessageStore

from .timer_child import timer_config

pytestmark = pytest.mark.crash
ROOT = Path(__file__).resolve().parents[2]
N, SPREAD = 60, 1500


def _run_child(store: str, crash_at: str | None = None, kill_after_s: float | None = None):
    env = {k: v for k, v in os.environ.items() if k != "ROCKETSTORE_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    if crash_at:
        env["ROCKETSTORE_CRASH_AT"] = crash_at
    proc = subprocess.Popen([sys.executable, "-m", "tests.crash.timer_child", store, str(N),
                             str(SPREAD)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(ROOT))
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    tried, acked = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("TRY", "ACK"):
            (tried if parts[0] == "TRY" else acked)[int(parts[1])] = int(parts[2])
    return proc.returncode, tried, acked, err


def _check_delivered(store: str, tried: dict, acked: dict) -> None:
    with MessageStore(timer_config(store)) as s:
        reopened = int(time.time() * 1000)
        due_by = max(list(tried.values()) + [reopened]) + 1500
        time.sleep(max(0.0, (due_by - time.time() * 1000) / 1000))
        count: dict[int, int] = {}
        off = 0
        while True:
            g = s.get_message("g", "TT", 0, off, 32)
            if not g.messages:
                break
            for m in g.messages:
                i = int(m.body)
                count[i] = count.get(i, 0) + 1
                assert m.store_timestamp >= tried[i], (i, m.store_timestamp - tried[i])
                off += 1
        dup = {i: c for i, c in count.items() if c > 1}
        assert not dup, f"delivered twice: {dup}"
        missing = sorted(set(acked) - set(count))
        assert not missing, f"acknowledged, never delivered: {missing}"
        assert set(count) <= set(tried)
        assert s.timer.last_error is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point,hit", [("timerlog-roll", 2), ("timerlog-roll", 4),
                                       ("timer-wheel-update", 5), ("timer-wheel-update", 40),
                                       ("timer-checkpoint", 3), ("timer-checkpoint", 12),
                                       ("timer-dequeue-put", 1), ("timer-dequeue-put", 25)])
def test_timer_killed_at(tmp_path, point, hit):
    store = str(tmp_path / "store")
    rc, tried, acked, err = _run_child(store, crash_at=f"{point}:{hit}")
    assert rc == -signal.SIGKILL, (point, rc, err[-3000:])
    assert tried, err[-2000:]
    assert os.path.exists(os.path.join(store, "abort"))
    _check_delivered(store, tried, acked)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_timer_killed_at_random(tmp_path, seed):
    store = str(tmp_path / "store")
    rng = random.Random(seed)
    rc, tried, acked, err = _run_child(store, kill_after_s=0.8 + rng.random() * 1.5)
    assert rc == -signal.SIGKILL, (rc, err[-3000:])
    _check_delivered(store, tried, acked)
