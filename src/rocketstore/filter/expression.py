"""Compiled SQL92 selector expressions and RocketMQ 4.9's evaluation rules.

Each node is built by a ``create_*`` function that applies the same checks as RocketMQ's
``ComparisonExpression``/``UnaryExpression``/``LogicExpression`` factories (they run while the
expression is parsed, so a violation is a parse error) and evaluates as the Java node does:

* Three-valued logic: a node yields ``True``, ``False`` or ``None`` (SQL's unknown). ``AND``
  and ``OR`` short-circuit on ``False``/``True`` and are unknown when either side is.
* ``>``, ``>=``, ``<``, ``<=`` (and BETWEEN, which is ``>= AND <=``): unknown when a side is
  null; two Strings are compared as ``Double.valueOf`` numbers or the evaluation fails; other
  pairs go through :func:`~.values.java_compare`. Only number literals may be operands.
* ``=``: unknown when only the left side is null, false when only the right side is, equal
  Java objects are true, otherwise :func:`~.values.java_compare` decides. ``<>`` is ``NOT =``.
  ``IS NULL`` is ``= NULL`` without the operand checks (``a = NULL`` is refused).
* ``IN``/``NOT IN`` only on a property; a non-String or null value is unknown.
* A bare property used as a condition is a "boolean cast": unknown when absent, false
  otherwise (properties are Strings, never Booleans). Unary minus of a non-number is null.
* A message matches only when the whole expression is ``True``; an evaluation error (a
  property that does not parse as the number it is compared with) means "no match".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from .values import JLong, JavaEvalError, java_compare, java_equals, jtype, parse_java_double

Props = Mapping[str, str]
Value = object  # None | bool | int | JLong | float | str


class SelectorBuildError(Exception):
    """A create-time check failed (RocketMQ throws a RuntimeException inside the parser)."""


class Expr:
    boolean = False  # implements BooleanExpression

    def evaluate(self, props: Props) -> Value:  # pragma: no cover - abstract
        raise NotImplementedError

    def matches(self, props: Props) -> bool:
        """RocketMQ's ``isMatchedByCommitLog``: true only for a Boolean TRUE, errors are false."""
        try:
            return self.evaluate(props) is True
        except (JavaEvalError, ArithmeticError, ValueError, TypeError):
            return False

    def properties(self) -> frozenset[str]:
        """Names of the message properties the expression reads."""
        out: set[str] = set()
        stack: list[Expr] = [self]
        while stack:
            e = stack.pop()
            if isinstance(e, Prop):
                out.add(e.name)
            stack.extend(getattr(e, "children", ()))
        return frozenset(out)


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Value

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.value is None or isinstance(self.value, bool)  # BooleanConstantExpression

    def evaluate(self, props: Props) -> Value:
        return self.value

    def __str__(self) -> str:
        v = self.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return repr(v) if isinstance(v, float) else str(int(v))  # type: ignore[call-overload]


@dataclass(frozen=True, eq=False)
class Prop(Expr):
    name: str

    def evaluate(self, props: Props) -> Value:
        return props.get(self.name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Negate(Expr):
    right: Expr

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.right,)

    def evaluate(self, props: Props) -> Value:
        v = self.right.evaluate(props)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        return -v

    def __str__(self) -> str:
        return f"(- {self.right})"


@dataclass(frozen=True, eq=False)
class BooleanCast(Expr):
    right: Expr
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.right,)

    def evaluate(self, props: Props) -> Value:
        v = self.right.evaluate(props)
        if v is None:
            return None
        return v if isinstance(v, bool) else False

    def __str__(self) -> str:
        return str(self.right)


@dataclass(frozen=True, eq=False)
class Not(Expr):
    right: Expr
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.right,)

    def evaluate(self, props: Props) -> Value:
        v = self.right.evaluate(props)
        if v is None:
            return None
        if not isinstance(v, bool):  # Java's (Boolean) cast
            raise JavaEvalError(f"{jtype(v)} cannot be cast to java.lang.Boolean")
        return not v

    def __str__(self) -> str:
        return f"(NOT {self.right})"


@dataclass(frozen=True, eq=False)
class Logic(Expr):
    op: str  # "AND" | "OR"
    left: Expr
    right: Expr
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def evaluate(self, props: Props) -> Value:
        short = self.op == "OR"  # OR stops at TRUE, AND at FALSE
        lv = _as_bool(self.left.evaluate(props))
        if lv is short:
            return short
        rv = _as_bool(self.right.evaluate(props))
        if rv is short:
            return short
        if lv is None or rv is None:
            return None
        return not short

    def __str__(self) -> str:
        return f"({self.left} {'||' if self.op == 'OR' else '&&'} {self.right})"


def _as_bool(v: Value) -> Optional[bool]:
    if v is None or isinstance(v, bool):
        return v
    raise JavaEvalError(f"{jtype(v)} cannot be cast to java.lang.Boolean")


_ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


