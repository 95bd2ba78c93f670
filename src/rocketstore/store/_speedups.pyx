# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of the CommitLog's per-record append step (same name, same bytes).

``commitlog.write_records`` is the specification: this function leaves byte-identical segment
contents and returns the same values (``tests/store/test_speedups.py`` compares them with
hypothesis). Anything unusual — not a list of ``EncodedMessage`` with ``bytes`` data, a record
that does not fit the mapping, a store-timestamp position outside its record — goes to the pure
function, before anything is written.

``commitlog.py`` picks it up at import unless ``ROCKETSTORE_PURE_PYTHON=1``; see
``rocketstore/_native.py``.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.string cimport memcpy

from ..format.message import (EncodedMessage, TRANSACTION_MASK, TRANSACTION_PREPARED_TYPE,
                              TRANSACTION_ROLLBACK_TYPE)
from ..format.hashing import java_hash
from ..format.message import PROPERTY_TAGS, SCHEDULE_TOPIC, Message
from ..format.record import PHYSICALOFFSET_POS, QUEUEOFFSET_POS
from . import commitlog as _pure

cdef object _py_write_records = _pure.write_records_py
cdef object _py_feed_item = _pure.feed_item_py
cdef object _FeedItem = _pure.FeedItem
cdef object _java_hash = java_hash
cdef str _SCHEDULE_TOPIC = SCHEDULE_TOPIC
cdef str _TAGS = PROPERTY_TAGS
cdef dict _tag_codes = {}  # tag -> java_hash(tag)
cdef object _EncodedMessage = EncodedMessage
cdef long long _TRAN_MASK = TRANSACTION_MASK
cdef long long _PREPARED = TRANSACTION_PREPARED_TYPE
cdef long long _ROLLBACK = TRANSACTION_ROLLBACK_TYPE
cdef Py_ssize_t _QO_POS = QUEUEOFFSET_POS
cdef Py_ssize_t _PHYS_POS = PHYSICALOFFSET_POS


cdef inline void _put64(unsigned char* p, long long v) noexcept:
    cdef unsigned long long u = <unsigned long long>v
    cdef int i
    for i in range(8):
        p[i] = (u >> (56 - 8 * i)) & 0xFF


cdef inline bint _small_int(object x, long long* out):
    cdef int overflow = 0
    cdef long long v
    if type(x) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow or v < -(1LL << 62) or v > (1LL << 62):
        return False
    out[0] = v
    return True


def write_records(mm, pos, phys, records, table, now):
    """See ``commitlog.write_records``."""
    cdef Py_ssize_t i, n, total = 0, size, ts_pos, start, at
    cdef long long p0 = 0, ph = 0, ts = 0, qo, tmp = 0
    cdef long long sys_flag, tran
    cdef unsigned char[::1] view
    cdef unsigned char* base
    cdef const unsigned char* src
    if (type(records) is not list or type(table) is not dict or not records
            or not _small_int(pos, &p0) or not _small_int(phys, &ph) or not _small_int(now, &ts)):
        return _py_write_records(mm, pos, phys, records, table, now)
    n = len(records)
    for i in range(n):  # everything checked before the first byte is written
        rec = records[i]
        if type(rec) is not _EncodedMessage or type(rec.data) is not bytes:
            return _py_write_records(mm, pos, phys, records, table, now)
        size = PyBytes_GET_SIZE(rec.data)
        if (not _small_int(rec.store_ts_pos, &tmp) or tmp < 0 or tmp + 8 > size
                or size < _PHYS_POS + 8 or not _small_int(rec.sys_flag, &tmp)):
            return _py_write_records(mm, pos, phys, records, table, now)
        total += size
    try:
        if p0 < 0 or p0 + total > len(mm):
            return _py_write_records(mm, pos, phys, records, table, now)
        view = mm
    except (TypeError, ValueError, BufferError):
        return _py_write_records(mm, pos, phys, records, table, now)
    if p0 + total > view.shape[0]:  # not a byte buffer of len(mm) bytes
        view = None
        return _py_write_records(mm, pos, phys, records, table, now)
    base = &view[0]
    cdef list queue_offsets = []
    cdef list sizes = []
    start = <Py_ssize_t>p0
    at = start
    for i in range(n):
        rec = records[i]
        data = rec.data
        size = PyBytes_GET_SIZE(data)
        src = <const unsigned char*>PyBytes_AS_STRING(data)
        if i == 0:
            memcpy(base + at + 8, src + 8, size - 8)  # the header goes in last
        else:
            memcpy(base + at, src, size)
        sys_flag = rec.sys_flag
        tran = sys_flag & _TRAN_MASK
        if tran == _PREPARED or tran == _ROLLBACK:
            qo = 0
            q = 0
        else:
            key = (rec.topic, rec.queue_id)
            q = table.get(key, 0)
            table[key] = q + 1
            qo = q
        ts_pos = rec.store_ts_pos
        _put64(base + at + _QO_POS, qo)
        _put64(base + at + _PHYS_POS, ph)
        _put64(base + at + ts_pos, ts)
        queue_offsets.append(q)
        sizes.append(size)
        at += size
        ph += size
    memcpy(base + start, PyBytes_AS_STRING(records[0].data), 8)
    return queue_offsets, sizes


