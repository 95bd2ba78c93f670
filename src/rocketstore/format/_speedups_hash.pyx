# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``hashing.java_hash`` (Java's ``String.hashCode``), same results.

``hashing.py`` holds the pure definition and is the specification; ``tests/format/
test_speedups_hash.py`` compares the two with hypothesis. The twin computes ASCII strings — index
keys (``topic#key``, ``topic#UNIQ_KEY``) and tags nearly always are — in one C loop and hands any
other string to the pure function (UTF-16 code units, and its error for a lone surrogate), so
the rare paths are the pure ones. Every message's UNIQ_KEY is hashed once by the index
dispatch; in Python that was ~3 µs a key.
"""
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

cdef object _pure = None


def bind(pure):
    """Give the twin the pure function it hands non-ASCII strings to."""
    global _pure
    _pure = pure


def java_hash(s):
    cdef Py_ssize_t n, i
    cdef const char* p
    cdef unsigned int h = 0
    if type(s) is not str or not (<str>s).isascii():
        return _pure(s)
    p = PyUnicode_AsUTF8AndSize(s, &n)
    for i in range(n):
        h = 31 * h + <unsigned char>p[i]
    return <int>h
