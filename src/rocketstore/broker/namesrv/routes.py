"""Name-server requests: routes (105), cluster info (106), topic list (206), the brokers'
REGISTER_BROKER (103) / UNREGISTER_BROKER (104), an operator's WIPE_WRITE_PERM_OF_BROKER (205) /
ADD_WRITE_PERM_OF_BROKER (327), the KV config (100-102, 219; see ``kvconfig``) and the name
server's own settings (318, 319; see ``settings``).

Theory of operation: a name server answers from a ``RouteTable`` — RocketMQ's
``RouteInfoManager`` reduced to what clients ask: which brokers (name → cluster, id → address)
serve a topic and with how many read/write queues. Brokers fill it by registering every 30 s
with their whole topic table (``RegisterBrokerBody`` JSON, as a Java 4.9 broker or
``rocketstore serve --namesrv`` sends it); a broker silent for ``BROKER_EXPIRY_S`` (120 s, as
RocketMQ) or unregistered drops out. A topic's queue data is replaced only when the broker's
``dataVersion`` changed or it registers for the first time, as RocketMQ does.

The name server of ``rocketstore serve`` also knows its own broker directly: that broker's
topics are always in the answers. A lookup never creates a topic: an unknown one is answered
TOPIC_NOT_EXIST ("No topic route info in name server for the topic"), as RocketMQ 4.9.7's name
server does; a producer then sends through ``TBW102``'s route and the broker creates the topic
on that first send when ``auto_create_topic_enable`` is on. ``rocketstore
namesrv`` runs the same handlers with no local broker. Route bodies are standard JSON (string
map keys), which every checked client parses.

``wipeWritePerm`` clears the write bit of every topic of one broker in the routes this name
server answers (``addWritePerm`` sets them to read+write), answering how many topics it touched
(``wipeTopicCount`` / ``addTopicCount``), as RocketMQ's ``RouteInfoManager``: clients stop
sending there while they still consume. The broker itself is unchanged; its next registration
with a changed topic table (a new ``dataVersion``) brings its own perms back. A registering
broker is answered with the ORDER_TOPIC_CONFIG namespace of the KV config, and with
``orderMessageEnable`` a route's ``orderTopicConf`` is that namespace's value for the topic.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ...remoting.codes import PERM_READ, PERM_WRITE
from ...remoting.jsonbody import load_json_text

log = logging.getLogger(__name__)
BROKER_EXPIRY_S = 120.0  # RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME
MASTER_ID = 0


def _queue_data(broker_name: str, tc: dict) -> dict:
    sys_flag = int(tc.get("topicSysFlag", 0) or 0)
    return {"brokerName": broker_name, "perm": int(tc.get("perm", 6)),
            "readQueueNums": int(tc.get("readQueueNums", 0)), "topicSysFlag": sys_flag,
            "topicSynFlag": sys_flag, "writeQueueNums": int(tc.get("writeQueueNums", 0))}


@dataclass
class _BrokerData:
    cluster: str
    addrs: dict[int, str] = field(default_factory=dict)


@dataclass
class _Live:
    last_update: float
    data_version: Any
    ha_server_addr: str = ""


class RouteTable:
    """What registered brokers told us: brokers, their addresses, their topics' queue data."""

    def __init__(self, expiry_s: float = BROKER_EXPIRY_S) -> None:
        self.expiry_s = expiry_s
        self._lock = threading.Lock()
        self._brokers: dict[str, _BrokerData] = {}  # broker name -> cluster, id -> address
        self._topics: dict[str, dict[str, dict]] = {}  # topic -> broker name -> queue data
        self._order: dict[str, str] = {}  # topic -> orderTopicConf of a broker
        self._live: dict[str, _Live] = {}  # broker address -> last registration
        self._channels: dict[Any, str] = {}  # connection a broker registered on -> its address

    def register(self, cluster: str, addr: str, name: str, broker_id: int,
                 topic_table: dict[str, dict] | None, data_version: Any,
                 ha_server_addr: str = "", channel: Any = None) -> None:
        with self._lock:
            if channel is not None:
                self._channels[channel] = addr
            bd = self._brokers.setdefault(name, _BrokerData(cluster))
            bd.cluster = cluster
            for bid, a in list(bd.addrs.items()):  # same address, new id: the old entry goes
                if a == addr and bid != broker_id:
                    del bd.addrs[bid]
            first = bd.addrs.get(broker_id) != addr
            bd.addrs[broker_id] = addr
            prev = self._live.get(addr)
            changed = first or prev is None or prev.data_version != data_version
            self._live[addr] = _Live(time.monotonic(), data_version, ha_server_addr)
            if broker_id == MASTER_ID and topic_table is not None and changed:
                for topic, tc in topic_table.items():
                    self._topics.setdefault(topic, {})[name] = _queue_data(name, tc)
                    if tc.get("order"):
                        self._order[topic] = f"{name}:{int(tc.get('writeQueueNums', 0))}"

    def channel_closed(self, channel: Any) -> str | None:
        """A broker's connection closed: forget that address at once (RocketMQ's
        ``onChannelDestroy``), so clients route to the slave left; the address, if any."""
        with self._lock:
            addr = self._channels.pop(channel, None)
            if addr is None or addr in self._channels.values():
                return None
            self._live.pop(addr, None)
            for name, bd in list(self._brokers.items()):
                for bid, a in list(bd.addrs.items()):
                    if a == addr:
                        del bd.addrs[bid]
                if not bd.addrs:
                    self._drop_broker(name)
        log.warning("broker %s connection closed: removed from the routes", addr)
        return addr

    def master_of(self, name: str) -> tuple[str, str] | None:
        """(haServerAddr, address) of broker ``name``'s live id-0 entry (a slave's answer)."""
        self.expire()
        with self._lock:
            bd = self._brokers.get(name)
            addr = bd.addrs.get(MASTER_ID) if bd is not None else None
            live = self._live.get(addr) if addr else None
            return (live.ha_server_addr, addr) if live is not None and addr else None

    def addrs_of(self, name: str) -> dict[int, str]:
        with self._lock:
            bd = self._brokers.get(name)
            return dict(bd.addrs) if bd is not None else {}

    def unregister(self, addr: str, name: str, broker_id: int) -> None:
        with self._lock:
            self._live.pop(addr, None)
            bd = self._brokers.get(name)
            if bd is not None and bd.addrs.get(broker_id) == addr:
                del bd.addrs[broker_id]
                if not bd.addrs:
                    self._drop_broker(name)

    def _drop_broker(self, name: str) -> None:
        self._brokers.pop(name, None)
        for topic in list(self._topics):
            self._topics[topic].pop(name, None)
            if not self._topics[topic]:
                del self._topics[topic]
                self._order.pop(topic, None)

    def operate_write_perm(self, name: str, wipe: bool) -> int:
        """RocketMQ's ``wipeWritePermOfBroker`` / ``addWritePermOfBroker``: clear the write bit
        of every topic of broker ``name`` (or set the topic's perm to read+write); how many
        topics it touched. A later registration with a new data version replaces them."""
        with self._lock:
            count = 0
            for queues in self._topics.values():
                qd = queues.get(name)
                if qd is not None:
                    qd["perm"] = (qd["perm"] & ~PERM_WRITE) if wipe else PERM_READ | PERM_WRITE
                    count += 1
            return count

    def expire(self) -> list[str]:
        """Forget brokers that did not register within ``expiry_s``; their addresses."""
        now = time.monotonic()
        gone = []
        with self._lock:
            for addr, live in list(self._live.items()):
                if now - live.last_update > self.expiry_s:
                    gone.append(addr)
                    del self._live[addr]
                    for name, bd in list(self._brokers.items()):
                        for bid, a in list(bd.addrs.items()):
                            if a == addr:
                                del bd.addrs[bid]
                        if not bd.addrs:
                            self._drop_broker(name)
        for addr in gone:
            log.warning("broker %s did not register for %.0f s: removed", addr, self.expiry_s)
        return gone

    def route(self, topic: str) -> tuple[list[dict], list[dict], str | None]:
        """(brokerDatas, queueDatas, orderTopicConf) of ``topic`` among registered brokers."""
        self.expire()
        with self._lock:
            qds = [dict(q) for q in (self._topics.get(topic) or {}).values()]
            bds = [{"brokerAddrs": {str(k): v for k, v in self._brokers[q["brokerName"]].addrs.items()},
                    "brokerName": q["brokerName"], "cluster": self._brokers[q["brokerName"]].cluster}
                   for q in qds if q["brokerName"] in self._brokers]
            return bds, qds, self._order.get(topic)

    def brokers(self) -> dict[str, tuple[str, dict[int, str]]]:
        self.expire()
        with self._lock:
            return {n: (b.cluster, dict(b.addrs)) for n, b in self._brokers.items()}

    def topics_of(self, names: set[str]) -> set[str]:
        """Topics any of the brokers ``names`` serves."""
        self.expire()
        with self._lock:
            return {t for t, queues in self._topics.items() if names & queues.keys()}

    def delete_topic(self, topic: str, names: set[str] | None = None) -> None:
        """Forget ``topic`` (DELETE_TOPIC_IN_NAMESRV): on the brokers ``names`` (a cluster's),
        or everywhere."""
        with self._lock:
            queues = self._topics.get(topic)
            if queues is None:
                return
            for name in list(queues) if names is None else names:
                queues.pop(name, None)
            if not queues:
                del self._topics[topic]
                self._order.pop(topic, None)

    def topic_names(self) -> set[str]:
        self.expire()
        with self._lock:
            return set(self._topics)


