# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the batch decoder's per-record loops (same names, same results).

``batch.py`` holds the pure-Python definitions and is the specification: each function here
returns equal values for the same input (``tests/format/test_speedups_batch.py`` compares them with
hypothesis over well-formed, damaged and hostile CommitLog bytes). Where an input is unusual — a
range outside the buffer, a position or length out of bounds, a non-int argument, a schedule
topic — a function hands the call to its pure twin, so the rare paths are the pure ones.

What they replace (profile of the Spark file source, ``benchmarks/README.md``): the TOTALSIZE
walk (one ``struct.unpack_from`` per record), the numpy gather that decodes every properties
string, the per-record topic cache lookup, and the string search for TAGS behind the tagsCode.

``batch.py`` picks these up at import unless ``ROCKETSTORE_PURE_PYTHON=1``; see
``rocketstore/_native.py``.
"""
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp

import numpy as np

from . import batch as _pure
from .hashing import java_hash
from .message import PROPERTY_TAGS, SCHEDULE_TOPIC, string_to_properties
from .record import (BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
                     MIN_RECORD_SIZE)

cdef int _MAGIC = MESSAGE_MAGIC_CODE
cdef int _MAGIC_V2 = MESSAGE_MAGIC_CODE_V2
cdef int _BLANK = BLANK_MAGIC_CODE
cdef long _MIN_SIZE = MIN_RECORD_SIZE
cdef str _END = _pure.STOP_END
cdef str _BLANK_STOP = _pure.STOP_BLANK
cdef str _INCOMPLETE = _pure.STOP_INCOMPLETE
cdef str _CORRUPT = _pure.STOP_CORRUPT


cdef inline int _be32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16)
                 | (<unsigned int>p[2] << 8) | <unsigned int>p[3])


def scan_boundaries(buf, start, end, limit=None):
    """See ``batch.scan_boundaries``."""
    if type(start) is not int or type(end) is not int or (limit is not None and type(limit) is not int):
        return _pure.scan_boundaries_py(buf, start, end, limit)
    cdef const unsigned char[::1] view
    try:
        view = buf
    except (TypeError, ValueError, BufferError):
        return _pure.scan_boundaries_py(buf, start, end, limit)
    cdef Py_ssize_t n = view.shape[0]
    cdef Py_ssize_t s = start, e = end, pos
    if s < 0 or e > n:  # out of the buffer: the pure walk raises (or not) as struct does
        return _pure.scan_boundaries_py(buf, start, end, limit)
    cdef bint has_limit = limit is not None
    cdef Py_ssize_t lim = limit if has_limit else 0
    cdef Py_ssize_t count = 0
    cdef long size
    cdef int magic
    cdef const unsigned char* p = &view[0] if n else NULL
    positions = []
    pos = s
    while True:
        if has_limit and count >= lim:
            return positions, pos, _END
        if pos + 8 > e:
            return positions, pos, (_END if pos == e else _INCOMPLETE)
        size = _be32(p + pos)
        magic = _be32(p + pos + 4)
        if magic == _BLANK:
            return positions, pos, _BLANK_STOP
        if magic != _MAGIC and magic != _MAGIC_V2:
            return positions, pos, (_END if size == 0 and magic == 0 else _CORRUPT)
        if size < _MIN_SIZE:
            return positions, pos, _CORRUPT
        if pos + size > e:
            return positions, pos, _INCOMPLETE
        positions.append(pos)
        count += 1
        pos += size


cdef bint _spans_inside(const long long[::1] st, const long long[::1] ln, Py_ssize_t size):
    """Every span ``st[i]`` .. ``st[i] + ln[i]`` lies inside a buffer of ``size`` bytes (else the
    caller hands the input to the pure function, which raises or copes as it does)."""
    cdef Py_ssize_t i
    for i in range(st.shape[0]):
        if st[i] < 0 or ln[i] < 0 or st[i] + ln[i] > size:
            return False
    return True


def _gather_strings(arr, starts, lengths):
    """See ``batch._gather_strings``: each string decoded as UTF-8 with replacement characters
    (what the pure function's one-call decode gives, and its per-record fallback)."""
    cdef Py_ssize_t n = len(starts)
    if n == 0:
        return []
    cdef const unsigned char[::1] a
    cdef const long long[::1] st
    cdef const long long[::1] ln
    try:
        a = arr
        st = np.ascontiguousarray(starts, dtype=np.int64)
        ln = np.ascontiguousarray(lengths, dtype=np.int64)
    except (TypeError, ValueError, BufferError):
        return _pure._gather_strings_py(arr, starts, lengths)
    cdef Py_ssize_t size = a.shape[0], i
    if ln.shape[0] != n or size == 0 or not _spans_inside(st, ln, size):
        return _pure._gather_strings_py(arr, starts, lengths)
    cdef const unsigned char* p = &a[0] if size else NULL
    out = [None] * n
    for i in range(n):
        out[i] = PyUnicode_DecodeUTF8(<const char*>(p + st[i]), ln[i], "replace")
    return out


def _decode_topics(buf, topic_pos, topic_len):
    """See ``batch._decode_topics``: consecutive equal topics share one str."""
    cdef Py_ssize_t n = len(topic_pos)
    cdef const unsigned char[::1] a
    cdef const long long[::1] tp
    cdef const long long[::1] tl
    try:
        a = buf
        tp = np.ascontiguousarray(topic_pos, dtype=np.int64)
        tl = np.ascontiguousarray(topic_len, dtype=np.int64)
    except (TypeError, ValueError, BufferError):
        return _pure._decode_topics_py(buf, topic_pos, topic_len)
    cdef Py_ssize_t size = a.shape[0], i
    if tl.shape[0] != n or not _spans_inside(tp, tl, size):
        return _pure._decode_topics_py(buf, topic_pos, topic_len)
    cdef const unsigned char* p = &a[0] if size else NULL
    cdef const unsigned char* last = NULL
    cdef long long last_len = -1
    out = [None] * n
    prev = None
    for i in range(n):
        if last != NULL and tl[i] == last_len and memcmp(p + tp[i], last, tl[i]) == 0:
            out[i] = prev
            continue
        prev = PyUnicode_DecodeUTF8(<const char*>(p + tp[i]), tl[i], "replace")
        last = p + tp[i]
        last_len = tl[i]
        out[i] = prev
    return out


def extract_property(raws, name):
    """See ``batch.extract_property``."""
    if type(name) is not str:
        return _pure.extract_property_py(raws, name)
    if type(raws) is not list and type(raws) is not tuple:
        return _pure.extract_property_py(raws, name)
    cdef str key = name + "\x01"
    cdef Py_ssize_t klen = len(key), i, st, j
    cdef str s, v
    out = []
    append = out.append
    for x in raws:
        if type(x) is not str:
            return _pure.extract_property_py(raws, name)
        s = <str>x
        i = s.rfind(key)
        while i > 0 and s[i - 1] != "\x02":
            i = s.rfind(key, 0, i)
        if i < 0:
            append(None)
            continue
        st = i + klen
        j = s.find("\x02", st)
        v = s[st:] if j < 0 else s[st:j]
        if not v and i > 0:  # an empty last entry: an earlier one may hold the value
            append(string_to_properties(s).get(name))
        else:
            append(v or None)
    return out


def _tags_codes(topics, props, store_ts, delay_levels_ms):
    """See ``batch._tags_codes`` (schedule-topic records: the pure function)."""
    if SCHEDULE_TOPIC in topics:
        return _pure._tags_codes_py(topics, props, store_ts, delay_levels_ms)
    cdef Py_ssize_t n = len(topics), i
    out = np.zeros(n, dtype=np.int64)
    cdef long long[::1] o = out
    cdef dict cache = {}
    tags = extract_property(props, PROPERTY_TAGS)
    for i in range(n):
        t = tags[i]
        if t:
            h = cache.get(t)
            if h is None:
                h = cache[t] = java_hash(t)
            o[i] = h
    return out
