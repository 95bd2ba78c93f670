"""``ClientInstance``: what producers and consumers share — name-server routes and connections.

Theory of operation: a topic's route comes from the name server (GET_ROUTEINFO_BY_TOPIC) and is
cached for ``route_ttl_s``; each route names the master broker of each broker name and its
read/write queue counts, flattened here to a list of ``MessageQueue`` (topic, broker name,
queue id). Requests to brokers go through one ``ConnectionPool``; server-initiated requests
(NOTIFY_CONSUMER_IDS_CHANGED) are handed to whoever registered ``on_notify``.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import BrokerError
from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.jsonbody import load_json_text
from .transport import ConnectionPool, parse_addrs


@dataclass(frozen=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int


@dataclass
class TopicRoute:
    brokers: dict[str, str]  # broker name -> master address
    write_queues: list[MessageQueue]
    read_queues: list[MessageQueue]
    fetched_at: float
    # broker name -> where reads go: the master, else (master gone) its lowest-id slave, as
    # RocketMQ's findBrokerAddressInSubscribe falls back to any address of the broker
    readers: dict[str, str] | None = None


def _parse_route(topic: str, body: bytes) -> TopicRoute:
    data = load_json_text(body.decode("utf-8"))
    brokers = {}
    readers = {}
    for bd in data.get("brokerDatas") or []:
        addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
        if "0" in addrs:
            brokers[bd["brokerName"]] = addrs["0"]
        if addrs:
            readers[bd["brokerName"]] = addrs.get("0") or addrs[min(addrs, key=lambda k: int(k))]
    wq, rq = [], []
    for qd in sorted(data.get("queueDatas") or [], key=lambda q: q["brokerName"]):
        name = qd["brokerName"]
        perm = int(qd.get("perm", 6))
        if perm & 2 and name in brokers:
            wq += [MessageQueue(topic, name, i) for i in range(int(qd.get("writeQueueNums", 0)))]
        if perm & 4 and name in readers:
            rq += [MessageQueue(topic, name, i) for i in range(int(qd.get("readQueueNums", 0)))]
    return TopicRoute(brokers, wq, rq, time.monotonic(), readers)


class ClientInstance:
    def __init__(self, namesrv: str, *, route_ttl_s: float = 30.0, timeout_s: float = 5.0,
                 instance_name: str = "DEFAULT", credentials: Any = None) -> None:
        self.namesrv_addrs = parse_addrs(namesrv)
        self.route_ttl_s = route_ttl_s
        self.timeout_s = timeout_s
        self.client_id = f"{_local_ip()}@{os.getpid()}#{instance_name}#{id(self):x}"
        self.on_notify: list[Callable[[RemotingCommand], None]] = []
        # server-initiated requests with the broker address they came from (transaction checks)
        self.on_broker_request: list[Callable[[str, RemotingCommand], None]] = []
        self.credentials = credentials  # SessionCredentials: sign every request (ACL)
        self.pool = ConnectionPool(self._on_request,
                                   None if credentials is None else credentials.sign)
        self._routes: dict[str, TopicRoute] = {}

    def _on_request(self, cmd: RemotingCommand, addr: str = "") -> None:
        for fn in list(self.on_notify):
            fn(cmd)
        for fn2 in list(self.on_broker_request):
            fn2(addr, cmd)

    async def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        r = self._routes.get(topic)
        if r is not None and not refresh and time.monotonic() - r.fetched_at < self.route_ttl_s:
            return r
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                resp = await self.pool.invoke(addr, cmd, self.timeout_s)
            except (ConnectionError, TimeoutError) as exc:
                last = exc
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError(resp.code, resp.remark)
            r = _parse_route(topic, resp.body)
            self._routes[topic] = r
            return r
        stale = self._routes.get(topic)
        if stale is not None:  # name server down: keep using the last route we had
            return stale
        raise ConnectionError(f"no name server answered: {last}")

    async def broker_addr(self, mq: MessageQueue, *, read: bool = False) -> str:
        """The master of ``mq``'s broker; with ``read``, a slave when the master is gone."""
        r = await self.route(mq.topic)
        addr = (r.readers or {}).get(mq.broker_name) if read else r.brokers.get(mq.broker_name)
        if addr is None:
            r = await self.route(mq.topic, refresh=True)
            addr = (r.readers or {}).get(mq.broker_name) if read else r.brokers.get(mq.broker_name)
        if addr is None:
            raise ConnectionError(f"no master broker {mq.broker_name} for topic {mq.topic}")
        return addr

    async def invoke(self, addr: str, code: int, fields: dict | None = None, body: bytes = b"",
                     timeout: float | None = None,
                     ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields, body)
        return await self.pool.invoke_ok(addr, cmd, timeout or self.timeout_s, ok)

    async def all_brokers(self, topics: list[str]) -> set[str]:
        out: set[str] = set()
        for t in topics:
            try:
                out.update((await self.route(t)).brokers.values())
            except (BrokerError, ConnectionError):
                pass
        return out

    async def heartbeat(self, topics: list[str], producer_groups: list[str],
                        consumer_data: list[dict]) -> None:
        body = json.dumps({"clientID": self.client_id,
                           "producerDataSet": [{"groupName": g} for g in producer_groups],
                           "consumerDataSet": consumer_data}).encode()
        for addr in await self.all_brokers(topics):
            await self.invoke(addr, RequestCode.HEART_BEAT, None, body)

    def close(self) -> None:
        self.pool.close()


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


async def sleep_or(event: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``; True if ``event`` was set meanwhile."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
        return True
    except asyncio.TimeoutError:
        return False
