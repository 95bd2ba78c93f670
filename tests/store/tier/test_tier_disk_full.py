"""The posix tier's disk fills up: the upload fails with the system's clear error (no space
left on device), sends go on, and once space is back the tier catches up with no gap and no
duplicate. The disk is a 256 KiB tmpfs mounted in a private mount namespace (``unshare``),
gone when the child exits; the test skips where namespaces or tmpfs mounts are not allowed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small tmpfs privately")
    flags = ["-m"] if os.geteuid() == 0 else ["-Urm"]
    probe = subprocess.run(["unshare", *flags, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.strip()[:200]}")
    return ["unshare", *flags]


def test_full_tier_disk_is_a_clear_error_and_loses_nothing(tmp_path):
    unshare = _unshare()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=256k tmpfs {mnt} && "
              f"head -c 200000 /dev/zero > {mnt}/ballast && "
              f"exec {sys.executable} {os.path.join(HERE, 'disk_full_child.py')} {mnt} "
              f"{tmp_path / 'store'}")
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "..", "src"))
    r = subprocess.run([*unshare, "sh", "-c", script], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["error"] and "No space left on device" in out["error"]
    assert out["caught_up"] is True and out["keys"] == 1
