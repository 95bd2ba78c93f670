"""Per-message SQL92 bitmaps (RocketMQ's ``CommitLogDispatcherCalcBitMap``) as plain data.

A :class:`FilterSpec` is one registered SQL92 group of a topic: its expression, when it
registered (``bornTime``) and its bloom positions. :func:`compute_bitmaps` is the one rule the
broker's dispatcher and ``rebuild`` both use, so a rebuilt ConsumeQueue-ext file equals the one
written live: for a message of a topic without specs there is no bitmap; otherwise the bitmap
is the OR of the positions of every spec whose group registered before the message was stored
and whose expression matches its properties. ``load_filter_specs`` reads
``config/consumerFilter.json``.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Mapping, NamedTuple, Sequence

from .parser import SelectorSyntaxError, compile_sql92


class FilterSpec(NamedTuple):
    topic: str
    group: str
    expression: str
    born_time: int
    bit_pos: tuple[int, ...]
    bit_num: int


def compute_bitmaps(specs_by_topic: Mapping[str, Sequence[FilterSpec]], topics: Sequence[str],
                    props_of: Callable[[int], Mapping[str, str]],
                    store_timestamps: Sequence[int]) -> list[bytes | None]:
    out: list[bytes | None] = []
    compiled: dict[str, object] = {}
    for j, (topic, ts) in enumerate(zip(topics, store_timestamps)):
        specs = specs_by_topic.get(topic)
        if not specs:
            out.append(None)
            continue
        bits = bytearray(specs[0].bit_num // 8)
        props = None
        live = False
        for s in specs:
            if ts <= s.born_time:
                continue
            live = True
            expr = compiled.get(s.expression)
            if expr is None:
                try:
                    expr = compiled[s.expression] = compile_sql92(s.expression)
                except SelectorSyntaxError:
                    continue
            if props is None:
                props = props_of(j)
            if expr.matches(props):  # type: ignore[attr-defined]
                for p in s.bit_pos:
                    bits[p >> 3] |= 1 << (p & 7)
        out.append(bytes(bits) if live else None)
    return out


def load_filter_specs(path: str) -> dict[str, list[FilterSpec]]:
    """SQL92 groups per topic from a ``consumerFilter.json`` ({} when absent)."""
    for candidate in (path, path + ".bak"):
        if os.path.exists(candidate):
            with open(candidate, encoding="utf-8") as fh:
                text = fh.read()
            if text.strip():
                break
    else:
        return {}
    data = json.loads(text)
    out: dict[str, list[FilterSpec]] = {}
    for topic, entry in (data.get("filterDataByTopic") or {}).items():
        for group, d in ((entry or {}).get("groupFilterData") or {}).items():
            bloom = d.get("bloomFilterData") or {}
            if d.get("expressionType") != "SQL92" or not bloom.get("bitPos"):
                continue
            out.setdefault(topic, []).append(FilterSpec(
                topic, group, str(d.get("expression") or ""), int(d.get("bornTime") or 0),
                tuple(int(p) for p in bloom["bitPos"]), int(bloom.get("bitNum") or 0)))
    return out
