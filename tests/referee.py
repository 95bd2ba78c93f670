"""RocketMQ's own releases, the referee of the Java-backed tests.

``make test`` runs ``scripts/referee/resolve.py`` first: it resolves RocketMQ 4.9.7, 5.3.3 and the
newest 5.x from Maven Central into a cache outside the repository and writes launchers
(``namesrv``, ``broker``, ``mqadmin``, ``producer-bench``, ``controller``, ``proxy``, ...) into one
*home* per version. This module finds those homes for the tests; it never downloads anything.

An environment variable wins over the cache (``ROCKETMQ_HOME`` may name a build of
``shared/tools/rocketmq-java/build.sh``, the offline alternative). A test skips only when the
referee could not be resolved at set-up, and then with the reason set-up recorded.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

#: version -> the environment variable naming its home (as scripts/referee/resolve.py writes them)
ENV = {"4.9.7": "ROCKETMQ_HOME", "5.3.3": "ROCKETMQ5_HOME", "5.5.0": "ROCKETMQ5_NEWEST_HOME"}
V4, V5, V5_NEWEST = "4.9.7", "5.3.3", "5.5.0"


def cache_dir() -> Path:
    env = os.environ.get("ROCKETSTORE_REFEREE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rocketstore" / "referee"


def state() -> dict:
    """What set-up resolved (``referee.json``), or why it could not."""
    path = cache_dir() / "referee.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"homes": {}, "env": {}, "error": f"set-up has not resolved RocketMQ's jars ({path} is "
                "missing): run `make test`, or `python scripts/referee/resolve.py`"}


def export_env() -> None:
    """Point ROCKETMQ_HOME, ROCKETMQ5_HOME and ROCKETMQ5_NEWEST_HOME at the resolved homes,
    leaving any the user set alone (called once, from tests/conftest.py)."""
    for var, home in state().get("env", {}).items():
        if not os.environ.get(var) and os.path.exists(os.path.join(home, "broker")):
            os.environ[var] = home


def reason(version: str) -> str:
    err = state().get("error")
    var = ENV[version]
    return (f"RocketMQ {version} not available ({var} unset): "
            + (err or "set-up did not resolve this version"))


def home(version: str = V4) -> str:
    """The home of RocketMQ ``version``'s launchers; skips the test, with set-up's reason,
    when it is absent."""
    h = os.environ.get(ENV[version], "")
    if not h or not os.path.exists(os.path.join(h, "namesrv")):
        pytest.skip(reason(version))
    return h


def available(version: str = V4) -> bool:
    h = os.environ.get(ENV[version], "")
    return bool(h) and os.path.exists(os.path.join(h, "namesrv"))


def skip_unless(version: str = V4) -> pytest.MarkDecorator:
    """A module- or test-level mark: ``pytestmark = referee.skip_unless(referee.V4)``."""
    return pytest.mark.skipif(not available(version), reason=reason(version))
