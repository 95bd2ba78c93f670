"""SQL92 consumer filters: the registry (RocketMQ's ``ConsumerFilterManager``) and the
pull-side message filter (``ExpressionMessageFilter``).

Theory of operation. Every heartbeat's SQL92 subscriptions are registered here per
``(topic, group)`` with the compiled expression, the client's ``subVersion`` and the group's
bloom positions (``BloomFilter.generate("<group>#<topic>")``). A newer version replaces the
entry, an equal or older one only revives it; a topic the group no longer subscribes to is marked
dead (``deadTime``), as is every entry of a group that unregisters. Entries dead for longer than
``filterDataCleanTimeSpan`` are dropped when the registry is persisted, and on load every entry
is considered dead (its consumers must heartbeat again), unless the bloom settings changed, in
which case the file is ignored. The file is ``<store>/config/consumerFilter.json`` in fastjson's
shape::

    {"filterDataByTopic":{"T":{"groupFilterData":{"g":{"bloomFilterData":{"bitNum":112,
     "bitPos":[90,68,28]},"bornTime":1700000000000,"clientVersion":1700000000001,
     "consumerGroup":"g","dead":false,"deadTime":0,"expression":"a > 5",
     "expressionType":"SQL92","topic":"T"}},"topic":"T"}}}

The dispatcher asks :meth:`ConsumerFilterRegistry.bitmaps` for each stored message's bitmap
(the OR of the positions of every registered group whose expression matches it); a pull uses
:class:`ExpressionMessageFilter`, which first rules units out by their bitmap and then checks
the record's properties.
"""
from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ...filter import SelectorSyntaxError, compile_sql92, is_tag_type
from ...filter.bitmap import FilterSpec, compute_bitmaps
from ...filter.bloom import BloomFilter, BloomFilterData, hit_mask
from ...filter.expression import Expr
from .files import load_json_lenient, write_json_atomic

log = logging.getLogger(__name__)

FILE_NAME = "consumerFilter.json"
DAY_MS = 24 * 3600 * 1000


def not_supported(expression_type: str) -> str:
    """The remark of a broker with ``enablePropertyFilter=false`` (remoting and gRPC alike)."""
    return f"The broker does not support consumer to filter message by {expression_type}"


def compile_expression(expression_type: str, expression: str) -> Expr:
    """``FilterFactory.INSTANCE.get(type).compile(expr)``: only SQL92 is known."""
    if expression_type != "SQL92":
        raise SelectorSyntaxError(expression, f"filter type {expression_type} is not supported")
    return compile_sql92(expression)


@dataclass
class ConsumerFilterData:
    consumer_group: str
    topic: str
    expression: str
    expression_type: str
    compiled: Expr | None
    born_time: int
    dead_time: int = 0
    bloom: BloomFilterData | None = None
    client_version: int = 0

    @property
    def dead(self) -> bool:
        return self.dead_time >= self.born_time

    def msg_in_live(self, store_timestamp: int) -> bool:
        return store_timestamp > self.born_time

    def to_json(self) -> dict:
        out = {"consumerGroup": self.consumer_group, "topic": self.topic,
               "expression": self.expression, "expressionType": self.expression_type,
               "bornTime": self.born_time, "deadTime": self.dead_time,
               "clientVersion": self.client_version, "dead": self.dead}
        if self.bloom is not None:
            out["bloomFilterData"] = self.bloom.to_json()
        return out


def _now() -> int:
    return int(time.time() * 1000)


