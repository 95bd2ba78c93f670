"""Install the Node.js RocketMQ clients the interop tests drive, at set-up (``make node-clients``,
which ``make test`` runs first) and never during a test: ``rocketmq-client-nodejs`` (a 5.x gRPC
client, ``tests/proxy``) into ``.cache/grpc-node`` and ``ali-ons`` (a 4.x remoting client,
``tests/broker/test_interop_alions.py``) into ``.cache/interop-node``, both pinned, from npm.
Seconds when installed. Without node/npm, or when npm fails, the reason is recorded in
``<dir>/install-error.txt`` and those tests skip with it.

    python scripts/node/install.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
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


def main() -> int:
    for where, (packages, marker) in CLIENTS.items():
        err = install(where, packages, marker)
        note = where / "install-error.txt"
        if err is None:
            note.unlink(missing_ok=True)
            print(f"{where.name}\t{' '.join(packages)}")
        else:
            where.mkdir(parents=True, exist_ok=True)
            note.write_text(err)
            print(f"{where.name}\tnot installed: {err.splitlines()[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
