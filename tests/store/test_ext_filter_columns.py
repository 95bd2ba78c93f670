"""The pull path's batch SQL92 evaluation answers as the per-record decoder and evaluator do.

Three levels: the property search over a blob of properties strings against
``string_to_properties`` (generated strings: duplicates, empty values, missing trailing
separators, names that prefix each other, non-ASCII and invalid UTF-8); the numpy evaluator
against ``expr.matches`` on generated expressions; and whole drains of a real store (records
with v4 and v6 hosts, over several CommitLog segments) against ``expr.matches`` of the
properties each message was sent with.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st

from rocketstore import GetStatus, Message, MessageStore
from rocketstore.broker.state.filters import (ConsumerFilterData, ConsumerFilterRegistry,
                                              ExpressionMessageFilter)
from rocketstore.filter import compile_sql92
from rocketstore.filter.columns import _int_of, evaluate_blob
from rocketstore.filter.propblob import from_texts
from rocketstore.format.message import string_to_properties

from ..conftest import small_config

names = st.sampled_from(["a", "b", "region", "xa", "a2", "é"])
text_values = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", max_codepoint=0x3000),
                      max_size=6)
number_values = st.from_regex(r"[+-]?[0-9]{0,11}", fullmatch=True)
values = st.one_of(text_values, number_values, st.sampled_from(["eu", "us", "5", "-3", "+7", "\ufffd"]))
entries = st.lists(st.tuples(names, values), max_size=6)


def _raw(entries_, keep_last_sep: bool, junk: bytes) -> bytes:
    raw = "".join(f"{k}\x01{v}\x02" for k, v in entries_).encode("utf-8")
    if raw and not keep_last_sep:
        raw = raw[:-1]
    return raw + junk  # junk: an entry that is not UTF-8, or one without a value separator


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(entries, st.booleans(), st.sampled_from([b"", b"b\x01\xff\xfe", b"zz"])),
                min_size=1, max_size=10))
def test_columns_equal_string_to_properties(records):
    raws = [_raw(e, keep, junk) for e, keep, junk in records]
    blob = from_texts(raws)
    for name in ["a", "region", "é", "b"]:
        got = blob.strings(name)
        want = [string_to_properties(r.decode("utf-8", "replace")).get(name) for r in raws]
        assert got == want, name
        col = blob.column(name)
        for lit in ["eu", "5", "\ufffd", "é", ""]:
            eq = blob.equals(col, lit)
            assert [bool(p and e) for p, e in zip(col.present, eq)] == [w == lit for w in want]
        ok, val = blob.small_ints(col)
        for w, o, v in zip(want, ok.tolist(), val.tolist()):
            simple = w is not None and _int_of(w) is not None
            if o:  # (nine digits are left to the exact path)
                assert simple and v == int(w)
            else:
                assert not simple or len(w.lstrip("+-")) == 9


# expressions over the generated properties: every shape the numpy evaluator handles itself,
# and some it hands to the exact per-message path
EXPRESSIONS = [
    "a = 'eu'", "region = 'eu'", "a <> 'eu'", "a IN ('eu', 'us', '5')", "a NOT IN ('eu')",
    "a IS NULL", "a IS NOT NULL", "a > 3", "a >= -3", "a < 7", "a <= 5", "a = 5", "a <> 5",
    "a BETWEEN 1 AND 6", "a NOT BETWEEN 1 AND 6", "a = 'eu' AND b = 'us'", "a = 'eu' OR b > 2",
    "NOT (a = 'eu' OR b IS NULL)", "(a > 3) AND (b < 1000000000000)", "a = 5.0", "a > 2.5",
    "'eu' = a", "a = TRUE", "a = 'é'", "a = '\ufffd'", "b AND a = 'eu'", "a = 2147483648",
    "region IN ('eu') OR (a IS NULL AND b <> 'x')",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(entries, min_size=1, max_size=12))
def test_numpy_evaluation_equals_per_message(records):
    raws = [_raw(e, True, b"") for e in records]
    blob = from_texts(raws)
    props = [string_to_properties(r.decode("utf-8", "replace")) for r in raws]
    for text in EXPRESSIONS:
        expr = compile_sql92(text)
        got = evaluate_blob(expr, blob).tolist()
        assert got == [expr.matches(p) for p in props], text


def _drain(store, topic, qid, flt):
    out, off = [], 0
    while True:
        g = store.get_message("g", topic, qid, off, 32, None, decode=True, message_filter=flt)
        if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
            return out
        out += [m.body for m in g.messages]
        off = g.next_begin_offset


def test_store_drain_matches_per_message(tmp_path):
    """Real records: v4 and v6 hosts, several CommitLog segments, properties with non-ASCII and
    numbers; every SQL92 pull gives exactly the messages whose sent properties match."""
    rng = random.Random(17)
    sent = []
    with MessageStore(small_config(tmp_path, mapped_file_size_commitlog=16 * 1024)) as store:
        for i in range(600):
            props = {}
            if rng.random() < 0.8:
                props["a"] = rng.choice(["eu", "us", "5", "-3", "+7", "12", "x" * rng.randint(1, 300),
                                         "é", "4.5", str(rng.randint(-20, 20))])
            if rng.random() < 0.5:
                props["b"] = str(rng.randint(0, 10)) if rng.random() < 0.8 else "us"
            host = "[::1]:5000" if i % 7 == 0 else "127.0.0.1:5000"
            msg = Message(topic="T", body=b"m%d" % i, tags="t", properties=props or None, queue_id=i % 2,
                          born_host=host, store_host=host)
            store.put_message(msg)
            sent.append((i % 2, b"m%d" % i, props))
        assert store.wait_dispatched(10)
        assert len(store.commitlog.queue.files) > 3
        for text in EXPRESSIONS:
            expr = compile_sql92(text)
            flt = ExpressionMessageFilter(ConsumerFilterData("g", "T", text, "SQL92", expr, born_time=0),
                                          ConsumerFilterRegistry(None).bloom)
            for q in (0, 1):
                want = [body for qid, body, props in sent if qid == q and expr.matches(props)]
                assert _drain(store, "T", q, flt) == want, text


@pytest.mark.parametrize("text", ["a = 'eu'", "a > 3"])
def test_damaged_record_is_judged_on_its_own(tmp_path, text):
    """A record whose lengths do not add up is left to the per-unit path (which reads and
    judges it alone); the others in its batch are still filtered in one pass."""
    with MessageStore(small_config(tmp_path)) as store:
        for i in range(40):
            store.put_message(Message(topic="T", body=b"m%d" % i, properties={"a": "eu" if i % 2 else "9"}))
        assert store.wait_dispatched(5)
        expr = compile_sql92(text)
        flt = ExpressionMessageFilter(ConsumerFilterData("g", "T", text, "SQL92", expr, born_time=0),
                                      ConsumerFilterRegistry(None).bloom)
        before = _drain(store, "T", 0, flt)
        cq = store.cq_table.find("T", 0)
        u = cq.read_units(10, 1)
        off = int(u["offset"][0])
        mf = store.commitlog.segment_at(off)
        pos = off - mf.file_from_offset
        mf.mm[pos + 84:pos + 88] = (10 ** 6).to_bytes(4, "big")  # body length past the record
        after = _drain(store, "T", 0, flt)
        assert after == [b for b in before if b != b"m10"]
