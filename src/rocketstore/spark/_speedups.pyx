# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the Spark file source's properties parser (same name, same results).

``arrow_columns._parse_properties_py`` (Arrow compute kernels over the raw properties strings)
is the specification: ``_parse_properties`` here returns equal arrays for the same input
(``tests/spark/test_arrow_columns.py`` compares them with hypothesis). It walks each string's
UTF-8 once in C — entries split on ``\\x02``, name and value on the first ``\\x01``, entries with
an empty name or value dropped, a repeated name within a record noted — and hands Arrow the
name and value bytes as two string arrays. A list holding anything but ``str`` (or a string
that is not valid UTF-8 text) goes to the pure function.

``arrow_columns`` picks it up at import unless ``ROCKETSTORE_PURE_PYTHON=1``; see
``rocketstore/_native.py``.
"""
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcmp, memchr, memcpy
from libc.stdlib cimport malloc, free

import numpy as np
import pyarrow as pa

from . import arrow_columns as _pure


cdef class _Bytes:
    """A growing byte buffer with int32 offsets (one Arrow string array)."""
    cdef bytearray data
    cdef Py_ssize_t used
    cdef object offs

    def __cinit__(self, Py_ssize_t cap):
        self.data = bytearray(max(cap, 16))
        self.used = 0

    cdef inline void add(self, const char* p, Py_ssize_t n):
        cdef Py_ssize_t cap = len(self.data)
        if self.used + n > cap:
            self.data.extend(bytes(max(cap, n)))
        memcpy(<char*>self.data + self.used, p, n)
        self.used += n


def _parse_properties(raw):
    """See ``arrow_columns._parse_properties_py``: (names, values, parent row, exact)."""
    if type(raw) is not list:
        return _pure._parse_properties_py(raw)
    cdef Py_ssize_t n = len(raw), r, size, total = 0, m = 0, i, j
    cdef const char* s
    cdef const char* end
    cdef const char* item
    cdef const char* item_end
    cdef const char* sep
    for x in raw:
        if type(x) is not str:
            return _pure._parse_properties_py(raw)
        try:
            PyUnicode_AsUTF8AndSize(x, &size)
        except UnicodeError:
            return _pure._parse_properties_py(raw)
        total += size
    if total >= 0x7FFFFFFF:  # beyond int32 offsets
        return _pure._parse_properties_py(raw)
    keys, vals = _Bytes(total), _Bytes(total)
    # at most one entry per separator: ``total // 2 + n`` bounds the entries
    cdef Py_ssize_t cap = total // 2 + n + 1
    koffs = np.empty(cap + 1, dtype=np.int32)
    voffs = np.empty(cap + 1, dtype=np.int32)
    parent = np.empty(cap, dtype=np.int64)
    cdef int[::1] ko = koffs
    cdef int[::1] vo = voffs
    cdef long long[::1] pa_ = parent
    cdef bint exact = True
    cdef Py_ssize_t first, klen
    ko[0] = 0
    vo[0] = 0
    for r in range(n):
        s = PyUnicode_AsUTF8AndSize(raw[r], &size)
        end = s + size
        item = s
        first = m
        while True:
            item_end = <const char*>memchr(item, 2, end - item) if item < end else NULL
            if item_end == NULL:
                item_end = end
            sep = <const char*>memchr(item, 1, item_end - item) if item < item_end else NULL
            if sep != NULL and sep > item and sep + 1 < item_end:
                klen = sep - item
                if exact:
                    for j in range(first, m):
                        if ko[j + 1] - ko[j] == klen and memcmp(
                                <char*>keys.data + ko[j], item, klen) == 0:
                            exact = False
                            break
                keys.add(item, klen)
                vals.add(sep + 1, item_end - sep - 1)
                ko[m + 1] = <int>keys.used
                vo[m + 1] = <int>vals.used
                pa_[m] = r
                m += 1
            if item_end >= end:
                break
            item = item_end + 1
    kdata = bytes(keys.data[:keys.used])
    vdata = bytes(vals.data[:vals.used])
    names = pa.StringArray.from_buffers(m, pa.py_buffer(koffs[:m + 1]), pa.py_buffer(kdata))
    values = pa.StringArray.from_buffers(m, pa.py_buffer(voffs[:m + 1]), pa.py_buffer(vdata))
    return names, values, parent[:m].copy(), exact
