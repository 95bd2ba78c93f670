"""Install the outside RocketMQ clients the interop tests drive, at set-up (``make
interop-clients``, which ``make test`` runs first) and never during a test, all pinned, into
``.cache/`` (ignored by git):

- from npm: ``rocketmq-client-nodejs`` (a 5.x gRPC client, ``tests/proxy``) into
  ``.cache/grpc-node``; ``ali-ons`` (a 4.x remoting client, ``test_interop_alions.py``) into
  ``.cache/interop-node``;
- from PyPI, each in its own venv: ``rocketmq-python-client`` (5.x gRPC, ``tests/proxy``) in
  ``.cache/grpc-client-venv``; ``rocketmq`` 0.4.4 (the C++ client's binding,
  ``test_interop_cpp_client.py``) in ``.cache/interop-venv``.

Seconds when installed. When one cannot be installed (no node/npm, no network) the reason is
recorded in ``<dir>/install-error.txt`` and its tests skip with it.

    python scripts/interop/install.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# directory -> (packages, the file that says they are there)
CLIENTS = {
    ROOT / ".cache" / "grpc-node": (["rocketmq-client-nodejs@1.0.8"],
                                    "node_modules/rocketmq-client-nodejs/package.json"),
    ROOT / ".cache" / "interop-node": (["ali-ons@3.12.0", "urllib@2"],
                                       "node_modules/ali-ons/package.json"),
}


def install(where: Path, packages: list[str], marker: str) -> str | None:
    """None when installed, else why not."""
    if (where / marker).exists():
        return None
    if not (shutil.which("node") and shutil.which("npm")):
        return "node/npm not installed"
    where.mkdir(parents=True, exist_ok=True)
    if not (where / "package.json").exists():
        (where / "package.json").write_text('{"name":"rocketstore-interop","private":true}')
    try:
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *packages], cwd=where,
                           capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"npm install {' '.join(packages)}: {exc}"
    if r.returncode != 0 or not (where / marker).exists():
        return f"npm install {' '.join(packages)} failed: {r.stderr[-1500:]}"
    return None


# venv directory -> (pip requirement, the import that says it is there)
VENVS = {
    ROOT / ".cache" / "grpc-client-venv": ("rocketmq-python-client==5.1.2", "rocketmq.v5.producer"),
    ROOT / ".cache" / "interop-venv": ("rocketmq==0.4.4", "rocketmq.client"),
}


def install_venv(where: Path, requirement: str, module: str) -> str | None:
    """None when ``module`` imports in the venv at ``where`` (made and filled if need be)."""
    py = where / "bin" / "python"

    def ok() -> bool:
        return py.exists() and subprocess.run([str(py), "-c", f"import {module}"],
                                              capture_output=True, timeout=120).returncode == 0
    if ok():
        return None
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", requirement],
                           capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pip install {requirement}: {exc}"
    if r.returncode != 0 or not ok():
        return f"pip install {requirement} failed: {r.stderr[-1500:]}"
    return None


def main() -> int:
    jobs = [(where, lambda w=where, a=args: install(w, *a), " ".join(args[0]))
            for where, args in CLIENTS.items()]
    jobs += [(where, lambda w=where, a=args: install_venv(w, *a), args[0])
             for where, args in VENVS.items()]
    for where, job, what in jobs:
        err = job()
        note = where / "install-error.txt"
        if err is None:
            note.unlink(missing_ok=True)
            print(f"{where.name}\t{what}")
        else:
            where.mkdir(parents=True, exist_ok=True)
            note.write_text(err)
            print(f"{where.name}\tnot installed: {err.splitlines()[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
