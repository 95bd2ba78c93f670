"""Evaluate a compiled selector over a whole batch of messages at once, in numpy.

``evaluate_blob(expr, blob)`` gives, for each record of a ``PropertyBlob``, exactly
``expr.matches(its properties)``. Each boolean node yields an int8 code per message (FALSE,
TRUE, NULL — SQL's unknown — or ERROR where Java's evaluation would have thrown); AND/OR keep
RocketMQ's short-circuit order (the right side is evaluated only where the left does not decide,
so an error there does not count) and combine codes by table lookup. A property against a
string or integer literal, IN, IS NULL, a bare property as a condition and NOT are evaluated on
the blob's bytes; any other node is evaluated message by message on the Python strings of the
properties it reads (``expr.evaluate``), and so is a number the fast parse does not take.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import expression as ex
from .values import JLong, JavaEvalError, java_compare

if TYPE_CHECKING:
    from .propblob import PropertyBlob

ERR = object()
_ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


def _per_message(node: ex.Expr, columns, n: int) -> list:
    names = list(columns)
    out = []
    for i in range(n):
        props = {k: columns[k][i] for k in names if columns[k][i] is not None}
        try:
            out.append(node.evaluate(props))
        except (JavaEvalError, ArithmeticError, ValueError, TypeError):
            out.append(ERR)
    return out


def _int_of(v: str):
    """Integer.valueOf for plain ASCII digits (else None: use the exact slow path)."""
    s = v[1:] if v[:1] in "+-" else v
    if s.isdigit() and s.isascii() and len(s) < 10:
        return int(v)
    return None


def _fast_or_slow(node: ex.Expr, v, c, op: str):
    if v is None:
        return None
    iv = _int_of(v)
    if iv is not None and (type(c) is JLong or -(1 << 31) <= iv < (1 << 31)):
        return iv == c if op == "=" else _ORDER[op]((iv > c) - (iv < c))
    try:  # anything else: Java's exact conversion rules (and its errors)
        r = java_compare(v, c)
    except (JavaEvalError, ValueError):
        return ERR
    return r == 0 if op == "=" else _ORDER[op](r)


FALSE, TRUE, NULL, ERROR = 0, 1, 2, 3


def evaluate_blob(expr: ex.Expr, blob: "PropertyBlob") -> np.ndarray:
    """For each record of ``blob``: ``expr.matches(its properties)``, as a boolean array."""
    if isinstance(expr, ex.Equal) and isinstance(expr.left, ex.Prop) and \
            isinstance(expr.right, ex.Const) and isinstance(expr.right.value, str):
        col = blob.column(expr.left.name)  # the commonest selector: one property = 'literal'
        if col is not None:
            return col.present & blob.equals(col, expr.right.value)
    return _codes(expr, blob) == TRUE


def _codes_of_values(values: list) -> np.ndarray:
    return np.fromiter((TRUE if v is True else FALSE if v is False else NULL if v is None else ERROR
                        for v in values), dtype=np.int8, count=len(values))


def _fallback(node: ex.Expr, blob: "PropertyBlob") -> np.ndarray:
    cols = {name: blob.strings(name) for name in node.properties()}
    return _codes_of_values(_per_message(node, cols, blob.n))


def _logic_table(op: str) -> np.ndarray:
    """``Logic``'s rule over codes, indexed by ``left * 4 + right``: an error or the deciding
    value on the left wins, then on the right, then unknown, else the other value."""
    short = TRUE if op == "OR" else FALSE
    table = np.empty(16, dtype=np.int8)
    for lv in range(4):
        for rv in range(4):
            if lv == ERROR or lv == short:
                out = lv
            elif rv == ERROR or rv == short:
                out = rv
            elif lv == NULL or rv == NULL:
                out = NULL
            else:
                out = 1 - short
            table[lv * 4 + rv] = out
    return table


_LOGIC = {op: _logic_table(op) for op in ("AND", "OR")}
# where the left side alone decides (its error, or FALSE for AND / TRUE for OR)
_DECIDED = {op: np.array([c == ERROR or c == (TRUE if op == "OR" else FALSE) for c in range(4)])
            for op in ("AND", "OR")}
_NOT = np.array([TRUE, FALSE, NULL, ERROR], dtype=np.int8)


def _codes(node: ex.Expr, blob: "PropertyBlob") -> np.ndarray:
    n = blob.n
    if isinstance(node, ex.Logic):
        left = _codes(node.left, blob)
        # the right side only where the left does not decide (Java never evaluates it there)
        decided = _DECIDED[node.op][left]
        if not decided.any():
            right = _codes(node.right, blob)
        else:
            right = np.full(n, NULL, dtype=np.int8)
            need = np.flatnonzero(~decided)
            if len(need):
                right[need] = _codes(node.right, blob.subset(need))
        return _LOGIC[node.op][left * 4 + right]
    if isinstance(node, ex.Not):
        return _NOT[_codes(node.right, blob)]
    if isinstance(node, ex.Const) and (node.value is None or isinstance(node.value, bool)):
        return np.full(n, NULL if node.value is None else TRUE if node.value else FALSE, np.int8)
    prop = _prop_of(node)
    col = blob.column(prop.name) if prop is not None else None
    if col is None:
        return _fallback(node, blob)
    present = col.present
    if isinstance(node, ex.BooleanCast):
        return np.where(present, FALSE, NULL).astype(np.int8)
    if isinstance(node, ex.In):
        hit = np.zeros(n, dtype=bool)
        for lit in node.values:
            hit |= blob.equals(col, lit)
        return np.where(present, hit != node.negated, NULL).astype(np.int8)
    c = node.right.value  # type: ignore[attr-defined]
    if isinstance(node, ex.Equal) and c is None:  # IS NULL
        return np.where(present, FALSE, TRUE).astype(np.int8)
    if isinstance(node, ex.Equal) and isinstance(c, str):
        return np.where(present, blob.equals(col, c), NULL).astype(np.int8)
    ok, val = blob.small_ints(col)
    op = "=" if isinstance(node, ex.Equal) else node.op  # type: ignore[attr-defined]
    out = np.where(ok, _NUMERIC[op](val, int(c)), NULL).astype(np.int8)
    slow = np.flatnonzero(present & ~ok)
    if len(slow):  # anything else: Java's exact conversion rules (and its errors)
        out[slow] = _codes_of_values([_fast_or_slow(node, s, c, op)
                                      for s in blob.strings_at(col, slow)])
    return out


_NUMERIC = {"=": np.equal, ">": np.greater, ">=": np.greater_equal, "<": np.less, "<=": np.less_equal}


def _prop_of(node: ex.Expr) -> ex.Prop | None:
    """The property of the shapes evaluated in numpy (else None: the exact fallback)."""
    if isinstance(node, ex.BooleanCast) and isinstance(node.right, ex.Prop):
        return node.right
    if isinstance(node, ex.In) and isinstance(node.prop, ex.Prop):
        return node.prop
    if isinstance(node, (ex.Equal, ex.Compare)) and isinstance(node.left, ex.Prop) and \
            isinstance(node.right, ex.Const):
        c = node.right.value
        if isinstance(node, ex.Equal) and (c is None or isinstance(c, str)):
            return node.left
        if type(c) is int or type(c) is JLong:
            return node.left
    return None
