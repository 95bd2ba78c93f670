"""JSON bodies in fastjson's dialect, both ways: object-valued map keys, bare integer keys.

RocketMQ's admin bodies are Java beans written by fastjson's ``JSON.toJSONString``. Two things
in them are not standard JSON and Java clients depend on them:

- a map keyed by a bean (``HashMap<MessageQueue, TopicOffset>`` in ``TopicStatsTable``,
  ``ConsumeStats``, ``ResetOffsetBody``) writes each key as a JSON object::

      {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":5,...}}}

- a map keyed by a number writes the key bare: ``{"brokerAddrs":{0:"127.0.0.1:10911"}}``.

Bean fields come out sorted by name (fastjson's default), ``null`` fields are left out.

Theory of operation: ``dumps`` is ``json.dumps`` except that a dict key may be an ``ObjectKey``
(a frozen, hashable mapping, written as an object) or an ``int`` (written bare only when
``bare_int_keys`` is set; standard quoted keys otherwise, which fastjson reads back just the
same). ``loads`` is a small recursive-descent parser over the same grammar: object keys may be
strings, numbers or objects (returned as ``int``/``float`` and ``ObjectKey``); any value that
is standard JSON throughout (a map key object, an ``OffsetWrapper``) is handed whole to the
``json`` module's C scanner, so only the non-standard levels are walked in Python.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Iterator, Mapping

__all__ = ["ObjectKey", "dumps", "loads", "message_queue_key"]


class ObjectKey(Mapping[str, Any]):
    """A JSON object used as a map key: immutable, hashable, compares by content."""

    __slots__ = ("_items", "_hash")

    def __init__(self, data: Mapping[str, Any] | None = None, **kw: Any) -> None:
        items = dict(data or {}, **kw) if kw else (data if type(data) is dict else dict(data or {}))
        self._items = tuple(sorted([(k, _freeze(v)) for k, v in items.items()]))
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ObjectKey):
            return self._items == other._items
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"ObjectKey({dict(self._items)!r})"


def _freeze(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or t is float or t is bool or v is None or t is ObjectKey:
        return v
    if isinstance(v, Mapping):
        return ObjectKey(v)
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> ObjectKey:
    """RocketMQ's ``MessageQueue`` as fastjson writes it (a map key in admin bodies)."""
    return ObjectKey(brokerName=broker_name, queueId=int(queue_id), topic=topic)


# -- encoding ----------------------------------------------------------------------------------
def dumps(obj: Any, *, bare_int_keys: bool = False) -> str:
    """``obj`` as fastjson would write it (compact, keys of plain dicts sorted)."""
    out: list[str] = []
    _encode(obj, out, bare_int_keys)
    return "".join(out)


_SCALARS = (str, int, float, bool)
_dump_flat = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def _encode(obj: Any, out: list[str], bare: bool) -> None:
    if type(obj) is dict or type(obj) is ObjectKey:
        # a flat bean (every key a str, every value a scalar): the C encoder writes it whole
        flat = obj.items() if isinstance(obj, dict) else obj._items
        if all(type(k) is str and type(v) in _SCALARS and v == v for k, v in flat):
            out.append(_dump_flat(dict(flat)))
            return
    if isinstance(obj, Mapping):
        out.append("{")
        first = True
        items: Iterable[tuple[Any, Any]] = obj.items()
        if not isinstance(obj, ObjectKey) and all(isinstance(k, str) for k in obj):
            items = sorted(items)
        for k, v in items:
            if v is None:
                continue  # fastjson leaves null fields out
            if not first:
                out.append(",")
            first = False
            _encode_key(k, out, bare)
            out.append(":")
            _encode(v, out, bare)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        for i, v in enumerate(sorted(obj) if isinstance(obj, (set, frozenset)) else obj):
            if i:
                out.append(",")
            _encode(v, out, bare)
        out.append("]")
    elif isinstance(obj, float):
        out.append(repr(obj) if obj == obj and obj not in (float("inf"), float("-inf"))
                   else "null")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


def _encode_key(k: Any, out: list[str], bare: bool) -> None:
    if isinstance(k, ObjectKey):
        _encode(k, out, bare)
    elif isinstance(k, bool):
        out.append(json.dumps(str(k).lower()))
    elif isinstance(k, int) and bare:
        out.append(str(k))
    else:
        out.append(json.dumps(str(k), ensure_ascii=False))


# -- decoding ----------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_raw_decode = json.JSONDecoder().raw_decode
_MAX_DEPTH = 200


def loads(text: str | bytes) -> Any:
    """Parse fastjson output (standard JSON plus object and bare-number map keys)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    value, pos = _value(text, _skip(text, 0), 0)
    pos = _skip(text, pos)
    if pos != len(text):
        raise ValueError(f"extra data at char {pos}")
    return value


def _skip(s: str, pos: int) -> int:
    return _WS.match(s, pos).end()  # type: ignore[union-attr]


def _value(s: str, pos: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError("JSON nested too deeply")
    if pos >= len(s):
        raise ValueError("unexpected end of JSON")
    ch = s[pos]
    if ch in "{[":
        try:  # standard JSON below this point: the C scanner does it
            return _raw_decode(s, pos)
        except RecursionError as exc:
            raise ValueError(f"JSON nested too deeply at char {pos}") from exc
        except ValueError:
            pass
        if ch == "{":
            return _object(s, pos + 1, depth + 1)
        return _array(s, pos + 1, depth + 1)
    if ch == '"':
        return _scanstring(s, pos + 1)
    for word, val in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, pos):
            return val, pos + len(word)
    m = _NUMBER.match(s, pos)
    if not m:
        raise ValueError(f"unexpected {ch!r} at char {pos}")
    num = m.group(0)
    return (float(num) if m.group(1) or m.group(2) else int(num)), m.end()


def _object(s: str, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    pos = _skip(s, pos)
    if s.startswith("}", pos):
        return out, pos + 1
    while True:
        key, pos = _value(s, pos, depth)
        if isinstance(key, dict):
            key = ObjectKey(key)
        elif isinstance(key, list):
            raise ValueError(f"array used as a map key at char {pos}")
        pos = _skip(s, pos)
        if not s.startswith(":", pos):
            raise ValueError(f"expected ':' at char {pos}")
        val, pos = _value(s, _skip(s, pos + 1), depth)
        out[key] = val
        pos = _skip(s, pos)
        if s.startswith(",", pos):
            pos = _skip(s, pos + 1)
            continue
        if s.startswith("}", pos):
            return out, pos + 1
        raise ValueError(f"expected ',' or '}}' at char {pos}")


def _array(s: str, pos: int, depth: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    pos = _skip(s, pos)
    if s.startswith("]", pos):
        return out, pos + 1
    while True:
        val, pos = _value(s, pos, depth)
        out.append(val)
        pos = _skip(s, pos)
        if s.startswith(",", pos):
            pos = _skip(s, pos + 1)
            continue
        if s.startswith("]", pos):
            return out, pos + 1
        raise ValueError(f"expected ',' or ']' at char {pos}")
