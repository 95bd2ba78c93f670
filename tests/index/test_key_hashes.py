"""The vectorised index key hash equals Java's String.hashCode rule key by key."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.format.hashing import index_key_hash, java_hash
from rocketstore.format.index_layout import index_key_hashes, java_hashes

REFERENCE = {"Aa": 2112, "BB": 2112, "AaTopic#Aa": -10606476, "polygenelubricants": -(1 << 31),
             "StoreTest#Hello": -1707377374, "FooBar#Hello": -101609924, "été": 227742, "😀": 1772899}


def test_jdk_reference_values():
    keys = list(REFERENCE)
    assert [int(h) for h in java_hashes(keys)] == list(REFERENCE.values())
    assert [int(h) for h in index_key_hashes(keys)] == [2112, 2112, 10606476, 0, 1707377374,
                                                        101609924, 227742, 1772899]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
                | st.text(alphabet="ab\x00😀é", max_size=12), max_size=60))
def test_matches_scalar_hash(keys):
    assert [int(h) for h in java_hashes(keys)] == [java_hash(k) for k in keys]
    assert [int(h) for h in index_key_hashes(keys)] == [index_key_hash(k) for k in keys]


def test_chunks_and_long_keys():
    keys = [f"T#{'x' * (i % 300)}{i}" for i in range(70_000)]
    got = index_key_hashes(keys)
    for i in range(0, 70_000, 997):
        assert int(got[i]) == index_key_hash(keys[i])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=10)), max_size=40))
def test_prefixed_hashes_equal_hash_of_concatenation(pairs):
    from rocketstore.format.index_layout import prefixed_index_key_hashes
    import numpy as np
    pre = np.array([java_hash(p + "#") for p, _ in pairs], dtype=np.int64)
    got = prefixed_index_key_hashes(pre, [k for _, k in pairs])
    assert [int(x) for x in got] == [index_key_hash(f"{p}#{k}") for p, k in pairs]


def test_hash_columns_equal_key_strings():
    from .index_helpers import MiniLog
    from rocketstore.format.message import TRANSACTION_ROLLBACK_TYPE
    from rocketstore.store.index_file import index_key_hash_columns, index_keys
    log = MiniLog()
    log.append("日志主题", "键-1  k2 ", uniq="U1")
    log.append("T😀", ["x😀", "x😀"])
    log.append("AaTopic", ["Aa"], uniq="U3", sys_flag=TRANSACTION_ROLLBACK_TYPE)
    log.append("T", None)
    log.append("BBTopic", ["BB", "polygenelubricants"], uniq="U5")
    recs = log.records()
    keys, owner = index_keys(recs)
    assert keys == ["日志主题#U1", "日志主题#键-1", "日志主题#k2", "T😀#x😀", "T😀#x😀",
                    "BBTopic#U5", "BBTopic#BB", "BBTopic#polygenelubricants"]
    hashes, owner2 = index_key_hash_columns(recs)
    assert owner.tolist() == owner2.tolist() == [0, 0, 0, 1, 1, 4, 4, 4]
    assert [int(h) for h in hashes] == [index_key_hash(k) for k in keys]
