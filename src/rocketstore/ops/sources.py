"""Where the console's numbers come from: ``LocalSource`` reads one broker's state in process
(``serve --console``) or a store directory (``console --store``).

Theory of operation: the console's pages ask a source for plain data — an overview dict, topic
and group views, message search results, a TPS series — and never touch a store or a manager
themselves. A source is called from the console's worker threads; everything it reads is
thread-safe and read-only.
"""
from __future__ import annotations

from typing import Any

from . import views
from .state import OpsState


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
        totals = st.tps.totals() if st.tps is not None else {}
        info = None
        if st.broker_config is not None:
            from ..broker.admin_views import runtime_info
            info = runtime_info(store, st.store_config, st.broker_config, st.broker_stats)
        broker = {"name": st.broker_name, "id": 0, "addr": st.broker_addr or "-",
                  "version": (info or {}).get("brokerVersionDesc", "-"),
                  "put_tps": last.get("put_tps") if st.tps is not None else None,
                  "get_tps": last.get("get_tps") if st.tps is not None else None,
                  "put_total": totals.get("put_msgs"), "get_total": totals.get("get_msgs"),
                  "boot_ms": st.started_ms if not st.read_only else 0,
                  "disk_ratio": rt.paths[0].disk_used_ratio if rt.paths else None}
        return {"cluster": st.cluster_name, "namesrv": st.namesrv_addr, "brokers": [broker],
                "store": st.store_config.store_path_root_dir, "read_only": st.read_only,
                "topics": sum(1 for t in tvs if not t.system),
                "system_topics": sum(1 for t in tvs if t.system),
                "messages": sum(t.messages for t in tvs if not t.system),
                "groups": len(self.group_names()),
                "commitlog_bytes": rt.max_phy_offset - rt.min_phy_offset,
                "min_phy_offset": rt.min_phy_offset, "max_phy_offset": rt.max_phy_offset,
                "dispatch_behind_bytes": rt.dispatch_behind_bytes,
                "dispatch_behind_ms": rt.dispatch_behind_ms,
                "flush_behind_bytes": rt.flush_behind_bytes, "flush_behind_ms": rt.flush_behind_ms,
                "connections": st.connections() if not st.read_only else None,
                "last_store_timestamp": rt.last_store_timestamp, "paths": rt.paths,
                "runtime_info": {st.broker_name: info} if info else {}, "live": self.live}

    def topic_names(self) -> list[str]:
        return views.topic_names(self._store(), self.state.topics)

    def topics(self) -> list[views.TopicView]:
        return views.topic_views(self._store(), self.state.topics, self.state.broker_name)

    def topic(self, name: str) -> views.TopicView | None:
        store = self._store()
        if name not in views.topic_names(store, self.state.topics):
            return None
        return views.topic_view(store, self.state.topics, name, self.state.broker_name)

    def group_names(self) -> list[str]:
        st = self.state
        return views.group_names(st.offsets, st.consumers, st.subgroups)

    def groups(self) -> list[views.GroupView]:
        st = self.state
        return views.group_views(self._store(), st.topics, st.offsets, st.consumers, st.subgroups,
                                 broker_name=st.broker_name, stats=st.broker_stats)

    def group(self, name: str) -> views.GroupView | None:
        if name not in self.group_names():
            return None
        st = self.state
        return views.group_view(self._store(), st.topics, st.offsets, st.consumers, name,
                                broker_name=st.broker_name, stats=st.broker_stats)

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

    # -- live -------------------------------------------------------------------------------
    def tps(self, since: float = 0.0) -> dict | None:
        return self.state.tps.series(since) if self.state.tps is not None else None
