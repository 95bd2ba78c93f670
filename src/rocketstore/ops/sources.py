"""Where the console's numbers come from: ``LocalSource`` reads one broker's state in process
(``serve --console``) or a store directory (``console --store``); ``RemoteSource`` reads a
running cluster — ours, Apache RocketMQ's, or both — through the admin requests ``mqadmin``
sends (``console --namesrv``).

Theory of operation: the console's pages ask a source for plain data — an overview dict, topic
and group views, message search results, a TPS series — and never touch a store or a manager
themselves. A source is called from the console's worker threads; everything it reads is
thread-safe and read-only.
"""
from __future__ import annotations

from typing import Any

from . import views
from .state import OpsState


def _group_counts(names: list[str]) -> dict[str, int]:
    system = sum(1 for g in names if views.is_system_group(g))
    return {"groups": len(names) - system, "system_groups": system}


class LocalSource:
    """Views over an ``OpsState``: a running broker, or a store directory read-only."""

    def __init__(self, state: OpsState) -> None:
        self.state = state

    # -- identity (the page header) ---------------------------------------------------------
    @property
    def cluster_name(self) -> str:
        return self.state.cluster_name

    @property
    def title(self) -> str:
        return self.state.broker_name

    @property
    def address(self) -> str:
        return self.state.broker_addr

    @property
    def read_only(self) -> bool:
        return self.state.read_only

    @property
    def live(self) -> bool:
        return self.state.tps is not None

    def _store(self) -> Any:
        store = self.state.store()
        if store is None:
            raise RuntimeError("the store is not open (the broker is starting or stopping)")
        return store

    # -- pages ------------------------------------------------------------------------------
    def overview(self) -> dict:
        st, store = self.state, self._store()
        rt = views.store_runtime(store, st.store_config)
        tvs = self.topics()
        tps = st.tps.series() if st.tps is not None else None
        last = {k: (v[-1] if v else 0.0) for k, v in tps.items()} if tps else {}
        totals = st.tps.totals() if st.tps is not None else {}  # now, not at the last sample
        info = None
        if st.broker_config is not None:
            from ..broker.admin.views import runtime_info
            info = runtime_info(store, st.store_config, st.broker_config, st.broker_stats)
        broker = {"name": st.broker_name, "addr": st.broker_addr or "-",
                  "id": getattr(st.broker_config, "broker_id", 0) or 0,
                  "version": (info or {}).get("brokerVersionDesc", "-"),
                  "put_tps": last.get("put_tps") if st.tps is not None else None,
                  "get_tps": last.get("get_tps") if st.tps is not None else None,
                  "put_total": totals.get("put_msgs"), "get_total": totals.get("get_msgs"),
                  "boot_ms": st.started_ms if not st.read_only else 0,
                  "disk_ratio": rt.paths[0].disk_used_ratio if rt.paths else None}
        ha = getattr(store, "ha_status", None)
        replication = ha() if ha is not None else None
        if replication is not None:
            broker["role"] = replication["role"]
            if replication.get("controller_mode"):
                broker["epoch"] = replication.get("epoch")
        return {"cluster": st.cluster_name, "namesrv": st.namesrv_addr, "brokers": [broker],
                "replication": replication,
                "store": st.store_config.store_path_root_dir, "read_only": st.read_only,
                "topics": sum(1 for t in tvs if not t.system),
                "system_topics": sum(1 for t in tvs if t.system),
                "messages": sum(t.messages for t in tvs if not t.system),
                **_group_counts(self.group_names()),
                "commitlog_bytes": rt.max_phy_offset - rt.min_phy_offset,
                "min_phy_offset": rt.min_phy_offset, "max_phy_offset": rt.max_phy_offset,
                "dispatch_behind_bytes": rt.dispatch_behind_bytes,
                "dispatch_behind_ms": rt.dispatch_behind_ms,
                "flush_behind_bytes": rt.flush_behind_bytes, "flush_behind_ms": rt.flush_behind_ms,
                "connections": st.connections() if not st.read_only else None,
                "workers": st.workers() if not st.read_only else None,
                "last_store_timestamp": rt.last_store_timestamp, "paths": rt.paths,
                "runtime_info": {st.broker_name: info} if info else {}, "live": self.live,
                "timer": _timer_overview(store)}

    def topic_names(self) -> list[str]:
        return views.topic_names(self._store(), self.state.topics)

    def topics(self) -> list[views.TopicView]:
        tvs = views.topic_views(self._store(), self.state.topics, self.state.broker_name)
        stats = self.state.broker_stats
        if stats is not None:
            for tv in tvs:
                tv.put_tps = stats.topic_put_tps(tv.topic)
        return tvs

    def topic(self, name: str) -> views.TopicView | None:
        store = self._store()
        if name not in views.topic_names(store, self.state.topics):
            return None
        return views.topic_view(store, self.state.topics, name, self.state.broker_name)

    def group_names(self) -> list[str]:
        st = self.state
        return views.settled(views.group_names, st.offsets, st.consumers, st.subgroups)

    def groups(self) -> list[views.GroupView]:
        st = self.state
        return views.settled(views.group_views, self._store(), st.topics, st.offsets,
                             st.consumers, st.subgroups, broker_name=st.broker_name,
                             stats=st.broker_stats)

    def group(self, name: str) -> views.GroupView | None:
        if name not in self.group_names():
            return None
        st = self.state
        return views.settled(views.group_view, self._store(), st.topics, st.offsets,
                             st.consumers, name, broker_name=st.broker_name,
                             stats=st.broker_stats)

    # -- messages ---------------------------------------------------------------------------
    def find_by_key(self, topic: str, key: str, max_num: int, begin: int,
                    end: int | None) -> list[views.MessageView]:
        return views.find_by_key(self._store(), topic, key, max_num, begin, end)

    def find_by_id(self, msg_id: str, topic: str | None) -> list[views.MessageView]:
        return views.find_by_id(self._store(), msg_id, topic)

    def find_by_time(self, topic: str, begin: int, end: int,
                     max_num: int) -> list[views.MessageView]:
        return views.find_by_time(self._store(), topic, begin, end, max_num)

    def find_by_offset(self, offset: int) -> list[views.MessageView]:
        return views.find_by_offset(self._store(), offset)

    def body(self, msg_id: str) -> bytes | None:
        """The whole body of the message an offset id names (None if there is none)."""
        m = self._store().view_message_by_id(msg_id.strip())
        return m.body if m is not None and m.msg_id.upper() == msg_id.strip().upper() else None

    def tier(self) -> dict | None:
        """The tiered store (``views.tier_view``); None without one."""
        return views.tier_view(self._store())

    # -- live -------------------------------------------------------------------------------
    def tps(self, since: float = 0.0) -> dict | None:
        return self.state.tps.series(since) if self.state.tps is not None else None