@dataclass(frozen=True, eq=False)
class Compare(Expr):
    op: str  # one of > >= < <=
    left: Expr
    right: Expr
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def evaluate(self, props: Props) -> Value:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            try:
                lv, rv = parse_java_double(lv), parse_java_double(rv)
            except JavaEvalError as exc:
                raise JavaEvalError(f"It's illegal to compare string by '>=', '>', '<', '<='. "
                                    f"lv={lv}, rv={rv}") from exc
        return _ORDER[self.op](java_compare(lv, rv))

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True, eq=False)
class Equal(Expr):
    left: Expr
    right: Expr
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def evaluate(self, props: Props) -> Value:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or java_equals(lv, rv):
            return True
        return java_compare(lv, rv) == 0

    def __str__(self) -> str:
        return f"({self.left} == {self.right})"


@dataclass(frozen=True, eq=False)
class In(Expr):
    prop: Prop
    values: frozenset[str]
    negated: bool
    boolean = True

    @property
    def children(self) -> tuple[Expr, ...]:
        return (self.prop,)

    def evaluate(self, props: Props) -> Value:
        v = self.prop.evaluate(props)
        if v is None or not isinstance(v, str):
            return None
        return (v in self.values) != self.negated

    def __str__(self) -> str:
        items = ", ".join(sorted(self.values))
        return f"{self.prop} {'NOT IN' if self.negated else 'IN'} ( {items} )"


# -- factories: RocketMQ's create-time checks ----------------------------------------------------
def as_boolean(e: Expr) -> Expr:
    """``SelectorParser.asBooleanExpression``."""
    if e.boolean:
        return e
    if isinstance(e, Prop):
        return BooleanCast(e)
    raise SelectorBuildError(f"Expression will not result in a boolean value: {e}")


def _check_less_than_operand(e: Expr) -> None:
    if isinstance(e, Const):
        v = e.value
        if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)):
            return
        raise SelectorBuildError(f"Value '{e}' cannot be compared.")
    if e.boolean:
        raise SelectorBuildError(f"Value '{e}' cannot be compared.")


def create_compare(op: str, left: Expr, right: Expr) -> Expr:
    _check_less_than_operand(left)
    _check_less_than_operand(right)
    return Compare(op, left, right)


def create_equal(left: Expr, right: Expr) -> Expr:
    for e in (left, right):
        if isinstance(e, Const) and e.value is None:
            raise SelectorBuildError(f"'{e}' cannot be compared.")
    if isinstance(left, Const) and isinstance(right, Const) and left.boolean and not right.boolean:
        raise SelectorBuildError(f"'{left}' cannot be compared with '{right}'")
    return Equal(left, right)


def create_not_equal(left: Expr, right: Expr) -> Expr:
    return Not(create_equal(left, right))


def create_is_null(left: Expr, negated: bool) -> Expr:
    e: Expr = Equal(left, Const(None))
    return Not(e) if negated else e


def create_between(value: Expr, low: Expr, high: Expr) -> Expr:
    if isinstance(low, Const) and isinstance(high, Const):
        lv, hv = low.value, high.value
        if lv is None or hv is None:
            raise SelectorBuildError("Illegal values of between, values can not be null!")
        try:
            order = java_compare(hv, lv)
        except JavaEvalError as exc:
            raise SelectorBuildError(str(exc)) from exc
        if order < 0:
            raise SelectorBuildError(f"Illegal values of between, left value({low}) must less "
                                     f"than or equal to right value({high})")
    return Logic("AND", create_compare(">=", value, low), create_compare("<=", value, high))


def create_not_between(value: Expr, low: Expr, high: Expr) -> Expr:
    return Logic("OR", create_compare("<", value, low), create_compare(">", value, high))


def create_in(left: Expr, values: list[str], negated: bool) -> Expr:
    if not isinstance(left, Prop):
        raise SelectorBuildError(f"Expected a property for In expression, got: {left}")
    return In(left, frozenset(values), negated)


def create_logic(op: str, left: Expr, right: Expr) -> Expr:
    return Logic(op, as_boolean(left), as_boolean(right))


def create_not(e: Expr) -> Expr:
    return Not(as_boolean(e))


def create_decimal(text: str) -> Const:
    """``ConstantExpression.createFromDecimal``: an Integer when it fits, else a Long."""
    if text[-1] in "lL":
        text = text[:-1]
    v = int(text)
    if v > (1 << 63) - 1:
        raise SelectorBuildError(f'For input string: "{text}"')
    return Const(v if v <= (1 << 31) - 1 else JLong(v))


_DOUBLE_MIN = 5e-324


def create_float(text: str) -> Const:
    """``ConstantExpression.createFloat``: a Double in [Double.MIN_VALUE, Double.MAX_VALUE]."""
    v = float(text)
    if v == float("inf"):
        raise SelectorBuildError(f"{text} is greater than {1.7976931348623157e308}")
    if v < _DOUBLE_MIN:  # 0.0 too: RocketMQ compares with the smallest *positive* double
        raise SelectorBuildError(f"{text} is less than {4.9e-324}")
    return Const(v)
