"""Install the S3-compatible server the tier tests run on 127.0.0.1: Versity's versitygw
(an operator's gateway with a posix backend: each object a file below a bucket directory),
built from the Go module proxy with ``go install`` into a cache outside the repository
(``~/.cache/rocketstore/s3server``; ``ROCKETSTORE_S3SERVER_CACHE`` moves it). Seconds when
cached. When it cannot be installed the reason is recorded in ``s3server.json`` and the S3
tests skip with it.

    python scripts/s3server/install.py          # install (once)
    python scripts/s3server/install.py --show   # print the recorded state
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

MODULE = "github.com/versity/versitygw/cmd/versitygw"
VERSION = "v1.8.0"


def cache_dir() -> Path:
    env = os.environ.get("ROCKETSTORE_S3SERVER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rocketstore" / "s3server"


def main() -> int:
    cache = cache_dir()
    state_path = cache / "s3server.json"
    if "--show" in sys.argv:
        print(state_path.read_text() if state_path.exists() else "{}")
        return 0
    binary = cache / "bin" / "versitygw"
    state = {"server": "versitygw", "version": VERSION, "binary": str(binary), "error": None}
    if binary.exists():
        try:
            old = json.loads(state_path.read_text())
        except (OSError, ValueError):
            old = {}
        if old.get("version") == VERSION and not old.get("error"):
            return 0
    cache.mkdir(parents=True, exist_ok=True)
    # tests started beside this build (make test) wait while the state says pending
    state_path.write_text(json.dumps(dict(state, pending=True, pid=os.getpid()), indent=2))
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        state["error"] = "no Go toolchain to build versitygw (go install) with"
    else:
        print(f"s3server: go install {MODULE}@{VERSION} (minutes, once)", file=sys.stderr)
        env = dict(os.environ, GOBIN=str(cache / "bin"), GOFLAGS="-mod=mod")
        try:
            r = subprocess.run([go, "install", f"{MODULE}@{VERSION}"], env=env, cwd=str(cache),
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0 or not binary.exists():
                state["error"] = f"go install {MODULE}@{VERSION} failed: {r.stderr.strip()[-800:]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            state["error"] = f"go install {MODULE}@{VERSION}: {e}"
    state_path.write_text(json.dumps(state, indent=2))
    if state["error"]:
        print(f"s3server: {state['error']} (the S3 tier tests will skip)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