class ConsumerFilterRegistry:
    def __init__(self, config_dir: str | None, *, max_error_rate: int = 20,
                 expect_consumer_num: int = 32, clean_time_span_ms: int = DAY_MS) -> None:
        self.path = os.path.join(config_dir, FILE_NAME) if config_dir else None
        self.bloom = BloomFilter(max_error_rate, expect_consumer_num)
        self.clean_time_span_ms = clean_time_span_ms
        self._lock = threading.RLock()
        self._by_topic: dict[str, dict[str, ConsumerFilterData]] = {}
        self._version = 0  # bumped on every change (dispatch caches per topic)

    # -- registration -------------------------------------------------------------------------
    def register_group(self, group: str, subscriptions: Sequence[Mapping[str, Any]],
                       now_ms: int | None = None) -> None:
        """A heartbeat's ``subscriptionDataSet`` for ``group`` (RocketMQ's ``register(group, subList)``)."""
        now = _now() if now_ms is None else now_ms
        topics = set()
        for s in subscriptions:
            topic = str(s.get("topic") or "")
            topics.add(topic)
            self.register(topic, group, str(s.get("subString") or ""),
                          s.get("expressionType"), int(s.get("subVersion") or 0), now)
        with self._lock:
            for data in self._group_entries(group):
                if data.topic not in topics and not data.dead:
                    data.dead_time = now
                    self._version += 1

    def register(self, topic: str, group: str, expression: str, expression_type: str | None,
                 client_version: int, now_ms: int | None = None) -> bool:
        if is_tag_type(expression_type) or not expression:
            return False
        now = _now() if now_ms is None else now_ms
        bloom = self.bloom.generate(f"{group}#{topic}")
        with self._lock:
            table = self._by_topic.setdefault(topic, {})
            old = table.get(group)
            if old is not None and client_version <= old.client_version:
                if client_version == old.client_version and old.dead:
                    old.dead_time = 0
                    self._version += 1
                    return True
                return False
            if old is not None and old.expression == expression and \
                    old.expression_type == expression_type and old.bloom == bloom:
                old.client_version = client_version
                if old.dead:
                    old.dead_time = 0
                self._version += 1
                return True
            try:
                compiled = compile_expression(str(expression_type), expression)
            except SelectorSyntaxError as exc:
                log.error("parse error: expr=%s, topic=%s, group=%s, error=%s", expression, topic,
                          group, exc)
                if old is not None:  # the new expression is bad: drop the old, let the client see
                    del table[group]
                    self._version += 1
                return False
            table[group] = ConsumerFilterData(group, topic, expression, str(expression_type),
                                              compiled, now, 0, bloom, client_version)
            self._version += 1
            return True

    def unregister(self, group: str, now_ms: int | None = None) -> None:
        now = _now() if now_ms is None else now_ms
        with self._lock:
            for data in self._group_entries(group):
                if not data.dead:
                    data.dead_time = now
                    self._version += 1

    def _group_entries(self, group: str) -> list[ConsumerFilterData]:
        return [t[group] for t in self._by_topic.values() if group in t]

    # -- views --------------------------------------------------------------------------------
    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        with self._lock:
            return self._by_topic.get(topic, {}).get(group)

    def by_topic(self, topic: str) -> list[ConsumerFilterData]:
        with self._lock:
            return list(self._by_topic.get(topic, {}).values())

    @property
    def version(self) -> int:
        return self._version

    # -- the dispatcher's question --------------------------------------------------------------
    def bitmaps(self, topics: Sequence[str], props_of: Callable[[int], Mapping[str, str]],
                store_timestamps: Sequence[int]) -> list[bytes | None]:
        """The filter bitmap of each message (``CommitLogDispatcherCalcBitMap``, the rule of
        ``filter.bitmap.compute_bitmaps``: groups registered after the message was stored are
        left out, the pull path never consults their bits for such messages)."""
        specs: dict[str, list[FilterSpec]] = {}
        for topic in set(topics):
            specs[topic] = [FilterSpec(topic, d.consumer_group, d.expression, d.born_time,
                                       d.bloom.bit_pos, d.bloom.bit_num)  # type: ignore[union-attr]
                            for d in self.by_topic(topic)
                            if d.compiled is not None and self.bloom.is_valid(d.bloom)]
        return compute_bitmaps(specs, topics, props_of, store_timestamps)

    # -- persistence --------------------------------------------------------------------------
    def clean(self, now_ms: int | None = None) -> None:
        now = _now() if now_ms is None else now_ms
        with self._lock:
            for topic in list(self._by_topic):
                table = self._by_topic[topic]
                for group in list(table):
                    d = table[group]
                    if d.dead and now - d.dead_time >= self.clean_time_span_ms:
                        del table[group]
                if not table:
                    del self._by_topic[topic]

    def encode(self) -> dict:
        self.clean()
        with self._lock:
            return {"filterDataByTopic": {
                topic: {"topic": topic, "groupFilterData": {g: d.to_json() for g, d in table.items()}}
                for topic, table in self._by_topic.items()}}

    def persist(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, self.encode())

    def load(self, now_ms: int | None = None) -> None:
        if self.path is None:
            return
        raw = load_json_lenient(self.path)
        if not raw:
            return
        now = _now() if now_ms is None else now_ms
        loaded: dict[str, dict[str, ConsumerFilterData]] = {}
        for topic, entry in (raw.get("filterDataByTopic") or {}).items():
            if not isinstance(entry, dict):
                continue
            for group, d in (entry.get("groupFilterData") or {}).items():
                if not isinstance(d, dict):
                    continue
                bloom = BloomFilterData.from_json(d.get("bloomFilterData"))
                if not self.bloom.is_valid(bloom):
                    log.info("bloom filter settings changed: ignoring %s", self.path)
                    return
                try:
                    compiled: Expr | None = compile_expression(str(d.get("expressionType")),
                                                               str(d.get("expression") or ""))
                except SelectorSyntaxError:
                    log.error("load filter data error: %s", d)
                    compiled = None
                data = ConsumerFilterData(str(d.get("consumerGroup") or group), str(d.get("topic") or topic),
                                          str(d.get("expression") or ""), str(d.get("expressionType")),
                                          compiled, int(d.get("bornTime") or 0),
                                          int(d.get("deadTime") or 0), bloom,
                                          int(d.get("clientVersion") or 0))
                if data.dead_time == 0:  # every consumer is dead until it heartbeats again
                    data.dead_time = max(data.born_time, now - 30_000)
                loaded.setdefault(topic, {})[group] = data
        with self._lock:
            self._by_topic = loaded
            self._version += 1


