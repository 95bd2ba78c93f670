"""The compiled ``java_hash`` (``format/_speedups_hash.pyx``) against its pure twin."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import _native
from rocketstore.format import hashing

pytestmark = pytest.mark.skipif(
    _native.PURE_PYTHON or not _native.active().get("rocketstore.format._speedups_hash"),
    reason="the compiled java_hash is not loaded (ROCKETSTORE_PURE_PYTHON set, or not built)")


def outcome(fn, s):
    try:
        return ("ok", fn(s))
    except Exception as exc:  # the same kind of error on both paths
        return ("error", type(exc))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=127)),
                 st.from_regex(r"[A-Za-z0-9%#_-]{0,80}", fullmatch=True)))
def test_compiled_java_hash_equals_the_pure_one(s):
    assert outcome(hashing.java_hash, s) == outcome(hashing.java_hash_py.__wrapped__, s)


def test_known_values_and_odd_input():
    assert hashing.java_hash is not hashing.java_hash_py
    assert hashing.java_hash("Aa") == hashing.java_hash("BB") == 2112  # why keys are compared
    assert hashing.java_hash("TagA") == 2598919
    assert hashing.java_hash("polygenelubricants") == -2**31
    assert hashing.java_hash("") == 0
    assert hashing.java_hash("😀") == hashing.java_hash_py("😀")  # a surrogate pair in Java
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: the pure path's error
        hashing.java_hash("\ud800")
