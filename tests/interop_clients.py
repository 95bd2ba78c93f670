"""Where ``scripts/interop/install.py`` (``make interop-clients``, run by ``make test`` before
the suite) put the outside clients; a test never installs them itself (nothing downloads at run
time): it skips, naming the reason set-up recorded."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def node_modules(name: str, package: str) -> Path:
    """``.cache/<name>/node_modules`` holding ``package``, or skip saying why it does not."""
    where = ROOT / ".cache" / name
    mods = where / "node_modules"
    if (mods / package / "package.json").exists():
        return mods
    err = where / "install-error.txt"
    why = err.read_text().splitlines()[0] if err.exists() else "not installed"
    pytest.skip(f"{package}: {why} (run `make interop-clients`)")


def client_venv_python(name: str, module: str) -> str:
    """The python of ``.cache/<name>`` where ``module`` imports, or skip saying why not."""
    import subprocess
    where = ROOT / ".cache" / name
    py = where / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", f"import {module}"],
                                      capture_output=True, timeout=120).returncode == 0:
        return str(py)
    err = where / "install-error.txt"
    why = err.read_text().splitlines()[0] if err.exists() else "not installed"
    pytest.skip(f"{name} ({module}): {why} (run `make interop-clients`)")
