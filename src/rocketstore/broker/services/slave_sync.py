"""``SlaveSynchronize``: a slave's periodic copy of its master's configuration (RocketMQ
4.9.7's ``SlaveSynchronize``).

Theory of operation. 3 s after start, then every 10 s, while the master's remoting address is
known (``master_addr()``: from the name server's register answer, else derived from
``haMasterAddress``) and is not this broker's own, four requests go out, each on a short-lived
connection with a 3 s timeout and no header: GET_ALL_TOPIC_CONFIG (21) to the master's fast
port (listenPort - 2, as RocketMQ's slave does, falling back to the main port),
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45) and GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201). Topic and subscription tables are replaced when the master's data version changed,
consumer offsets are merged (the master's entries win), delay offsets are taken as they are;
each is persisted. A failed step is logged and the next one still runs.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Awaitable, Callable

from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.connection import CLOSED, NEED_DATA, RemotingConnection
from ...remoting.jsonbody import load_json_text
from ..eventloop import cancel_and_wait

log = logging.getLogger(__name__)

SYNC_FIRST_S = 3.0
SYNC_PERIOD_S = 10.0
SYNC_TIMEOUT_S = 3.0


def fast_addr(addr: str) -> str:
    """RocketMQ's VIP channel address: the same host, port - 2."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


async def call_once(addr: str, code: int, timeout: float = SYNC_TIMEOUT_S) -> RemotingCommand:
    """One request without header or body on a new connection; the response."""
    host, _, port = addr.rpartition(":")
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    codec = RemotingConnection()
    try:
        writer.write(codec.send(RemotingCommand.request(code, {}, language="JAVA")))

        async def answer() -> RemotingCommand:
            while True:
                cmd = codec.next_command()
                if cmd is CLOSED:
                    raise ConnectionError(f"{addr} closed the connection")
                if cmd is not NEED_DATA:
                    return cmd  # type: ignore[return-value]
                data = await reader.read(1 << 20)
                if not data:
                    raise ConnectionError(f"{addr} closed the connection")
                codec.receive_data(data)
        return await asyncio.wait_for(answer(), timeout)
    finally:
        writer.close()


class SlaveSynchronize:
    def __init__(self, *, own_addr: Callable[[], str], master_addr: Callable[[], str | None],
                 topics: Any, offsets: Any, delay_offsets: Any, subgroups: Any,
                 run: Callable[..., Awaitable[Any]]) -> None:
        self.own_addr = own_addr
        self.master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.subgroups = subgroups
        self.run = run
        self._task: asyncio.Task | None = None
        self._topic_version: Any = None
        self._group_version: Any = None
        self.last_sync_ms = 0
        self.last_error: str | None = None
        self.runs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="slave-synchronize")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        await asyncio.sleep(SYNC_FIRST_S)
        while True:
            try:
                await self.sync_all()
            except Exception:  # noqa: BLE001 - logged; the next period tries again
                log.exception("SlaveSynchronize failed")
            await asyncio.sleep(SYNC_PERIOD_S)

    async def sync_all(self) -> bool:
        """One round of the four copies; True when all four succeeded."""
        addr = self.master_addr()
        if not addr or addr == self.own_addr():
            return False
        ok = 0
        for name, step in (("topic config", self._topics), ("consumer offsets", self._offsets),
                           ("delay offsets", self._delay_offsets),
                           ("subscription groups", self._groups)):
            try:
                await step(addr)
                ok += 1
            except (OSError, asyncio.TimeoutError, ConnectionError, ValueError, RuntimeError) as exc:
                self.last_error = f"{name}: {exc}"
                log.warning("SlaveSynchronize %s from %s failed: %s", name, addr, exc)
        self.runs += 1
        if ok == 4:
            self.last_sync_ms = int(time.time() * 1000)
            self.last_error = None
        return ok == 4

    async def _json(self, addr: str, code: int) -> dict:
        resp = await call_once(addr, code)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"request {code} answered {resp.code}: {resp.remark}")
        data = load_json_text((resp.body or b"{}").decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"request {code}: the answer is not a JSON object")
        return data

    async def _topics(self, addr: str) -> None:
        try:
            data = await self._json(fast_addr(addr), RequestCode.GET_ALL_TOPIC_CONFIG)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            data = await self._json(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        version = _version(data)
        if version != self._topic_version:
            await self.run(self.topics.replace_all, data.get("topicConfigTable") or {})
            self._topic_version = version

    async def _offsets(self, addr: str) -> None:
        data = await self._json(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table = {k: {int(q): int(o) for q, o in (v or {}).items()}
                 for k, v in (data.get("offsetTable") or {}).items()}
        self.offsets.merge(table)
        await self.run(self.offsets.persist)

    async def _delay_offsets(self, addr: str) -> None:
        data = await self._json(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        await self.run(self.delay_offsets.replace_all, table)

    async def _groups(self, addr: str) -> None:
        data = await self._json(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        version = _version(data)
        if version != self._group_version:
            await self.run(self.subgroups.replace_all, data)
            self._group_version = version

    def status(self) -> dict:
        return {"master": self.master_addr(), "runs": self.runs, "last_sync_ms": self.last_sync_ms,
                "last_error": self.last_error}


def _version(data: dict) -> str:
    return json.dumps(data.get("dataVersion"), sort_keys=True)


__all__ = ["SlaveSynchronize", "call_once", "fast_addr"]
