"""The SQL92 selector answers what RocketMQ 4.9.7's own parser and evaluator answered.

The answers were produced by running RocketMQ's Java classes over the same lines (see
tests/fixtures/sql92/README.md), so they are independent of the code under test.
"""
import os

from rocketstore.filter import SelectorSyntaxError, compile_sql92
from rocketstore.filter.values import JavaEvalError

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "sql92")


def _lines(name):
    with open(os.path.join(HERE, name), encoding="utf-8", newline="\n") as f:
        return f.read().split("\n")[:-1]


_COMPILED: dict = {}


def compiled(text: str):
    """compile_sql92 once per distinct expression of the fixture (an exception is kept too)."""
    if text not in _COMPILED:
        try:
            _COMPILED[text] = compile_sql92(text)
        except SelectorSyntaxError as exc:
            _COMPILED[text] = exc
    e = _COMPILED[text]
    if isinstance(e, SelectorSyntaxError):
        raise e
    return e


def our_answer(line: str) -> str:
    parts = line.split("\t")
    expr = parts[0].replace("\\n", "\n")
    props = dict(zip(parts[1::2], parts[2::2]))
    try:
        e = compiled(expr)
    except SelectorSyntaxError:
        return "PARSE_ERROR"
    try:
        v = e.evaluate(props)
    except JavaEvalError:
        return "EVAL_ERROR"
    return "NULL" if v is None else str(v).upper()


def test_every_case_answers_as_rocketmq():
    cases, answers = _lines("cases.tsv"), _lines("java_answers.txt")
    assert len(cases) == len(answers) > 4000
    ours = [our_answer(c) for c in cases]
    wrong = [(c, a, o) for c, a, o in zip(cases, answers, ours) if o != a]
    assert wrong == [], wrong[:10]
    # the fixture covers every outcome, so the comparison above means something
    assert set(answers) == {"TRUE", "FALSE", "NULL", "PARSE_ERROR", "EVAL_ERROR"}


def test_matches_is_true_only_for_true_and_never_raises():
    e = compile_sql92("a > 5")
    assert e.matches({"a": "6"}) is True
    assert e.matches({"a": "4"}) is False
    assert e.matches({}) is False            # unknown
    assert e.matches({"a": "six"}) is False  # Java throws NumberFormatException: no match


def test_error_text_is_rocketmqs_prefix():
    try:
        compile_sql92("a = ")
    except SelectorSyntaxError as exc:
        assert str(exc).startswith("Invalid MessageSelector. ")
    else:
        raise AssertionError("expected a syntax error")


def test_column_evaluation_agrees_with_rocketmq():
    """The pull path's batch evaluator (numpy over a blob of properties) gives RocketMQ's
    answer on every case: each expression over all its cases' properties in one batch."""
    from rocketstore.filter.columns import evaluate_blob
    from rocketstore.filter.propblob import from_texts
    from rocketstore.format.message import string_to_properties
    cases, answers = _lines("cases.tsv"), _lines("java_answers.txt")
    batches: dict[str, tuple] = {}
    for line, want in zip(cases, answers):
        parts = line.split("\t")
        try:
            e = compiled(parts[0].replace("\\n", "\n"))
        except SelectorSyntaxError:
            continue
        props = dict(zip(parts[1::2], parts[2::2]))
        text = "".join(f"{k}\x01{v}\x02" for k, v in props.items())
        if string_to_properties(text) != props:
            continue  # an empty value: a stored message never carries one

        _, texts, wants = batches.setdefault(parts[0], (e, [], []))
        texts.append(text.encode("utf-8"))
        wants.append(want == "TRUE")
    for text, (e, texts, wants) in batches.items():
        assert evaluate_blob(e, from_texts(texts)).tolist() == wants, text
    assert sum(len(b[2]) for b in batches.values()) > 1900  # (cases that do not parse or carry an empty value are left out)
