"""``rocketstore serve`` runs on uvloop when it is installed and on asyncio's loop otherwise (or
when ``ROCKETSTORE_EVENT_LOOP=asyncio``); the broker works the same on both."""
from __future__ import annotations

import asyncio
import importlib.util

import pytest

from rocketstore.broker import eventloop
from rocketstore.client import Producer, PullConsumer

from .conftest import start_server


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_picks_uvloop_when_installed_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("ROCKETSTORE_EVENT_LOOP", raising=False)
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    assert eventloop.loop_name() == ("uvloop" if has_uvloop else "asyncio")
    assert eventloop.run(_loop_module()) == eventloop.loop_name()
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", "asyncio")
    assert eventloop.loop_name() == "asyncio"
    assert eventloop.run(_loop_module()) == "asyncio"


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_broker_sends_and_pulls_on_either_loop(tmp_path, monkeypatch, loop):
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed (pip install rocketstore[fast])")
    monkeypatch.setenv("ROCKETSTORE_EVENT_LOOP", loop)
    srv = start_server(str(tmp_path / "store"))
    try:
        with Producer("PG", srv.namesrv) as p:
            sent = [p.send("LoopTopic", b"m%d" % i, queue_id=0) for i in range(50)]
            batch = p.send_batch("LoopTopic", [b"b0", b"b1"], queue_id=0)
        assert [s.queue_offset for s in sent] == list(range(50)) and batch.queue_offset == 50
        c = PullConsumer("CG", srv.namesrv)
        got = []
        off = 0
        while len(got) < 52:
            r = c.pull("LoopTopic", 0, off, 32, suspend_ms=2000)
            got += [m.body for m in r.messages]
            off = r.next_begin_offset
        assert got == [b"m%d" % i for i in range(50)] + [b"b0", b"b1"]
    finally:
        assert srv.stop() == 0, srv.log()


_GC_PROBE = ("import gc, json; from rocketstore.broker import eventloop; "
             "before = gc.get_freeze_count(); set_to = eventloop.tune_gc(); "
             "print(json.dumps([set_to, list(gc.get_threshold()), before, gc.get_freeze_count()]))")


@pytest.mark.parametrize("env, want", [
    (None, [50_000, 50, 100]),
    ("20000,10,10", [20_000, 10, 10]),
    ("not,a,number", [50_000, 50, 100]),  # a warning, and the default
    ("python", None),
])
def test_a_broker_process_sets_its_collector(env, want):
    """``tune_gc`` (run by ``serve`` and by each protocol worker before its loop): the
    thresholds of ``ROCKETSTORE_GC_THRESHOLD`` or the default, what exists at start frozen out
    of the collector's way; "python" leaves the interpreter as it was. In a process of its own,
    as a broker is."""
    import json
    import os
    import subprocess
    import sys
    e = {k: v for k, v in os.environ.items() if k != "ROCKETSTORE_GC_THRESHOLD"}
    if env is not None:
        e["ROCKETSTORE_GC_THRESHOLD"] = env
    p = subprocess.run([sys.executable, "-c", _GC_PROBE], env=e, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    set_to, threshold, before, after = json.loads(p.stdout)
    assert set_to == want
    if want is None:
        assert threshold == [700, 10, 10] and after == before == 0
    else:
        assert threshold == want and after > before == 0
    assert ("ROCKETSTORE_GC_THRESHOLD='not,a,number'" in p.stderr) == (env == "not,a,number")
