"""Java value semantics the SQL92 evaluator depends on.

RocketMQ evaluates selectors over ``java.lang`` objects: ``Integer``, ``Long``, ``Double``,
``String`` and ``Boolean``. Python values stand for them as follows: ``str`` → String,
``bool`` → Boolean, ``int`` → Integer, :class:`JLong` → Long, ``float`` → Double. Message
properties are always Strings; numbers come from literals (``5`` is an Integer, ``5000000000``
and ``-2147483648`` are Longs, ``5.0`` is a Double).

``java_compare`` is ``ComparisonExpression.__compare`` with string conversion on (as every
expression built by ``SelectorParser.parse`` has it): when the two classes differ, the left
or right side is converted — widening between numbers, ``Integer.valueOf``/``Long.valueOf``/
``Double.valueOf``/``Boolean.valueOf`` for a String facing a number or a Boolean — and a
String that does not parse raises :class:`JavaEvalError` (Java's ``NumberFormatException``),
which makes the message not match. A Boolean facing a number compares as "less" (``-1``).
"""
from __future__ import annotations

import re
import struct

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


class JLong(int):
    """A Java ``Long`` (a plain ``int`` is a Java ``Integer``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"

    def __neg__(self) -> "JLong":
        return JLong(-int(self))


class JavaEvalError(Exception):
    """An exception Java would throw while evaluating (the message then does not match)."""


def jtype(v: object) -> str:
    if isinstance(v, bool):
        return "Boolean"
    if isinstance(v, JLong):
        return "Long"
    if isinstance(v, int):
        return "Integer"
    if isinstance(v, float):
        return "Double"
    if isinstance(v, str):
        return "String"
    return type(v).__name__


_INT_RE = re.compile(r"[+-]?\d+")
_DEC_RE = re.compile(r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)")
_HEX_RE = re.compile(r"([+-]?)0[xX]([0-9a-fA-F]*\.?[0-9a-fA-F]*)[pP]([+-]?[0-9]+)[fFdD]?")


def parse_java_integer(s: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.valueOf`` (or, with Long bounds, ``Long.valueOf``)."""
    if not _INT_RE.fullmatch(s):
        raise JavaEvalError(f'For input string: "{s}"')
    v = int(s)
    if not lo <= v <= hi:
        raise JavaEvalError(f'For input string: "{s}"')
    return v


def parse_java_long(s: str) -> JLong:
    return JLong(parse_java_integer(s, LONG_MIN, LONG_MAX))


def _java_trim(s: str) -> str:
    i, j = 0, len(s)
    while i < j and s[i] <= " ":
        i += 1
    while j > i and s[j - 1] <= " ":
        j -= 1
    return s[i:j]


def parse_java_double(s: str) -> float:
    """``Double.valueOf``: Java's grammar (trimmed, NaN/Infinity, f/d suffix, hex floats)."""
    t = _java_trim(s)
    m = _DEC_RE.fullmatch(t)
    if m:
        sign = -1.0 if m.group(1) == "-" else 1.0
        if m.group(2):
            return float("nan")
        if m.group(3):
            return sign * float("inf")
        return sign * float(m.group(4))
    m = _HEX_RE.fullmatch(t)
    if m and m.group(2).strip("."):
        sign = -1.0 if m.group(1) == "-" else 1.0
        return sign * float.fromhex(f"0x{m.group(2)}p{m.group(3)}")
    raise JavaEvalError(f'For input string: "{s}"')


def parse_java_boolean(s: str) -> bool:
    """``Boolean.valueOf``: ``"true"`` in any case, anything else is false."""
    return len(s) == 4 and s.lower() == "true"


_D = struct.Struct(">d")
_Q = struct.Struct(">q")
_NAN_BITS = 0x7FF8000000000000


def _double_bits(x: float) -> int:
    if x != x:
        return _NAN_BITS
    return _Q.unpack(_D.pack(x))[0]


def double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN above everything, ``-0.0`` below ``0.0``."""
    if a < b:
        return -1
    if a > b:
        return 1
    ab, bb = _double_bits(a), _double_bits(b)
    return (ab > bb) - (ab < bb)


def string_compare(a: str, b: str) -> int:
    """``String.compareTo`` (UTF-16 code units)."""
    if a == b:
        return 0
    if a.isascii() and b.isascii():
        return -1 if a < b else 1
    ea, eb = a.encode("utf-16-be", "surrogatepass"), b.encode("utf-16-be", "surrogatepass")
    return -1 if ea < eb else (1 if ea > eb else 0)


def java_equals(a: object, b: object) -> bool:
    """``a.equals(b)``: same class and same value (``Double.equals`` compares bits)."""
    ta, tb = jtype(a), jtype(b)
    if ta != tb:
        return False
    if ta == "Double":
        return _double_bits(a) == _double_bits(b)  # type: ignore[arg-type]
    return a == b


def _same_type_compare(lv: object, rv: object, t: str) -> int:
    if t == "Double":
        return double_compare(lv, rv)  # type: ignore[arg-type]
    if t == "String":
        return string_compare(lv, rv)  # type: ignore[arg-type]
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def java_compare(lv: object, rv: object) -> int:
    """``ComparisonExpression.__compare(lv, rv, true)`` (see module doc)."""
    lc, rc = jtype(lv), jtype(rv)
    if lc != rc:
        if lc == "Boolean":
            if rc == "String":  # Java casts the Boolean to String: ClassCastException
                raise JavaEvalError("java.lang.Boolean cannot be cast to java.lang.String")
            return -1
        if lc == "Integer":
            if rc == "Long":
                lv = JLong(lv)  # type: ignore[arg-type]
            elif rc == "Double":
                lv = float(lv)  # type: ignore[arg-type]
            elif rc == "String":
                rv = parse_java_integer(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lc == "Long":
            if rc == "Integer":
                rv = JLong(rv)  # type: ignore[arg-type]
            elif rc == "Double":
                lv = float(lv)  # type: ignore[arg-type]
            elif rc == "String":
                rv = parse_java_long(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lc == "Double":
            if rc in ("Integer", "Long"):
                rv = float(rv)  # type: ignore[arg-type]
            elif rc == "String":
                rv = parse_java_double(rv)  # type: ignore[arg-type]
            else:
                return -1
        elif lc == "String":
            if rc == "Boolean":
                lv = parse_java_boolean(lv)  # type: ignore[arg-type]
            elif rc == "Integer":
                lv = parse_java_integer(lv)  # type: ignore[arg-type]
            elif rc == "Long":
                lv = parse_java_long(lv)  # type: ignore[arg-type]
            elif rc == "Double":
                lv = parse_java_double(lv)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    return _same_type_compare(lv, rv, jtype(lv))
