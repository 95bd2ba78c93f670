"""The read path's side of ConsumeQueue-ext units and SQL92 filters.

``resolve_units`` turns a batch of ConsumeQueue tags slots into what the filters need: the real
tagsCode (an ext address is looked up in the queue's ext stream; one that cannot be read gives
``None``, which a tag filter lets through as RocketMQ does) and, for a SQL92 pull, whether the
unit's bitmap lets the message through (``message_filter.matches_unit``). ``record_matches``
checks a record read from the CommitLog against the filter's expression.

A ``message_filter`` is any object with ``matches_unit(tags_code, store_timestamp, bitmap)``
and ``matches_properties(props)`` (the broker's ``ExpressionMessageFilter``).
"""
from __future__ import annotations

from ..format.cq_ext import MAX_ADDR
from ..format.message import record_properties


def resolve_units(tags_slots, ext, message_filter) -> tuple[list, list | None]:
    tags = tags_slots.tolist()
    ok: list | None = [True] * len(tags) if message_filter is not None else None
    for i, t in enumerate(tags):
        unit = None
        if t <= MAX_ADDR:
            unit = ext.get(t) if ext is not None else None
            tags[i] = unit.tags_code if unit is not None else None
        if ok is not None:
            if unit is None:
                ok[i] = message_filter.matches_unit(tags[i], None, None)
            else:
                ok[i] = message_filter.matches_unit(tags[i], unit.store_timestamp, unit.bitmap)
    return tags, ok


def record_matches(message_filter, raw) -> bool:
    return message_filter.matches_properties(record_properties(raw))
