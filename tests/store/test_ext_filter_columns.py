"""The pull path's batch property reader answers as the per-record properties decoder."""
import numpy as np
from hypothesis import given, settings, strategies as st

from rocketstore.format.message import string_to_properties
from rocketstore.store.ext_filter import _property_columns

names = st.sampled_from(["a", "b", "region", "xa", "a2"])
values = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", max_codepoint=0x3000),
                 max_size=6)
ascii_values = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", max_codepoint=0x7F),
                       max_size=6)
entries = st.lists(st.tuples(names, values), max_size=6)
ascii_entries = st.lists(st.tuples(names, ascii_values), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(entries, ascii_entries), min_size=1, max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_columns_equal_string_to_properties(records, trailing):
    # (all-ASCII batches take the numpy byte search, others the per-record path; a record's
    # last entry may lack its trailing separator)
    texts = ["".join(f"{k}\x01{v}\x02" for k, v in rec) for rec in records]
    texts = [t[:-1] if t and not keep else t for t, keep in zip(texts, trailing)]
    raw = [t.encode("utf-8") for t in texts]
    # lay the property bytes out as records would be: a record = 2-byte length + bytes
    buf = bytearray()
    starts = []
    for r in raw:
        buf += b"\x00" * 7  # unrelated bytes between records
        starts.append(len(buf))
        buf += r
    arr = np.frombuffer(bytes(buf), dtype=np.uint8)
    import rocketstore.store.ext_filter as ef
    spans = (np.asarray(starts, dtype=np.int64), np.asarray([len(r) for r in raw], dtype=np.int64))
    orig = ef._property_spans
    ef._property_spans = lambda a, p, s: spans
    try:
        cols = _property_columns(arr, spans[0], spans[1], ["a", "region"])
    finally:
        ef._property_spans = orig
    for i, t in enumerate(texts):
        want = string_to_properties(t)
        assert cols["a"][i] == want.get("a")
        assert cols["region"][i] == want.get("region")