TOOLS_GROUP = "TOOLS_CONSUMER"  # what RocketMQ's own tools read with (MixAll.TOOLS_CONSUMER_GROUP)


def _timer_overview(store: Any) -> dict | None:
    timer = getattr(store, "timer", None)
    if timer is None:
        return None
    st = timer.stats()
    return {**st, "waiting": sum(v for v in st["topics"].values() if v > 0),
            **timer.distribution()}


def _first_rate(value: str | None) -> float:
    """The first field of RocketMQ's "10s 60s 600s" rate string."""
    try:
        return float((value or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _human_bytes(value: str | None) -> int:
    """RocketMQ's ``humanReadableByteCount`` back to bytes ("1.5 KiB" -> 1536), roughly."""
    parts = (value or "").split()
    if len(parts) != 2:
        return 0
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    try:
        return int(float(parts[0]) * units.get(parts[1], 1))
    except ValueError:
        return 0


class RemoteSource:
    """Views of a running cluster through RocketMQ's admin requests (``client.admin``).

    Works against ``rocketstore serve`` and against Apache RocketMQ's own name server and
    brokers: the same requests ``mqadmin`` sends. Reading messages uses pulls that commit
    nothing, under RocketMQ's tools group ``TOOLS_CONSUMER``. The TPS chart samples each
    broker's runtime info (its put and get totals) every ``tps_interval_s``.
    """

    read_only = False
    live = True

    def __init__(self, namesrv: str | None = None, broker: str | None = None, *,
                 timeout_s: float = 10.0, tps_interval_s: float = 2.0) -> None:
        from ..client._sync import LoopThread
        from ..client.admin import AsyncAdminClient
        from .stats import TpsSampler

        self._lt = LoopThread.shared()

        async def make() -> Any:
            from ..client.acl import SessionCredentials  # a broker with aclEnable=true
            return AsyncAdminClient(namesrv, broker, timeout_s=timeout_s,
                                    credentials=SessionCredentials.from_env())
        self.client = self._lt.run(make())
        self.namesrv = namesrv or ""
        self.address = namesrv or broker or ""
        brokers = self.brokers()  # fails here, clearly, when nothing answers
        self.cluster_name = brokers[0]["cluster"] if brokers else ""
        self.title = (brokers[0]["name"] if len(brokers) == 1
                      else f"{len(brokers)} brokers")
        self.sampler = TpsSampler(self._totals, tps_interval_s)
        self.sampler.start()

    def close(self) -> None:
        self.sampler.stop()
        self._lt.run(self.client.close())

    def _run(self, coro: Any) -> Any:
        return self._lt.run(coro, self.client.timeout_s * 3)

    def _gather(self, coros: list) -> list:
        import asyncio

        async def all_of() -> list:
            return list(await asyncio.gather(*coros))
        return self._run(all_of())

    # -- cluster ----------------------------------------------------------------------------
    def brokers(self) -> list[dict]:
        return self._run(self.client.brokers())

    def _runtime(self, brokers: list[dict]) -> list[dict[str, str]]:
        return self._gather([self.client.runtime_info(b["addr"]) for b in brokers])

    def _totals(self) -> dict[str, int]:
        infos = self._runtime(self.brokers())
        return {"put_msgs": sum(_int(i.get("msgPutTotalTodayNow")) for i in infos),
                "get_msgs": sum(_int(i.get("msgGetTotalTodayNow")) for i in infos),
                "put_bytes": sum(_int(i.get("putMessageSizeTotal")) for i in infos),
                "get_bytes": 0}

    def overview(self) -> dict:
        brokers = self.brokers()
        infos = self._runtime(brokers)
        rows = []
        for b, info in zip(brokers, infos):
            ratio = info.get("commitLogDiskRatio")
            rows.append({"name": b["name"], "id": 0, "addr": b["addr"],
                         "version": info.get("brokerVersionDesc", "-"),
                         "put_tps": _first_rate(info.get("putTps")),
                         "get_tps": _first_rate(info.get("getTotalTps")),
                         "put_total": _int(info.get("msgPutTotalTodayNow")),
                         "get_total": _int(info.get("msgGetTotalTodayNow")),
                         "boot_ms": _int(info.get("bootTimestamp")),
                         "disk_ratio": float(ratio) if ratio not in (None, "", "-1.00") else None})
        tvs = self.topics()
        return {"cluster": self.cluster_name, "namesrv": self.namesrv, "brokers": rows,
                "store": "", "read_only": False,
                "topics": sum(1 for t in tvs if not t.system),
                "system_topics": sum(1 for t in tvs if t.system),
                "messages": sum(t.messages for t in tvs if not t.system),
                **_group_counts(self.group_names()),
                "commitlog_bytes": sum(_int(i.get("commitLogMaxOffset")) -
                                       _int(i.get("commitLogMinOffset")) for i in infos),
                "min_phy_offset": None, "max_phy_offset": None,
                "dispatch_behind_bytes": sum(_int(i.get("dispatchBehindBytes")) for i in infos),
                "dispatch_behind_ms": None,
                "flush_behind_bytes": sum(_human_bytes(i.get("remainHowManyDataToFlush"))
                                          for i in infos),
                "flush_behind_ms": None, "connections": None, "workers": None, "last_store_timestamp": None,
                "paths": [], "live": True,
                "runtime_info": {b["name"]: info for b, info in zip(brokers, infos)}}

    # -- topics -----------------------------------------------------------------------------
    def _topic_configs(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        brokers = self.brokers()
        for table in self._gather([self.client.topic_configs(b["addr"]) for b in brokers]):
            for name, tc in table.items():
                out.setdefault(name, tc)
        return out

    def topic_names(self) -> list[str]:
        return sorted(self._topic_configs())

    def _topic_view(self, name: str, tc: dict, rows: list[dict]) -> views.TopicView:
        from ..broker.admin.views import QueueStats
        queues = [QueueStats(r["topic"], r["brokerName"], r["queueId"], _int(r.get("minOffset")),
                             _int(r.get("maxOffset")), _int(r.get("lastUpdateTimestamp")))
                  for r in rows]
        return views.TopicView(name, _int(tc.get("readQueueNums")), _int(tc.get("writeQueueNums")),
                               _int(tc.get("perm"), 6), views.is_system_topic(name), queues)

    def topics(self) -> list[views.TopicView]:
        configs = self._topic_configs()
        names = sorted(configs)
        stats = self._gather([self.client.topic_stats(n) for n in names])
        return [self._topic_view(n, configs[n], rows) for n, rows in zip(names, stats)]

    def topic(self, name: str) -> views.TopicView | None:
        tc = self._topic_configs().get(name)
        if tc is None:
            return None
        return self._topic_view(name, tc, self._run(self.client.topic_stats(name)))

    # -- groups -----------------------------------------------------------------------------
    def group_names(self) -> list[str]:
        names: set[str] = set()
        for part in self._gather([self.client.group_names(b["addr"]) for b in self.brokers()]):
            names.update(part)
        return sorted(n for n in names if not n.startswith(("%RETRY%", "%DLQ%")))

    async def _group(self, name: str, addrs: list[str]) -> views.GroupView:
        from ..broker.admin.views import ConsumeQueueStats
        cs = await self.client.consume_stats(name)
        conn = None
        for a in addrs:
            conn = await self.client.consumer_connection(name, a)
            if conn:
                break
        gv = views.GroupView(name, online=bool(conn and conn.get("connectionSet")),
                             system=views.is_system_group(name))
        if conn:
            gv.consume_type = str(conn.get("consumeType") or "")
            gv.message_model = str(conn.get("messageModel") or "")
            gv.consume_from_where = str(conn.get("consumeFromWhere") or "")
            gv.subscriptions = {t: str((s or {}).get("subString", "*")) for t, s in
                                (conn.get("subscriptionTable") or {}).items()}
            gv.clients = list(conn.get("connectionSet") or [])
        gv.queues = [ConsumeQueueStats(r["topic"], r["brokerName"], r["queueId"],
                                       _int(r.get("brokerOffset")), _int(r.get("consumerOffset")),
                                       _int(r.get("lastTimestamp")))
                     for r in cs["queues"]]
        gv.consume_tps = float(cs.get("consumeTps") or 0.0)
        gv.lag_latency_ms = None  # not in RocketMQ's consume stats
        return gv

    def groups(self) -> list[views.GroupView]:
        addrs = [b["addr"] for b in self.brokers()]
        return self._gather([self._group(g, addrs) for g in self.group_names()])

    def group(self, name: str) -> views.GroupView | None:
        if name not in self.group_names():
            return None
        return self._run(self._group(name, [b["addr"] for b in self.brokers()]))

    # -- messages ---------------------------------------------------------------------------
    def find_by_key(self, topic: str, key: str, max_num: int, begin: int,
                    end: int | None) -> list[views.MessageView]:
        msgs = self._run(self.client.query_message(topic, key, max_num, begin, end))
        return [views.message_view(m) for m in msgs]

    def find_by_id(self, msg_id: str, topic: str | None) -> list[views.MessageView]:
        msg_id = msg_id.strip()
        try:
            m = self._run(self.client.view_message(msg_id))
        except (ValueError, ConnectionError, OSError):
            m = None  # not an offset id (or its broker is gone): try it as a unique key
        if m is not None and m.msg_id.upper() == msg_id.upper() and (not topic or m.topic == topic):
            return [views.message_view(m)]
        if topic:
            msgs = self._run(self.client.query_message(topic, msg_id, 32, unique_key=True))
            return [views.message_view(x) for x in msgs if x.uniq_key == msg_id]
        return []

    def body(self, msg_id: str) -> bytes | None:
        try:
            m = self._run(self.client.view_message(msg_id.strip()))
        except (ValueError, ConnectionError, OSError):
            return None
        return m.body if m is not None and m.msg_id.upper() == msg_id.strip().upper() else None

    def tier(self) -> dict | None:
        """A broker's tier is not in what RocketMQ's remoting reports: console a broker's
        own (``serve --console``) to see it."""
        return None

    def find_by_offset(self, offset: int) -> list[views.MessageView]:
        raise ValueError("offset: a CommitLog offset names a message on one broker only; "
                         "search by message ID (it carries the broker's address)")

    async def _window(self, addr: str, broker: str, topic: str, qid: int, begin: int, end: int,
                      max_num: int) -> list:
        from ..client.consumer import decode_messages
        from ..remoting.codes import PULL_FLAG_SUBSCRIPTION, RequestCode, ResponseCode
        resp = await self.client.call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                      {"topic": topic, "queueId": qid, "timestamp": begin})
        off = _int(resp.ext_fields.get("offset"))
        found: list = []
        while len(found) < max_num:
            resp = await self.client.call(
                addr, RequestCode.PULL_MESSAGE,
                {"consumerGroup": TOOLS_GROUP, "topic": topic, "queueId": qid,
                 "queueOffset": off, "maxMsgNums": min(32, max_num - len(found)),
                 "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0,
                 "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                 "expressionType": "TAG"},
                ok=(ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED))
            if resp.code != ResponseCode.SUCCESS:
                break
            msgs = decode_messages(resp.body)
            found += [m for m in msgs if begin <= m.store_timestamp <= end]
            nxt = _int(resp.ext_fields.get("nextBeginOffset"), off)
            if not msgs or nxt <= off or msgs[-1].store_timestamp > end:
                break
            off = nxt
        return found[:max_num]

    def find_by_time(self, topic: str, begin: int, end: int,
                     max_num: int) -> list[views.MessageView]:
        addr_of = {b["name"]: b["addr"] for b in self.brokers()}
        rows = self._run(self.client.topic_stats(topic))
        parts = self._gather([self._window(addr_of[r["brokerName"]], r["brokerName"], topic,
                                           r["queueId"], begin, end, max_num)
                              for r in rows if r["brokerName"] in addr_of
                              and _int(r.get("maxOffset")) > _int(r.get("minOffset"))])
        msgs = sorted((m for p in parts for m in p),
                      key=lambda m: (m.store_timestamp, m.store_host, m.commitlog_offset))
        return [views.message_view(m) for m in msgs[:max_num]]

    # -- live -------------------------------------------------------------------------------
    def tps(self, since: float = 0.0) -> dict | None:
        return self.sampler.series(since)
