"""Hypothesis: generated selectors evaluated by the compiler agree with a plain model.

The model is written here from RocketMQ's documented rules, over the generated tree itself
(not over our parse): three-valued AND/OR/NOT, comparisons of a String property with an
integer literal through ``Integer.valueOf`` (a property that is not an integer is an error,
so the message does not match), string equality only, IN on the property's String, IS NULL.
Rendering the tree as text and compiling it also checks precedence and literal handling.
"""
from hypothesis import given, settings, strategies as st

from rocketstore.filter import compile_sql92

NAMES = ("a", "b", "c")
WORDS = ("x", "y", "it's")
ERROR = object()  # evaluation threw: the message does not match


class Err(Exception):
    pass


ints = st.integers(min_value=0, max_value=12)
prop_values = st.one_of(ints.map(str), st.sampled_from(WORDS))
props_st = st.dictionaries(st.sampled_from(NAMES), prop_values)

leaf = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(NAMES), st.sampled_from(["=", "<>", ">", ">=", "<", "<="]), ints),
    st.tuples(st.just("streq"), st.sampled_from(NAMES), st.sampled_from(["=", "<>"]), st.sampled_from(WORDS)),
    st.tuples(st.just("in"), st.sampled_from(NAMES), st.booleans(),
              st.lists(st.sampled_from(WORDS + ("3", "7")), min_size=1, max_size=4)),
    st.tuples(st.just("null"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("between"), st.sampled_from(NAMES), st.booleans(), ints, ints).filter(lambda t: t[3] <= t[4]),
)
trees = st.recursive(leaf, lambda sub: st.one_of(
    st.tuples(st.sampled_from(["AND", "OR"]), sub, sub),
    st.tuples(st.just("NOT"), sub)), max_leaves=8)


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render(t) -> str:
    k = t[0]
    if k == "cmp":
        return f"{t[1]} {t[2]} {t[3]}"
    if k == "streq":
        return f"{t[1]} {t[2]} {quote(t[3])}"
    if k == "in":
        return f"{t[1]} {'NOT IN' if t[2] else 'IN'} ({', '.join(quote(v) for v in t[3])})"
    if k == "null":
        return f"{t[1]} IS {'NOT ' if t[2] else ''}NULL"
    if k == "between":
        return f"{t[1]} {'NOT BETWEEN' if t[2] else 'BETWEEN'} {t[3]} AND {t[4]}"
    if k == "NOT":
        return f"NOT ({render(t[1])})"
    return f"({render(t[1])}) {k} ({render(t[2])})"


def as_int(v: str) -> int:
    if v.isdigit():
        return int(v)
    raise Err


def model(t, props):
    k = t[0]
    if k == "cmp":
        v = props.get(t[1])
        if v is None:
            return None
        n = as_int(v)
        return {"=": n == t[3], "<>": n != t[3], ">": n > t[3], ">=": n >= t[3],
                "<": n < t[3], "<=": n <= t[3]}[t[2]]
    if k == "streq":
        v = props.get(t[1])
        if v is None:
            return None
        return (v == t[3]) == (t[2] == "=")
    if k == "in":
        v = props.get(t[1])
        if v is None:
            return None
        return (v in t[3]) != t[2]
    if k == "null":
        return (props.get(t[1]) is None) != t[2]
    if k == "between":
        v = props.get(t[1])
        if v is None:
            return None
        n = as_int(v)
        inside = t[3] <= n <= t[4]
        return inside != t[2]
    if k == "NOT":
        v = model(t[1], props)
        return None if v is None else not v
    left = model(t[1], props)
    stop = k == "OR"  # OR stops at TRUE, AND at FALSE
    if left is stop:
        return stop
    right = model(t[2], props)
    if right is stop:
        return stop
    if left is None or right is None:
        return None
    return not stop


def model_matches(t, props) -> bool:
    try:
        return model(t, props) is True
    except Err:
        return False


@settings(max_examples=400, deadline=None)
@given(trees, props_st)
def test_compiled_selector_agrees_with_model(tree, props):
    expr = compile_sql92(render(tree))
    assert expr.matches(props) == model_matches(tree, props)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), props_st)
def test_any_text_compiles_or_fails_cleanly(text, props):
    from rocketstore.filter import SelectorSyntaxError
    try:
        expr = compile_sql92(text)
    except SelectorSyntaxError as exc:
        assert str(exc).startswith("Invalid MessageSelector. ")
        return
    assert expr.matches(props) in (True, False)
