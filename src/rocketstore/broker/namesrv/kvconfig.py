"""The name server's KV config: PUT_KV_CONFIG (100), GET_KV_CONFIG (101), DELETE_KV_CONFIG (102),
GET_KVLIST_BY_NAMESPACE (219) — what ``mqadmin updateKvConfig``, ``deleteKvConfig`` and
``updateOrderConf`` change.

====  ==================================  ==============================================
code  request header                      answer
====  ==================================  ==============================================
 100  {namespace, key, value}             SUCCESS; SYSTEM_ERROR "namespace or key is null"
                                          (or naming the missing value)
 101  {namespace, key}                    SUCCESS {value}; QUERY_NOT_FOUND "No config
                                          item, Namespace: N Key: K"
 102  {namespace, key}                    SUCCESS (also when nothing was there)
 219  {namespace}                         KVTable ``{"table":{key: value}}``;
                                          QUERY_NOT_FOUND "No config item, Namespace: N"
====  ==================================  ==============================================

The table is RocketMQ 4.9.7's ``KVConfigManager``: namespace → key → value, every change
written through to ``kvConfig.json`` (``{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"b:4"}}}``,
RocketMQ's ``KVConfigSerializeWrapper``; a file RocketMQ's name server wrote loads here and the
other way round). A namespace stays once created, even emptied, as RocketMQ keeps it.

Theory of operation: the ``ORDER_TOPIC_CONFIG`` namespace is the one the rest of the name
server reads — topic → ``"brokerName:queueNums;..."``, set by ``mqadmin updateOrderConf``. A
broker registering is answered with that namespace (``RegisterBrokerResult.kvTable``) and marks
exactly those topics ``order`` in its topic table; with ``orderMessageEnable`` on, a route
answer carries the topic's value as ``orderTopicConf``. ``on_change(namespace)`` lets the owner
react at once (``rocketstore serve`` re-marks its own broker's topics).
"""
from __future__ import annotations

import json
import logging
import os
import threading

from ..state.files import load_json_lenient, write_json_atomic

log = logging.getLogger(__name__)
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
KV_CONFIG_FILE = "kvConfig.json"


def default_kv_config_path() -> str:
    """RocketMQ's default ``kvConfigPath``: ``${user.home}/namesrv/kvConfig.json``."""
    return os.path.join(os.path.expanduser("~"), "namesrv", KV_CONFIG_FILE)


class KVConfigManager:
    """namespace → key → value, persisted to ``path`` on every change (``None``: memory only)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = {}
        if path:
            data = load_json_lenient(path) or {}  # a damaged file is an error, never emptied
            table = data.get("configTable") or {}
            if not isinstance(table, dict):
                raise ValueError(f"{path}: configTable is not an object")
            for ns, kv in table.items():
                if isinstance(kv, dict):
                    self._table[str(ns)] = {str(k): "" if v is None else str(v)
                                            for k, v in kv.items()}

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            self._table.setdefault(namespace, {})[key] = value
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return (self._table.get(namespace) or {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        with self._lock:
            found = self._table.get(namespace, {}).pop(key, None) is not None
        self.persist()
        return found

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace, or None when it never existed."""
        with self._lock:
            kv = self._table.get(namespace)
            return dict(kv) if kv is not None else None

    def persist(self) -> None:
        if not self.path:
            return
        with self._lock:
            obj = {"configTable": {ns: dict(kv) for ns, kv in self._table.items()}}
        write_json_atomic(self.path, obj)


def kv_table_body(table: dict[str, str]) -> bytes:
    """RocketMQ's ``KVTable`` body."""
    return json.dumps({"table": table}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


__all__ = ["KVConfigManager", "ORDER_TOPIC_CONFIG", "default_kv_config_path", "kv_table_body"]