@dataclass
class LocalBroker:
    """The broker beside the name server of ``rocketstore serve``."""
    config: Any  # BrokerConfig
    store_config: Any  # StoreConfig
    topics: Any  # TopicConfigManager
    # brokerIP2:haListenPort of the local broker, what a slave registering here is told
    ha_server_addr: Callable[[], str | None] | None = None


class LocalRoutePerms:
    """wipeWritePerm / addWritePerm on the broker ``rocketstore serve`` runs beside its name
    server: the perms its routes carry instead of the topic table's, until that table changes
    — as a registering broker's new data version replaces them at a RocketMQ name server."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._perms: dict[str, int] = {}

    def operate(self, topics: Any, wipe: bool) -> int:
        self._version = topics.data_version
        for tc in topics.topics():
            perm = self.perm(topics, tc.topic_name, tc.perm)
            self._perms[tc.topic_name] = (perm & ~PERM_WRITE) if wipe else PERM_READ | PERM_WRITE
        return len(self._perms)

    def perm(self, topics: Any, topic: str, perm: int) -> int:
        if self._version != topics.data_version:
            self._perms.clear()
            self._version = None
            return perm
        return self._perms.get(topic, perm)


def local_broker_addrs(local: LocalBroker, table: RouteTable | None) -> dict[str, str]:
    """The local broker's address under its id, with the slaves registered under its name."""
    cfg = local.config
    addrs = {str(k): v for k, v in (table.addrs_of(cfg.broker_name) if table is not None else {}).items()}
    addrs[str(getattr(cfg, "broker_id", 0))] = cfg.broker_addr
    return dict(sorted(addrs.items(), key=lambda kv: int(kv[0])))