def feed_item(records, first, sizes, queue_offsets, now, delays):
    """See ``commitlog.feed_item``."""
    cdef Py_ssize_t i, n
    cdef long long off = 0, sz = 0, tmp = 0
    if (type(records) is not list or type(sizes) is not list or len(sizes) != len(records)
            or not _small_int(first, &off) or not _small_int(now, &tmp)):
        return _py_feed_item(records, first, sizes, queue_offsets, now, delays)
    n = len(records)
    cdef list offsets = []
    cdef list qids = []
    cdef list flags = []
    cdef list codes = []
    cdef list topics = []
    cdef list props_list = []
    for i in range(n):
        rec = records[i]
        if type(rec) is not _EncodedMessage or not _small_int(sizes[i], &sz):
            return _py_feed_item(records, first, sizes, queue_offsets, now, delays)
        topic = rec.topic
        props = rec.properties
        if topic == _SCHEDULE_TOPIC or type(props) is not dict:
            return _py_feed_item(records, first, sizes, queue_offsets, now, delays)
        tag = (<dict>props).get(_TAGS)
        if tag is None:
            code = 0
        elif type(tag) is str:
            code = _tag_codes.get(tag)
            if code is None:
                if not tag:
                    code = 0
                else:
                    try:
                        code = _java_hash(tag)
                    except Exception:  # the pure function's error
                        return _py_feed_item(records, first, sizes, queue_offsets, now, delays)
                    if len(_tag_codes) >= 65536:
                        _tag_codes.clear()
                    _tag_codes[tag] = code
        else:
            return _py_feed_item(records, first, sizes, queue_offsets, now, delays)
        offsets.append(off)
        off += sz
        qids.append(rec.queue_id)
        flags.append(rec.sys_flag)
        codes.append(code)
        topics.append(topic)
        props_list.append(props)
    return _FeedItem(first, off, offsets, sizes, qids, queue_offsets, flags, [now] * n, codes,
                     topics, props_list)


cdef object _py_check_messages = None
cdef object _check_topic = None
cdef set _good_topics = set()  # topics ``put_path.check_topic`` accepted
cdef object _Message = Message


def check_messages(msgs, batch):
    """See ``put_path.check_messages``."""
    global _py_check_messages, _check_topic
    cdef Py_ssize_t i, n
    cdef long long qid = 0, fqid = 0, flag = 0
    cdef bint as_batch = batch
    if _py_check_messages is None:  # put_path imports this module: bind its functions late
        from . import put_path
        _py_check_messages = put_path.check_messages_py
        _check_topic = put_path.check_topic
    if type(msgs) is not list or not msgs or type(batch) is not bool:
        return _py_check_messages(msgs, batch)
    n = len(msgs)
    first = msgs[0]
    if type(first) is not _Message:
        return _py_check_messages(msgs, batch)
    ftopic = first.topic
    if not _small_int(first.queue_id, &fqid):
        return _py_check_messages(msgs, batch)
    for i in range(n):
        m = msgs[i]
        if type(m) is not _Message:
            return _py_check_messages(msgs, batch)
        topic = m.topic
        if type(topic) is not str:
            return _py_check_messages(msgs, batch)
        if topic not in _good_topics:
            if _check_topic(topic) is not None:
                return _py_check_messages(msgs, batch)
            if len(_good_topics) >= 4096:
                _good_topics.clear()
            _good_topics.add(topic)
        if not _small_int(m.queue_id, &qid) or qid < 0:
            return _py_check_messages(msgs, batch)
        body = m.body
        if type(body) is not bytes and type(body) is not bytearray and type(body) is not memoryview:
            return _py_check_messages(msgs, batch)
        if as_batch:
            if qid != fqid or topic != ftopic or not _small_int(m.sys_flag, &flag) \
                    or (flag & _TRAN_MASK) != 0:
                return _py_check_messages(msgs, batch)
    return None
