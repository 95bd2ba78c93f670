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