def _local_route(local: LocalBroker, tc: Any, perms: LocalRoutePerms | None,
                 table: RouteTable | None = None) -> tuple[dict, dict]:
    cfg = local.config
    bd = {"brokerAddrs": local_broker_addrs(local, table), "brokerName": cfg.broker_name,
          "cluster": cfg.cluster_name}
    qd = _queue_data(cfg.broker_name, tc.to_json())
    if perms is not None:
        qd["perm"] = perms.perm(local.topics, tc.topic_name, qd["perm"])
    return bd, qd


def route_body(local: LocalBroker | None, tc: Any, table: RouteTable | None = None,
               topic: str | None = None, perms: LocalRoutePerms | None = None,
               order_conf: Callable[[str], str | None] | None = None) -> bytes:
    """The TopicRouteData JSON of a topic: the local broker's part (``tc``) and the table's.
    ``order_conf`` (the name server's ORDER_TOPIC_CONFIG, with ``orderMessageEnable``) decides
    ``orderTopicConf`` when given, as RocketMQ's name server does."""
    topic = topic or tc.topic_name
    bds, qds, order = table.route(topic) if table is not None else ([], [], None)
    if local is not None and tc is not None:
        name = local.config.broker_name
        bds = [b for b in bds if b["brokerName"] != name]
        qds = [q for q in qds if q["brokerName"] != name]
        bd, qd = _local_route(local, tc, perms, table)
        bds.insert(0, bd)
        qds.insert(0, qd)
        if tc.order:
            order = f"{name}:{tc.write_queue_nums}"
    if order_conf is not None:
        order = order_conf(topic)
    route: dict[str, Any] = {"brokerDatas": bds, "filterServerTable": {}, "queueDatas": qds}
    if order:
        route["orderTopicConf"] = order
    return json.dumps(route, separators=(",", ":")).encode("utf-8")


def parse_register_body(body: bytes, compressed: bool = False) -> tuple[dict[str, dict], Any]:
    """``RegisterBrokerBody`` → (topic config table, data version). Raises ``ValueError``."""
    if compressed:
        raise ValueError("compressed REGISTER_BROKER bodies are not supported: set "
                         "compressedRegister=false on the broker")
    if not body:
        return {}, {"counter": 0, "timestamp": 0}
    data = load_json_text(body.decode("utf-8"))
    wrapper = (data or {}).get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise ValueError("topicConfigTable is not an object")
    out = {}
    for name, tc in table.items():
        if isinstance(tc, dict):
            out[str(tc.get("topicName") or name)] = tc
    dv = wrapper.get("dataVersion") or {}
    return out, json.dumps(dv, sort_keys=True)


