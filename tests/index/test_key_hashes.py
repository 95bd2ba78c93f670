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
