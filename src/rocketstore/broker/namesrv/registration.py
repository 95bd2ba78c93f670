"""The broker's side of a cluster: REGISTER_BROKER at outside name servers, UNREGISTER_BROKER at
shutdown (``rocketstore serve --namesrv "h1:9876;h2:9876"``).

Theory of operation: as RocketMQ's ``BrokerController.registerBrokerAll``, the broker sends every
name server its whole topic table (``RegisterBrokerBody`` JSON: ``topicConfigSerializeWrapper``
with ``topicConfigTable`` and ``dataVersion``, plus an empty ``filterServerList``) every
``register_name_server_period_ms`` (30 s), and at once when its topic table changes (a topic
created by a send or an admin request), checked once a second. The body's CRC32 goes in
``bodyCrc32``; the answer's ``kvTable`` (the name server's ORDER_TOPIC_CONFIG) marks exactly
those topics ``order``, as RocketMQ's broker does; the data version's counter moves whenever the table's content does, which is
what makes a name server (ours or RocketMQ's) take new queue data. A RocketMQ name server
forgets a broker whose connection closes, so each name server keeps one long-lived connection
here; a lost one is reopened at the next attempt. An unreachable name server is logged and
retried — it never stops the broker. ``stop()`` unregisters from every name server (best effort,
bounded by a short timeout).

This module speaks remoting through the sans-IO codec directly (the broker does not use the
client package).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import zlib
from typing import Any, Callable

from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...remoting.connection import CLOSED, NEED_DATA, RemotingConnection
from ...remoting.jsonbody import load_json_text
from ..eventloop import cancel_and_wait

log = logging.getLogger(__name__)
RETRY_LOST_S = 5.0  # how soon a name server whose connection dropped is tried again


def parse_namesrv_addrs(spec: str) -> list[str]:
    """``"h1:9876;h2:9876"`` (RocketMQ's ``namesrvAddr``; commas also accepted) → addresses."""
    out = []
    for part in spec.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"name server address {part!r}: want HOST:PORT")
        out.append(part)
    if not out:
        raise ValueError("no name server address given")
    return out


_LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}


def other_name_servers(addrs: list[str], host: str, port: int | None) -> list[str]:
    """``addrs`` without the broker's own embedded name server (``host:port``), which knows
    its broker directly and so needs no REGISTER_BROKER."""
    if port is None:
        return list(addrs)
    own = {host, *(_LOOPBACK if host in _LOOPBACK else ())}
    out = []
    for a in addrs:
        h, _, p = a.rpartition(":")
        if not (int(p) == port and h in own):
            out.append(a)
    return out