class ExpressionMessageFilter:
    """A pull's SQL92 filter: bitmap prefilter on the ConsumeQueue unit, then the record."""

    def __init__(self, data: ConsumerFilterData | None, bloom: BloomFilter) -> None:
        self.data = data
        self.bloom = bloom
        self.bloom_valid = data is not None and bloom.is_valid(data.bloom)
        self.bitmap_checks = 0  # units ruled out by their bitmap (CommitLog reads saved)

    def matches_unit(self, tags_code: int | None, store_timestamp: int | None,
                     bitmap: bytes | None) -> bool:
        d = self.data
        if d is None or d.compiled is None or d.bloom is None:
            return True
        if store_timestamp is None or not d.msg_in_live(store_timestamp):
            return True
        if bitmap is None or not self.bloom_valid or len(bitmap) * 8 != d.bloom.bit_num:
            return True
        hit = self.bloom.is_hit(d.bloom, bitmap)
        if not hit:
            self.bitmap_checks += 1
        return hit

    @property
    def bitmap_bytes(self) -> int:
        """Bitmap length the group's positions need (0: no prefilter possible)."""
        d = self.data
        return d.bloom.bit_num // 8 if self.bloom_valid and d is not None and d.bloom else 0

    def matches_units(self, store_ts: np.ndarray, has_bitmap: np.ndarray,
                      bitmaps: np.ndarray | None) -> np.ndarray:
        """``matches_unit`` for a batch: units whose bitmap lacks a group position are False."""
        n = len(store_ts)
        ok = np.ones(n, dtype=bool)
        d = self.data
        if d is None or d.compiled is None or d.bloom is None or bitmaps is None or \
                not self.bloom_valid or bitmaps.shape[1] * 8 != d.bloom.bit_num:
            return ok
        live = has_bitmap & (store_ts > d.born_time)
        hit = np.ones(n, dtype=bool)
        for byte, mask in hit_mask(d.bloom):
            hit &= (bitmaps[:, byte] & mask) == mask
        ok = ~live | hit
        self.bitmap_checks += int(n - ok.sum())
        return ok

    def matches_properties(self, props: Mapping[str, str]) -> bool:
        d = self.data
        if d is None or d.compiled is None:
            return True
        return d.compiled.matches(props)

    @property
    def expression(self) -> Expr | None:
        return self.data.compiled if self.data is not None else None


class RetryExpressionMessageFilter:
    """``ExpressionForRetryMessageFilter`` (``filterSupportRetry=true``): a pull of
    ``%RETRY%<group>`` checks each retried message against the SQL92 filter the group registered
    for the message's original topic (its ``RETRY_TOPIC`` property)."""

    expression = None  # no batch evaluation: each record is checked on its own properties
    bitmap_bytes = 0

    def __init__(self, registry: ConsumerFilterRegistry, group: str) -> None:
        self.registry = registry
        self.group = group

    def matches_units(self, store_ts: np.ndarray, has_bitmap: np.ndarray,
                      bitmaps: np.ndarray | None) -> np.ndarray:
        return np.ones(len(store_ts), dtype=bool)

    def matches_unit(self, tags_code, store_timestamp, bitmap) -> bool:
        return True

    def matches_properties(self, props: Mapping[str, str]) -> bool:
        real_topic = props.get("RETRY_TOPIC")
        data = self.registry.get(real_topic, self.group) if real_topic else None
        if data is None or data.compiled is None:
            return True
        return data.compiled.matches(props)
