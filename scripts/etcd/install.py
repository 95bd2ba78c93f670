"""Install the etcd server the replicated controller group's tests run on 127.0.0.1: Debian's
``etcd-server`` package, unpacked (``apt-get download`` + ``dpkg-deb -x``, no root needed, the
system untouched) into a cache outside the repository (``~/.cache/rocketstore/etcd``;
``ROCKETSTORE_ETCD_CACHE`` moves it). An ``etcd`` already on PATH is used as it is. Seconds
when cached. When it cannot be installed the reason is recorded in ``etcd.json`` and the etcd
tests skip with it.

    python scripts/etcd/install.py          # install (once)
    python scripts/etcd/install.py --show   # print the recorded state
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "etcd-server"


def cache_dir() -> Path:
    env = os.environ.get("ROCKETSTORE_ETCD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rocketstore" / "etcd"


def _version(binary: str) -> str | None:
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        if line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
    return None


def _download(cache: Path) -> str | None:
    """Unpack Debian's etcd-server into ``cache``; returns an error text or None."""
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for attempt in ("download", "update-then-download"):
        if attempt == "update-then-download":
            # a fresh machine may have no package lists yet
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, timeout=600)
        r = subprocess.run(["apt-get", "download", PACKAGE], cwd=str(debs), capture_output=True,
                           text=True, timeout=600)
        found = sorted(glob.glob(str(debs / f"{PACKAGE}_*.deb")))
        if r.returncode == 0 and found:
            x = subprocess.run(["dpkg-deb", "-x", found[-1], str(cache / "root")],
                               capture_output=True, text=True, timeout=300)
            if x.returncode != 0:
                return f"dpkg-deb -x {found[-1]}: {x.stderr.strip()[-400:]}"
            return None
    return f"apt-get download {PACKAGE} failed: {r.stderr.strip()[-400:]}"


def main() -> int:
    cache = cache_dir()
    state_path = cache / "etcd.json"
    if "--show" in sys.argv:
        print(state_path.read_text() if state_path.exists() else "{}")
        return 0
    cache.mkdir(parents=True, exist_ok=True)
    state: dict = {"server": "etcd", "binary": None, "version": None, "error": None}
    binary = shutil.which("etcd") or str(cache / "root" / "usr" / "bin" / "etcd")
    if not os.path.exists(binary):
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            state["error"] = "neither etcd on PATH nor apt-get/dpkg-deb to fetch Debian's etcd-server"
        else:
            print(f"etcd: apt-get download {PACKAGE} (once)", file=sys.stderr)
            try:
                state["error"] = _download(cache)
            except (OSError, subprocess.TimeoutExpired) as exc:
                state["error"] = f"apt-get download {PACKAGE}: {exc}"
    if not state["error"]:
        state["version"] = _version(binary)
        if state["version"] is None:
            state["error"] = f"{binary} --version did not answer"
        else:
            state["binary"] = binary
    state_path.write_text(json.dumps(state, indent=2))
    if state["error"]:
        print(f"etcd: {state['error']} (the etcd controller-group tests will skip)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
