"""The compiled batch decoder loops (``format/_speedups_batch.pyx``) against their pure-Python twins.

Every compiled function must return what the pure function in ``format/batch.py`` (the
specification) returns, and raise the same exception type, over inputs hypothesis draws: whole
CommitLog segments with IPv4/IPv6 hosts, blank records and zeros, cut anywhere and with bytes
overwritten; strings with invalid UTF-8, raw 0xFF bytes and surrogates; properties strings with
repeated, empty and separator-only entries; ranges outside the buffer. A whole
``decode_records`` call is compared with each path bound in turn. Skipped, visibly, where the
compiled module was not built or ``ROCKETSTORE_PURE_PYTHON`` is set.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import _native
from rocketstore.format import batch as fb
from rocketstore.format.message import (SCHEDULE_TOPIC, Message, encode_blank, encode_message,
                                        patch_record)
from tests.conftest import compiled_or_skip

fast = compiled_or_skip("rocketstore.format._speedups_batch", "decoder")

TWINS = {"scan_boundaries": "scan_boundaries_py", "_decode_topics": "_decode_topics_py",
         "_gather_strings": "_gather_strings_py", "_tags_codes": "_tags_codes_py",
         "extract_property": "extract_property_py"}


def test_batch_uses_the_compiled_functions():
    for name in TWINS:
        assert getattr(fb, name) is getattr(fast, name), name
    assert _native.active()["rocketstore.format._speedups_batch"] is True


def test_pure_python_variable_loads_no_compiled_decoder():
    code = ("from rocketstore.format import batch as fb; from rocketstore import _native;"
            "print(all(getattr(fb, n) is getattr(fb, p) for n, p in %r.items()),"
            " _native.active()['rocketstore.format._speedups_batch'])" % TWINS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROCKETSTORE_PURE_PYTHON": "1"}).stdout
    assert out.strip() == "True False"


def plain(v):
    if isinstance(v, np.ndarray):
        return ("array", str(v.dtype), v.tolist())
    if isinstance(v, tuple):
        return tuple(plain(x) for x in v)
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def outcome(fn, *args):
    """(kind, value): the result, or the exception type."""
    try:
        return ("ok", plain(fn(*args)))
    except Exception as exc:  # the comparison is over types
        return ("raise", type(exc))


host = st.sampled_from([("127.0.0.1:1", "10.0.0.1:2"), ("[::1]:3", "127.0.0.1:4"),
                        ("1.2.3.4:5", "[2001:db8::1]:6")])
msg = st.builds(Message, topic=st.sampled_from(["A", "Bb", "日志主题", "T" * 127, SCHEDULE_TOPIC]),
                body=st.binary(max_size=80),
                tags=st.one_of(st.none(), st.sampled_from(["TagA", "x", "标签"])),
                keys=st.one_of(st.none(), st.lists(st.sampled_from(["k1", "k2", "键"]), max_size=3)),
                properties=st.dictionaries(st.sampled_from(["a", "DELAY", "TAGS2", "ü"]),
                                           st.sampled_from(["1", "3", "v", "x y", "99"]),
                                           max_size=2),
                queue_id=st.integers(0, 7))


def segment(items, blank: bool, zeros: int) -> bytes:
    buf = bytearray()
    for i, (m, (born, store)) in enumerate(items):
        enc = encode_message(m, m.all_properties(), born_timestamp=i, born_host=born,
                             store_host=store, max_body_size=1 << 20)
        data = bytearray(enc.data)
        patch_record(data, 0, enc.store_ts_pos, i, len(buf), 5000 + i)
        buf += data
    if blank:
        at = len(buf)
        buf += bytes(64)
        encode_blank(buf, at, 64)
    return bytes(buf + bytes(zeros))


segments = st.builds(segment, st.lists(st.tuples(msg, host), max_size=12), st.booleans(),
                     st.integers(0, 16))
flips = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3)


def damaged(seg: bytes, cut: int, changes) -> bytes:
    out = bytearray(seg[:cut] if cut < len(seg) else seg)
    for pos, value in changes:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seg=segments, cut=st.integers(0, 4000), changes=flips, start=st.integers(-2, 300),
       stop=st.integers(-2, 4100), limit=st.none() | st.integers(-1, 6))
def test_walk_matches(seg, cut, changes, start, stop, limit):
    for data in (seg, damaged(seg, cut, changes)):
        for args in ((0, len(data), limit), (start % (len(data) + 1), len(data), None),
                     (0, stop, limit), (start, stop, limit)):
            for buf in (data, bytearray(data), memoryview(data)):
                assert outcome(fast.scan_boundaries, buf, *args) == \
                    outcome(fb.scan_boundaries_py, buf, *args), args


@pytest.mark.parametrize("args", [(b"", 0, 0), (b"abc", 0, 3), (b"\0" * 8, 0, 8), ("text", 0, 4),
                                  (b"\0" * 16, 0.0, 8), (b"\0" * 16, 0, 8, 1.5), (None, 0, 0)])
def test_walk_matches_on_odd_arguments(args):
    assert outcome(fast.scan_boundaries, *args) == outcome(fb.scan_boundaries_py, *args)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seg=segments, cut=st.integers(0, 4000), changes=flips, crc=st.booleans())
def test_whole_decode_matches(seg, cut, changes, crc):
    """``decode_records`` with every twin compiled, then every twin pure: equal columns."""
    def run(data, compiled):
        saved = {n: getattr(fb, n) for n in TWINS}
        for n, p in TWINS.items():
            setattr(fb, n, getattr(fast, n) if compiled else getattr(fb, p))
        try:
            r = fb.decode_records(data, check_crc=crc)
            return {k: plain(v) for k, v in dataclasses.asdict(r).items()}
        except Exception as exc:  # the comparison is over types
            return type(exc)
        finally:
            for n, f in saved.items():
                setattr(fb, n, f)

    for data in (seg, damaged(seg, cut, changes)):
        assert run(data, True) == run(data, False)


utf8ish = st.binary(max_size=40) | st.text(max_size=12).map(lambda s: s.encode()) | st.sampled_from(
    [b"\xff", b"a\xffb", b"\xed\xa0\x80", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xf0\x9f\x98\x80",
     b"\x80abc", b"\xc0\xaf"])


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(utf8ish, max_size=8), gap=st.binary(max_size=3), extra=st.integers(-3, 3))
def test_strings_match(pieces, gap, extra):
    data = bytearray()
    starts, lengths = [], []
    for p in pieces:
        data += gap
        starts.append(len(data))
        lengths.append(len(p))
        data += p
    arr = np.frombuffer(bytes(data), dtype=np.uint8)
    st_a, ln_a = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    assert outcome(fast._gather_strings, arr, st_a, ln_a) == \
        outcome(fb._gather_strings_py, arr, st_a, ln_a)
    assert outcome(fast._decode_topics, bytes(data), st_a, ln_a) == \
        outcome(fb._decode_topics_py, bytes(data), st_a, ln_a)
    if pieces:  # lengths reaching past the buffer: the pure function decides
        ln_b = ln_a.copy()
        ln_b[-1] += extra
        for fn, pure, buf in ((fast._gather_strings, fb._gather_strings_py, arr),
                              (fast._decode_topics, fb._decode_topics_py, bytes(data))):
            got, want = outcome(fn, buf, st_a, ln_b), outcome(pure, buf, st_a, ln_b)
            assert got == want, (got, want)


names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "T", "", "TAGS\x01"])
values = st.sampled_from(["", "TagA", "a b", "x\x01y", "标签", "1", "18", "-1", "abc"])
entries = st.lists(st.tuples(names, values), max_size=5)


def props_string(es, trail: bool) -> str:
    s = "\x02".join(f"{k}\x01{v}" for k, v in es)
    return s + "\x02" if trail and s else s


raw_props = st.builds(props_string, entries, st.booleans()) | st.lists(
    st.sampled_from(["\x01", "\x02", "TAGS", "A", "ü", ""]), max_size=10).map("".join)


@settings(max_examples=400, deadline=None)
@given(raws=st.lists(raw_props, max_size=8), name=names)
def test_extract_property_matches(raws, name):
    assert outcome(fast.extract_property, raws, name) == outcome(fb.extract_property_py, raws, name)
    assert outcome(fast.extract_property, tuple(raws), name) == \
        outcome(fb.extract_property_py, tuple(raws), name)


@pytest.mark.parametrize("make", [lambda: ([None], "TAGS"), lambda: (["a\x01b"], None),
                                  lambda: ((s for s in ["TAGS\x01x"]), "TAGS"),
                                  lambda: ("TAGS\x01x", "TAGS"), lambda: ([b"TAGS\x01x"], "TAGS")])
def test_extract_property_matches_on_odd_arguments(make):
    assert outcome(fast.extract_property, *make()) == outcome(fb.extract_property_py, *make())


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["A", SCHEDULE_TOPIC, "B"]), raw_props,
                               st.integers(0, 1 << 42)), max_size=8),
       delays=st.none() | st.just((1000, 5000, 10000)))
def test_tags_codes_match(rows, delays):
    topics = [t for t, _, _ in rows]
    props = [p for _, p, _ in rows]
    ts = np.asarray([x for _, _, x in rows], dtype=np.int64)
    assert outcome(fast._tags_codes, topics, props, ts, delays) == \
        outcome(fb._tags_codes_py, topics, props, ts, delays)
