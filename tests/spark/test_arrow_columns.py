"""The vectorised property parser equals the codec's ``string_to_properties`` on any input."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from rocketstore.format.message import string_to_properties
from rocketstore.spark import arrow_columns
from rocketstore.spark.arrow_columns import PropertyColumns

_piece = st.lists(st.sampled_from(["a", "K", "é", "主", " ", "\x01", "\x02", "TAGS", "KEYS", ""]),
                  max_size=4).map("".join)


def _python(raw):
    return [string_to_properties(r) for r in raw]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(_piece, _piece), max_size=5), max_size=8))
def test_property_columns_match_the_codec(records):
    raw = ["".join(f"{k}\x01{v}\x02" if i % 2 == 0 else f"{k}\x01{v}" + "\x02" * (i % 3 == 1)
                   for i, (k, v) in enumerate(entries)) for entries in records]
    want = _python(raw)
    p = PropertyColumns(raw)
    if not p.exact:  # a repeated name: the caller falls back to the Python parser
        assert any(len(d) < sum(1 for it in r.split("\x02") if 0 < it.find("\x01") < len(it) - 1)
                   for d, r in zip(want, raw))
        return
    got = [dict(m) if m is not None else {} for m in p.map_column().to_pylist()]
    assert got == want
    assert p.get("TAGS").to_pylist() == [d.get("TAGS") for d in want]
    assert p.keys_column().to_pylist() == [[x for x in d["KEYS"].split(" ") if x] if "KEYS" in d else []
                                           for d in want]


def test_typical_rocketmq_properties():
    rnd = random.Random(3)
    raw = [f"KEYS\x01k{i} u{i % 7}\x02UNIQ_KEY\x01{rnd.getrandbits(64):X}\x02TAGS\x01T{i % 3}\x02"
           f"CLUSTER\x01DefaultCluster" for i in range(1000)] + ["", "WAIT\x01true\x02"]
    p = PropertyColumns(raw)
    assert p.exact
    assert [dict(m) for m in p.map_column().to_pylist()] == _python(raw)


def _parsed(fn, raw):
    """(kind, value) of a properties parser: plain lists, or the exception type."""
    try:
        keys, vals, parent, exact = fn(raw)
    except Exception as exc:  # the comparison is over types
        return ("raise", type(exc))
    return ("ok", str(keys.type), keys.to_pylist(), str(vals.type), vals.to_pylist(),
            str(parent.dtype), parent.tolist(), exact)


def _compiled():
    from rocketstore import _native
    if _native.PURE_PYTHON:
        pytest.skip("ROCKETSTORE_PURE_PYTHON is set: the compiled parser is not loaded")
    try:
        from rocketstore.spark import _speedups
    except ImportError as exc:  # a build without a C compiler
        pytest.skip(f"the compiled parser is not built ({exc})")
    return _speedups


_odd = st.lists(st.sampled_from(["a", "é", "主", "😀", "\x00", "\x01", "\x02", "\x01\x01", "\x02\x02",
                                 "TAGS", "\ud800", ""]), max_size=8).map("".join)


def test_the_compiled_parser_is_used():
    fast = _compiled()
    assert arrow_columns._parse_properties is fast._parse_properties


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.tuples(_piece, _piece), max_size=5), max_size=8) |
       st.lists(_odd, max_size=8))
def test_compiled_parser_matches_the_arrow_one(records):
    """``_speedups._parse_properties`` against ``arrow_columns._parse_properties_py`` (the
    specification), including repeated names, empty names/values, NULs, non-BMP characters and
    a lone surrogate (not UTF-8: both raise, or the compiled one hands it to the pure one)."""
    fast = _compiled()
    if records and isinstance(records[0], list):
        raw = ["".join(f"{k}\x01{v}\x02" if i % 2 == 0 else f"{k}\x01{v}" + "\x02" * (i % 3 == 1)
                       for i, (k, v) in enumerate(entries)) for entries in records]
    else:
        raw = list(records)
    assert _parsed(fast._parse_properties, raw) == _parsed(arrow_columns._parse_properties_py, raw)


@pytest.mark.parametrize("raw", [("a\x01b",), [None], [b"a\x01b"], []])
def test_compiled_parser_matches_on_odd_arguments(raw):
    fast = _compiled()
    assert _parsed(fast._parse_properties, raw) == _parsed(arrow_columns._parse_properties_py, raw)
