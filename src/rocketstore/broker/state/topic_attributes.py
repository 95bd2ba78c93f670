"""RocketMQ 5's topic attributes: what ``updateTopic -a +message.type=FIFO`` sends and the broker keeps.

The request header ``attributes`` holds ``+key=value`` (set) and ``-key`` (remove) entries joined
by commas (``AttributeParser``). Known keys and values (``TopicAttributes`` of 5.3.3):
``message.type`` NORMAL | FIFO | DELAY | TRANSACTION | MIXED | UNSPECIFIED (default NORMAL),
``queue.type`` BatchCQ | SimpleCQ, ``cleanup.policy`` DELETE | COMPACTION. As RocketMQ: an unknown
key, a value outside its set, or a removal while creating is an error (the request answers
SYSTEM_ERROR with the reason); the proxy reads ``message.type`` to accept or refuse a send.
"""
from __future__ import annotations

KNOWN: dict[str, frozenset[str]] = {
    "message.type": frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
    "queue.type": frozenset({"BatchCQ", "SimpleCQ"}),
    "cleanup.policy": frozenset({"DELETE", "COMPACTION"}),
}


def parse(text: str | None) -> dict[str, str]:
    """``"+a=1,-b"`` -> ``{"+a": "1", "-b": ""}`` (``AttributeParser.parseToMap``)."""
    out: dict[str, str] = {}
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry[0] == "+":
            key, eq, value = entry.partition("=")
            if not eq or len(key) < 2 or not value:
                raise ValueError(f"attribute format error: {entry!r} (want +key=value)")
            out[key] = value
        elif entry[0] == "-":
            if len(entry) < 2 or "=" in entry:
                raise ValueError(f"attribute format error: {entry!r} (want -key)")
            out[entry] = ""
        else:
            raise ValueError(f"attribute format error: {entry!r} (want +key=value or -key)")
    return out


def alter(current: dict[str, str], changes: dict[str, str], create: bool) -> dict[str, str]:
    """The attributes after ``changes`` (``parse``'s output) on ``current``
    (``Attribute.alterCurrentAttributes``)."""
    result = dict(current)
    for raw, value in changes.items():
        key = raw[1:]
        if key not in KNOWN:
            raise ValueError(f"unsupported key: {key}")
        if raw[0] == "-":
            if create:
                raise ValueError(f"only add attribute is supported while creating topic. key: {key}")
            if key not in result:
                raise ValueError(f"attempt to delete a nonexistent key: {key}")
            del result[key]
            continue
        if value not in KNOWN[key]:
            raise ValueError(f"value is not in set: {sorted(KNOWN[key])}")
        result[key] = value
    return result
