"""RocketMQ's bloom filter: positions and sizes as the Java build computes them."""
from rocketstore.filter.bloom import BloomFilter

# printed by RocketMQ 4.9.7's BloomFilter.createByFn(20, 32).calcBitPositions(s) (Guava murmur3)
JAVA_POSITIONS = {
    "g#T": (90, 68, 28),
    "groupA#TopicTest": (49, 5, 28),
    "": (0, 0, 0),
    "a-very-long-consumer-group-name-0123456789#topic-xyz": (44, 6, 63),
    "ü日本#t": (108, 22, 63),
}


def test_default_sizes_and_positions_match_java():
    bf = BloomFilter(20, 32)
    assert (bf.k, bf.m) == (3, 112)
    for s, pos in JAVA_POSITIONS.items():
        assert bf.calc_bit_positions(s) == pos


def test_other_parameters_match_java():
    bf = BloomFilter(10, 64)
    assert (bf.k, bf.m) == (4, 312)
    assert bf.calc_bit_positions("x#y") == (134, 259, 29, 144)


def test_hash_to_and_hit():
    bf = BloomFilter()
    a, b = bf.generate("ga#T"), bf.generate("gb#T")
    bits = bytearray(bf.byte_length)
    bf.hash_to(a, bits)
    assert bf.is_hit(a, bits)
    assert bf.is_hit(b, bits) == all(p in a.bit_pos for p in b.bit_pos)
