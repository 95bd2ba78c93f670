"""Full disk on a small tmpfs (mounted by the test; needs root — skipped with the reason
otherwise): an append that cannot get space returns an error status, nothing already stored is
damaged, dispatch pauses instead of dying, and puts succeed again once space is freed.

Each scenario runs in a child process (``full_disk_child.py``): a store that wrote through a
sparse mapping on a full file system would die of SIGBUS, and that must fail the test, not
kill pytest.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rocketstore.store.verify import verify_store

CHILD = os.path.join(os.path.dirname(__file__), "full_disk_child.py")


@pytest.fixture
def tmpfs(tmpfs_factory):
    return tmpfs_factory("2m")


def _run(mnt, scenario: str) -> dict:
    r = subprocess.run([sys.executable, CHILD, str(mnt), scenario], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"child died ({r.returncode}):\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_full_disk_new_segment(tmpfs):
    out = _run(tmpfs, "segment")
    st = out["statuses"]
    assert out["first_fail"][1] == "CREATE_MAPPED_FILE_FAILED", out
    assert "no space" in out["first_fail"][2]
    assert set(st) <= {"PUT_OK", "CREATE_MAPPED_FILE_FAILED", "after:PUT_OK"}, st
    assert out["acked_before_free"] > 100
    assert out["readable_while_full"] == "ok"
    assert out["acked_after_free"] == 50 and st["after:PUT_OK"] == 50
    assert out["dispatched_after_free"] and out["readable_after_free"] == "ok"
    assert out["query_after_free"]
    assert out["readable_after_reopen"] == "ok"
    report = verify_store(str(tmpfs / "store"))
    assert report.ok, [str(p) for p in report.problems]


def test_full_disk_pauses_dispatch_then_resumes(tmpfs):
    out = _run(tmpfs, "dispatch")
    assert out["statuses"].get("PUT_OK", 0) > 0  # blocks allocated ahead still take appends
    # then dispatch cannot create the next ConsumeQueue file: puts are refused, not acked for
    # consumers that would never see them (RocketMQ's makeLogicsQueueError)
    assert out["statuses"].get("SERVICE_NOT_AVAILABLE", 0) > 0, out
    assert "dispatch cannot progress" in out["refused_because"]
    assert out["health_while_full"] is False and out["health_after_free"] is True
    assert out["dispatch_error_while_full"] == "DiskFullError"
    assert not out["dispatched_while_full"] and out["cq_max_while_full"] == 20
    assert out["dispatched_after_free"] and out["readable_after_free"] == "ok", out
    assert out["put_after_free"] == "PUT_OK"
    assert out["query_after_free"] == 1
    assert out["readable_after_reopen"] == "ok"
    report = verify_store(str(tmpfs / "store"))
    assert report.ok, [str(p) for p in report.problems]


def test_disk_usage_over_warning_ratio_blocks_puts(tmpfs):
    out = _run(tmpfs, "usage")
    assert out == {"before": "PUT_OK", "writeable_full": False, "put_full": "SERVICE_NOT_AVAILABLE",
                   "writeable_freed": True, "put_freed": "PUT_OK"}
