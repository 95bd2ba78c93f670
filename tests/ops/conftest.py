"""A headless Chromium for the console tests: Debian's package, driven by Playwright.

On a fresh machine the first run installs ``chromium`` with apt-get (when it runs as root);
where that is not possible the browser tests skip and say why. Playwright's own browser
download is never used: the tests launch ``/usr/bin/chromium`` through ``executable_path``.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CHROMIUM = os.environ.get("ROCKETSTORE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def ensure_chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    why = f"no Chromium at {CHROMIUM}"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
            r = subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"],
                               env=env, capture_output=True, text=True, timeout=1200)
            if r.returncode != 0:
                why += f"; apt-get install chromium failed: {r.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            why += "; apt-get install chromium timed out"
    else:
        why += " and apt-get cannot install it here (not root)"
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module. Playwright's sync API keeps an event loop running in this
    thread while it is open, so it must be closed before other modules' ``asyncio.run``."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    path = ensure_chromium()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
