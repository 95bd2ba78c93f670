"""Types as a gate: mypy (pyproject.toml's [tool.mypy]: strict for the packages below) finds no
error. A module added to the list must pass strict mode first."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["-p", "rocketstore.format", "-p", "rocketstore.remoting",
           "-m", "rocketstore.broker.send_rule", "-m", "rocketstore.broker.send_order",
           "-m", "rocketstore.broker.processors.send",
           "-m", "rocketstore.broker.services.puts",
           "-m", "rocketstore.broker.services.writer", "-m", "rocketstore.broker.services.syncflush",
           "-p", "rocketstore.broker.workers",
           "-m", "rocketstore.store.put_path", "-m", "rocketstore.broker.wiring"]


def test_mypy_finds_no_error():
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed: `make setup` installs the dev extra (mypy>=1.8)")
    cache = os.path.join(tempfile.gettempdir(), f"rocketstore-mypy-{os.getuid()}")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", cache, *CHECKED], cwd=ROOT / "src",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success: no issues found" in proc.stdout


def test_the_gate_fails_on_a_type_error(tmp_path):
    """The same run over a module with one wrong type reports it (the gate is not vacuous)."""
    pytest.importorskip("mypy")
    bad = tmp_path / "bad_types.py"
    bad.write_text("from rocketstore.broker.send_rule import header_int\n\n"
                   "n: str = header_int({}, 'queueId', 0)\n")
    cache = os.path.join(tempfile.gettempdir(), f"rocketstore-mypy-{os.getuid()}")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", cache, str(bad)], cwd=ROOT / "src",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'Incompatible types in assignment (expression has type "int"' in proc.stdout