class _Channel:
    """One connection to one name server; requests answered in any order (matched by opaque)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.codec = RemotingConnection()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.writer is not None and not self.writer.is_closing()

    async def open(self, timeout: float) -> None:
        host, _, port = self.addr.rpartition(":")
        self.codec = RemotingConnection()  # nothing half-read survives a reconnect
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port)), timeout)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        assert self.reader is not None
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.codec.receive_data(data)
                while True:
                    cmd = self.codec.next_command()
                    if cmd is NEED_DATA or cmd is CLOSED:
                        break
                    assert isinstance(cmd, RemotingCommand)
                    fut = self._pending.pop(cmd.opaque, None) if cmd.is_response else None
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
        except Exception as exc:  # protocol error or reset: fail whoever waits
            log.debug("name server %s connection ended: %s", self.addr, exc)
        finally:
            self.close()

    async def invoke(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if not self.alive:
            await self.open(timeout)
        assert self.writer is not None
        fut = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        _sign_from_env(cmd)  # a name server with namesrvAclEnable checks registrations
        self.writer.write(self.codec.send(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(cmd.opaque, None)

    def close(self) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"name server {self.addr} closed the connection"))
        self._pending.clear()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._task = None


def _sign_from_env(cmd: RemotingCommand) -> None:
    """Sign with ``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY`` when both are set."""
    import os

    from ...remoting.signing import sign_request

    ak, sk = os.environ.get("ROCKETMQ_ACCESS_KEY"), os.environ.get("ROCKETMQ_SECRET_KEY")
    if ak and sk:
        sign_request(cmd, ak, sk)


def register_body(topic_table: dict[str, dict], counter: int, timestamp_ms: int) -> bytes:
    """``RegisterBrokerBody`` as RocketMQ's broker encodes it uncompressed (JSON)."""
    wrapper = {"dataVersion": {"counter": counter, "timestamp": timestamp_ms},
               "topicConfigTable": topic_table}
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper},
                      separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class NameServerRegistration:
    """Keeps one broker registered at a list of name servers (a small service: start/stop)."""

    def __init__(self, namesrv_addrs: list[str], *, cluster_name: str, broker_name: str,
                 broker_addr: Callable[[], str], topic_table: Callable[[], dict[str, dict]],
                 broker_id: int = 0, period_s: float = 30.0, check_s: float = 1.0,
                 timeout_s: float = 3.0,
                 order_topics: Callable[[set[str]], Any] | None = None,
                 ha_server_addr: Callable[[], str] | None = None,
                 on_master: Callable[[str | None, str | None], Any] | None = None) -> None:
        self.addrs = list(namesrv_addrs)
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.topic_table = topic_table
        self.broker_id = broker_id
        self.period_s = period_s
        self.check_s = check_s
        self.timeout_s = timeout_s
        self.order_topics = order_topics  # gets the name server's ORDER_TOPIC_CONFIG topics
        self.ha_server_addr = ha_server_addr  # brokerIP2:haListenPort, registered as haServerAddr
        # a slave: (master's haServerAddr, master's broker address) of each register answer
        self.on_master = on_master
        self._channels = {a: _Channel(a) for a in self.addrs}
        self._task: asyncio.Task | None = None
        self._counter = 0
        self._digest = b""
        self._started_ms = int(time.time() * 1000)
        self.last_ok: dict[str, float] = {}  # name server -> monotonic time of last success

    def _header(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "brokerAddr": self.broker_addr(),
                "clusterName": self.cluster_name, "brokerId": self.broker_id}

    def _body(self) -> bytes:
        table = self.topic_table()
        digest = hashlib.sha1(json.dumps(table, sort_keys=True).encode()).digest()
        if digest != self._digest:
            self._digest = digest
            self._counter += 1
        return register_body(table, self._counter, self._started_ms)

    async def register_all(self) -> int:
        """Register at every name server now; how many accepted."""
        body = self._body()
        ha_addr = self.ha_server_addr() if self.ha_server_addr is not None else ""
        header = dict(self._header(), haServerAddr=ha_addr, compressed=False,
                      bodyCrc32=zlib.crc32(body) & 0x7FFFFFFF)
        ok = 0
        for addr, ch in self._channels.items():
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body,
                                          language="JAVA")
            try:
                resp = await ch.invoke(cmd, self.timeout_s)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                ch.close()
                log.warning("register broker %s at name server %s failed: %s",
                            self.broker_name, addr, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused broker %s: %s (%s)", addr, self.broker_name,
                            resp.remark, resp.code)
                continue
            self.last_ok[addr] = time.monotonic()
            ok += 1
            self._apply_kv_table(addr, resp.body)
            if self.on_master is not None and self.broker_id != 0:
                self.on_master(resp.ext_fields.get("haServerAddr") or None,
                               resp.ext_fields.get("masterAddr") or None)
        return ok

    async def route_queue_datas(self, topic: str) -> list[dict] | None:
        """The topic's ``queueDatas`` at the first name server that answers (RocketMQ 5's
        ``TopicRouteInfoManager``, which QUERY_ASSIGNMENT reads); None when none knows it."""
        for addr, ch in self._channels.items():
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                          language="JAVA")
            try:
                resp = await ch.invoke(cmd, self.timeout_s)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                ch.close()
                log.warning("route of %s from name server %s failed: %s", topic, addr, exc)
                continue
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                return None
            return list(load_json_text(resp.body.decode("utf-8")).get("queueDatas") or [])
        return None

    def _apply_kv_table(self, addr: str, body: bytes | None) -> None:
        """RegisterBrokerResult.kvTable (the ORDER_TOPIC_CONFIG namespace) → order topics, as
        RocketMQ's ``updateOrderTopicConfig``; no body: the name server has no such namespace."""
        if not body or self.order_topics is None:
            return
        try:
            table = load_json_text(body.decode("utf-8")).get("table")
        except (ValueError, UnicodeDecodeError, AttributeError) as exc:
            log.warning("name server %s: bad kvTable in the register answer: %s", addr, exc)
            return
        if isinstance(table, dict):
            self.order_topics(set(table))

    async def _run(self) -> None:
        next_full = time.monotonic() + self.period_s
        last_try = time.monotonic()
        while True:
            now = time.monotonic()
            table = self.topic_table()
            digest = hashlib.sha1(json.dumps(table, sort_keys=True).encode()).digest()
            # a lost connection is retried every few seconds, not every check
            lost = (any(not ch.alive for ch in self._channels.values())
                    and now - last_try >= RETRY_LOST_S)
            if now >= next_full or digest != self._digest or lost:
                last_try = now
                try:
                    await self.register_all()
                except Exception:
                    log.exception("registering at the name servers failed")
                next_full = time.monotonic() + self.period_s
            await asyncio.sleep(self.check_s)

    async def start(self) -> None:
        """Register once (so clients find the broker as soon as ``serve`` says ready), then
        keep registering in the background."""
        await self.register_all()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="register-broker")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        for addr, ch in self._channels.items():
            cmd = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, self._header(),
                                          language="JAVA")
            try:
                await ch.invoke(cmd, min(self.timeout_s, 2.0))
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                log.warning("unregister broker %s at name server %s failed: %s",
                            self.broker_name, addr, exc)
            ch.close()
