# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the record encoder's per-message functions (same names, same results).

``message.py`` holds the pure-Python definitions and is the specification: each function here
returns byte-identical values and raises the same exception types for the same input
(``tests/format/test_speedups.py`` compares them with hypothesis). The fast path takes the usual
input — exact ``str`` names and values, a ``dict`` of properties, a ``bytes``/``bytearray`` body,
ints in their field's range — and hands anything else, and every error, to its pure twin, so the
rare paths and every error message are the pure ones.

``message.py`` picks these up at import unless ``ROCKETSTORE_PURE_PYTHON=1``; see
``rocketstore/_native.py``.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.string cimport memcpy, memchr, memset

from zlib import crc32 as _crc32

from . import message as _pure
from .record import (BORNHOST_POS, BORNHOST_V6_FLAG, MAX_PROPERTIES_LENGTH,
                     MESSAGE_MAGIC_CODE, STOREHOSTADDRESS_V6_FLAG)
from .timer_layout import PROPERTY_TIMER_OUT_MS, TIMER_PROPERTIES, TIMER_TOPIC

# the pure functions, taken before ``message.py`` rebinds its names to the ones below
cdef object _py_encode_message = _pure.encode_message_py
cdef object _py_encode_properties = _pure.encode_properties_py
cdef object _py_create_message_ids = _pure.create_message_ids_py
cdef object _py_topic_bytes = _pure._topic_bytes
cdef object _py_host_bytes = _pure._host_bytes
cdef object _py_msg_id_prefix = _pure._msg_id_prefix
cdef object _py_encode_batch = _pure.encode_batch_py
cdef object _py_encode_committed = _pure.encode_committed_py
cdef object _py_string_to_properties = _pure.string_to_properties_py
cdef object _create_uniq_keys = _pure.create_uniq_keys
cdef object _EncodedMessage = _pure.EncodedMessage
cdef object _Message = _pure.Message
cdef object _RecordFields = _pure.RecordFields
cdef object _BatchRefused = _pure.BatchRefused
cdef str _TAGS = _pure.PROPERTY_TAGS
cdef str _KEYS = _pure.PROPERTY_KEYS
cdef str _KEY_SEPARATOR = _pure.KEY_SEPARATOR
cdef str _WAIT = _pure.PROPERTY_WAIT_STORE_MSG_OK
cdef str _DELAY = _pure.PROPERTY_DELAY_TIME_LEVEL
cdef str _UNIQ = _pure.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
cdef str _REAL_TOPIC = _pure.PROPERTY_REAL_TOPIC
cdef str _REAL_QID = _pure.PROPERTY_REAL_QUEUE_ID
cdef str _TRAN_MSG = _pure.PROPERTY_TRANSACTION_PREPARED
cdef int _TXN_MASK = _pure.TRANSACTION_MASK
cdef int _TXN_COMMIT = _pure.TRANSACTION_COMMIT_TYPE
cdef str _TIMER_TOPIC = TIMER_TOPIC
cdef str _TIMER_OUT = PROPERTY_TIMER_OUT_MS
cdef str _TIMER_P0 = TIMER_PROPERTIES[0]
cdef str _TIMER_P1 = TIMER_PROPERTIES[1]
cdef str _TIMER_P2 = TIMER_PROPERTIES[2]

cdef int _BORNHOST_POS = BORNHOST_POS
cdef int _V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
cdef int _BORN_V6 = BORNHOST_V6_FLAG
cdef int _STORE_V6 = STOREHOSTADDRESS_V6_FLAG
cdef int _MAGIC = MESSAGE_MAGIC_CODE
cdef Py_ssize_t _MAX_PROPS = MAX_PROPERTIES_LENGTH
cdef Py_ssize_t _CACHE_MAX = 4096
cdef long long _I64_MAX = 0x7FFFFFFFFFFFFFFF
cdef long long _I64_MIN = -_I64_MAX - 1

cdef dict _topics = {}   # topic -> [length byte][UTF-8] (what ``_topic_bytes`` returns)
cdef dict _hosts = {}    # "ip:port" -> (address + port bytes, is_v6)
cdef dict _prefixes = {}  # store host -> upper-case hex of its address + port


cdef inline void _put32(unsigned char* p, long long v) noexcept:
    cdef unsigned int u = <unsigned int>v
    p[0] = (u >> 24) & 0xFF
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


cdef inline void _put64(unsigned char* p, long long v) noexcept:
    cdef unsigned long long u = <unsigned long long>v
    cdef int i
    for i in range(8):
        p[i] = (u >> (56 - 8 * i)) & 0xFF


cdef inline bint _int_in(object x, long long lo, long long hi, long long* out):
    """``x`` is an exact int within [lo, hi]: store it in ``out``."""
    cdef int overflow = 0
    cdef long long v
    if type(x) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow or v < lo or v > hi:
        return False
    out[0] = v
    return True


cdef inline object _topic_part(object topic):
    """Cached ``_topic_bytes``; None when the pure function must decide."""
    if type(topic) is not str:
        return None
    part = _topics.get(topic)
    if part is None:
        try:
            part = _py_topic_bytes(topic)
        except Exception:
            return None
        if len(_topics) >= _CACHE_MAX:
            _topics.clear()
        _topics[topic] = part
    return part


cdef inline object _host_part(object host):
    """Cached ``_host_bytes``; None when the pure function must decide."""
    if type(host) is not str:
        return None
    part = _hosts.get(host)
    if part is None:
        try:
            part = _py_host_bytes(host)
        except Exception:
            return None
        if len(_hosts) >= _CACHE_MAX:
            _hosts.clear()
        _hosts[host] = part
    return part


cdef Py_ssize_t _props_length(object props) except -2:
    """Bytes of the serialised properties of a ``dict`` with exact ``str`` names and values,
    -1 when the pure function must decide (another type, an illegal entry, a surrogate)."""
    cdef Py_ssize_t pos = 0, kn, vn, total = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    while PyDict_Next(props, &pos, &k, &v):
        if v == <PyObject*>None:
            continue
        if type(<object>k) is not str or type(<object>v) is not str:
            return -1
        try:
            kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)
            vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
        except UnicodeError:
            return -1
        if kn == 0 or vn == 0 or memchr(kp, 1, kn) != NULL or memchr(kp, 2, kn) != NULL \
                or memchr(vp, 2, vn) != NULL:
            return -1
        total += kn + vn + 2
    return total


cdef void _props_write(object props, unsigned char* out) noexcept:
    """Write what ``_props_length`` measured (the entries are known to be legal)."""
    cdef Py_ssize_t pos = 0, kn, vn
    cdef PyObject* k
    cdef PyObject* v
    cdef const char* kp
    cdef const char* vp
    while PyDict_Next(props, &pos, &k, &v):
        if v == <PyObject*>None:
            continue
        kp = PyUnicode_AsUTF8AndSize(<object>k, &kn)  # cached by the first pass: cannot fail
        vp = PyUnicode_AsUTF8AndSize(<object>v, &vn)
        memcpy(out, kp, kn)
        out[kn] = 1
        out += kn + 1
        memcpy(out, vp, vn)
        out[vn] = 2
        out += vn + 1


def encode_properties(props):
    """See ``message.encode_properties``."""
    cdef Py_ssize_t n
    if type(props) is not dict:
        return _py_encode_properties(props)
    n = _props_length(props)
    if n < 0:
        return _py_encode_properties(props)
    out = PyBytes_FromStringAndSize(NULL, n)
    _props_write(props, <unsigned char*>PyBytes_AS_STRING(out))
    return out


cdef object _encode_one(object msg, object props, object born_timestamp, object born_host,
                        object store_host, object max_body_size):
    """The record of ``encode_message``, or None when the pure function must decide."""
    if (type(msg) is not _Message and type(msg) is not _RecordFields) or type(props) is not dict:
        return None
    return _encode_fields(msg.topic, msg.body, msg.queue_id, msg.flag, msg.sys_flag,
                          msg.reconsume_times, msg.prepared_transaction_offset, props,
                          born_timestamp, born_host, store_host, max_body_size)


cdef object _encode_fields(object topic, object body, object queue_id, object flag_o,
                           object sys_flag_o, object reconsume_o, object prepared_o,
                           object props, object born_timestamp, object born_host,
                           object store_host, object max_body_size):
    """``_encode_one`` from the message's fields (``props`` a dict)."""
    cdef long long qid = 0, flag = 0, sys_flag = 0, born_ts = 0, reconsume = 0, prepared = 0
    cdef long long max_body = 0
    cdef Py_ssize_t blen, plen, tlen, bhlen, shlen, size, store_ts_pos
    cdef const char* bp
    cdef unsigned char* p
    cdef long long crc = 0
    topic_part = _topic_part(topic)
    born = _host_part(born_host)
    store = _host_part(store_host)
    if type(body) is bytes:
        bp = PyBytes_AS_STRING(body)
        blen = PyBytes_GET_SIZE(body)
    elif type(body) is bytearray:
        bp = PyByteArray_AS_STRING(body)
        blen = PyByteArray_GET_SIZE(body)
    else:
        return None
    if (topic_part is None or born is None or store is None
            or not _int_in(max_body_size, -(1 << 62), 1 << 62, &max_body) or blen > max_body
            or not _int_in(queue_id, 0, 0x7FFFFFFF, &qid)
            or not _int_in(flag_o, -(1 << 31), (1 << 31) - 1, &flag)
            or not _int_in(sys_flag_o, -(1 << 31), (1 << 31) - 1, &sys_flag)
            or not _int_in(born_timestamp, _I64_MIN, _I64_MAX, &born_ts)
            or not _int_in(reconsume_o, -(1 << 31), (1 << 31) - 1, &reconsume)
            or not _int_in(prepared_o, _I64_MIN, _I64_MAX, &prepared)):
        return None
    plen = _props_length(props)
    if plen < 0 or plen > _MAX_PROPS:
        return None
    born_b = (<tuple>born)[0]
    store_b = (<tuple>store)[0]
    sys_flag &= ~_V6_FLAGS
    if (<tuple>born)[1]:
        sys_flag |= _BORN_V6
    if (<tuple>store)[1]:
        sys_flag |= _STORE_V6
    tlen = PyBytes_GET_SIZE(topic_part)
    bhlen = PyBytes_GET_SIZE(born_b)
    shlen = PyBytes_GET_SIZE(store_b)
    size = _BORNHOST_POS + bhlen + 8 + shlen + 16 + blen + tlen + 2 + plen
    if blen:
        crc = _crc32(body) & 0x7FFFFFFF
    data = PyBytes_FromStringAndSize(NULL, size)
    p = <unsigned char*>PyBytes_AS_STRING(data)
    _put32(p, size)
    _put32(p + 4, _MAGIC)
    _put32(p + 8, crc)
    _put32(p + 12, qid)
    _put32(p + 16, flag)
    memset(p + 20, 0, 16)  # queue offset, physical offset: ``patch_record``
    _put32(p + 36, sys_flag)
    _put64(p + 40, born_ts)
    p += _BORNHOST_POS
    memcpy(p, PyBytes_AS_STRING(born_b), bhlen)
    p += bhlen
    store_ts_pos = _BORNHOST_POS + bhlen
    memset(p, 0, 8)  # store timestamp: ``patch_record``
    p += 8
    memcpy(p, PyBytes_AS_STRING(store_b), shlen)
    p += shlen
    _put32(p, reconsume)
    _put64(p + 4, prepared)
    _put32(p + 12, blen)
    p += 16
    if blen:
        memcpy(p, bp, blen)
        p += blen
    memcpy(p, PyBytes_AS_STRING(topic_part), tlen)
    p += tlen
    p[0] = (plen >> 8) & 0xFF
    p[1] = plen & 0xFF
    _props_write(props, p + 2)
    return _EncodedMessage(data, store_ts_pos, topic, qid, sys_flag, props)


cdef long long _small_decimal(object s):
    """The value of ``s`` when it is an ASCII decimal of 1 to 10 digits, else -1."""
    cdef Py_ssize_t n, i
    cdef const char* c
    cdef long long v = 0
    if type(s) is not str or not (<str>s).isascii():  # (a lone surrogate cannot be UTF-8)
        return -1
    c = PyUnicode_AsUTF8AndSize(s, &n)
    if c == NULL or n < 1 or n > 10:
        return -1
    for i in range(n):
        if c[i] < 48 or c[i] > 57:
            return -1
        v = v * 10 + (c[i] - 48)
    return v


def encode_committed(halves, *, now, host, max_body_size):
    """See ``message.encode_committed``."""
    cdef dict p
    cdef long long qid
    out = []
    for half in halves:
        rec = None
        props = half.properties
        if type(props) is dict:
            p = (<dict>props).copy()
            topic = p.pop(_REAL_TOPIC, None)
            qid = _small_decimal(p.pop(_REAL_QID, None))
            p.pop(_TRAN_MSG, None)
            sys_flag = half.sys_flag
            if type(topic) is str and qid >= 0 and type(sys_flag) is int:
                rec = _encode_fields(topic, half.body, qid, half.flag,
                                     (sys_flag & ~_TXN_MASK) | _TXN_COMMIT,
                                     half.reconsume_times, half.commitlog_offset, p,
                                     half.born_timestamp or now, half.born_host or host,
                                     half.store_host or host, max_body_size)
        if rec is None:  # anything unusual, and every refusal: the pure function's answer
            rec = _py_encode_committed((half,), now=now, host=host,
                                       max_body_size=max_body_size)[0]
        out.append(rec)
    return out


def encode_message(msg, props, *, born_timestamp, born_host, store_host, max_body_size):
    """See ``message.encode_message``."""
    rec = _encode_one(msg, props, born_timestamp, born_host, store_host, max_body_size)
    if rec is None:
        return _py_encode_message(msg, props, born_timestamp=born_timestamp, born_host=born_host,
                                  store_host=store_host, max_body_size=max_body_size)
    return rec


cdef object _stored_properties(object m):
    """``Message.all_properties`` for the usual field types (else the method itself)."""
    own = m.properties
    tags = m.tags
    keys = m.keys
    if own is None:
        props = {}
    elif type(own) is dict:
        props = (<dict>own).copy()
    else:
        return m.all_properties()
    if tags is not None:
        if type(tags) is not str:
            return m.all_properties()
        if tags:
            props[_TAGS] = tags
    if keys is not None:
        if type(keys) is not str:
            if type(keys) is not list and type(keys) is not tuple:
                return m.all_properties()
            if not keys:
                return props
            keys = _KEY_SEPARATOR.join(keys)
        if keys:
            props[_KEYS] = keys
    return props


def encode_batch(msgs, *, now, default_host, max_body_size, generate_uniq_key):
    """See ``message.encode_batch``."""
    cdef Py_ssize_t i, n
    cdef list encoded = []
    cdef bint wait = True
    cdef bint uniq = generate_uniq_key
    cdef object keys = None
    if type(msgs) is not list or type(default_host) is not str:
        return _py_encode_batch(msgs, now=now, default_host=default_host,
                                max_body_size=max_body_size, generate_uniq_key=generate_uniq_key)
    n = len(msgs)
    for i in range(n):
        m = msgs[i]
        if type(m) is not _Message:
            return _py_encode_batch(msgs, now=now, default_host=default_host,
                                    max_body_size=max_body_size,
                                    generate_uniq_key=generate_uniq_key)
        props = _stored_properties(m)
        if type(props) is not dict:
            return _py_encode_batch(msgs, now=now, default_host=default_host,
                                    max_body_size=max_body_size,
                                    generate_uniq_key=generate_uniq_key)
        if (<dict>props).get(_WAIT) == "false":
            wait = False
        level = (<dict>props).get(_DELAY)
        if level is not None and level != "" and level != "0":
            raise _BatchRefused("a batch cannot be delayed")
        if (m.topic != _TIMER_TOPIC and _TIMER_OUT not in <dict>props
                and (_TIMER_P0 in <dict>props or _TIMER_P1 in <dict>props
                     or _TIMER_P2 in <dict>props)):
            raise _BatchRefused("a batch cannot carry timer properties")
        if uniq and _UNIQ not in <dict>props:
            if keys is None:  # one clock read for the rest of the batch
                keys = iter(_create_uniq_keys(n - i))
            (<dict>props)[_UNIQ] = next(keys)
        born_ts = m.born_timestamp
        if born_ts is None:
            born_ts = now
        born_host = m.born_host or default_host
        store_host = m.store_host or default_host
        rec = _encode_one(m, props, born_ts, born_host, store_host, max_body_size)
        if rec is None:
            rec = _py_encode_message(m, props, born_timestamp=born_ts, born_host=born_host,
                                     store_host=store_host, max_body_size=max_body_size)
        encoded.append(rec)
    return encoded, wait


cdef inline void _hex16(unsigned char* out, unsigned long long v) noexcept:
    cdef int i
    cdef const char* digits = b"0123456789ABCDEF"
    for i in range(15, -1, -1):
        out[i] = digits[v & 0xF]
        v >>= 4


def create_message_ids(store_host, first, sizes):
    """See ``message.create_message_ids``."""
    cdef Py_ssize_t plen, i, n
    cdef long long off = 0
    cdef long long sz
    cdef unsigned char* p
    if (type(store_host) is not str or type(sizes) is not list
            or not _int_in(first, 0, 1 << 62, &off)):
        return _py_create_message_ids(store_host, first, sizes)
    if not sizes:
        return []
    prefix = _prefixes.get(store_host)
    if prefix is None:
        try:
            prefix = _py_msg_id_prefix(store_host).encode("ascii")
        except Exception:  # a bad host: the pure function's error
            return _py_create_message_ids(store_host, first, sizes)
        if len(_prefixes) >= _CACHE_MAX:
            _prefixes.clear()
        _prefixes[store_host] = prefix
    plen = PyBytes_GET_SIZE(prefix)
    n = len(sizes)
    for i in range(n):
        if not _int_in(sizes[i], 0, 1 << 40, &sz):
            return _py_create_message_ids(store_host, first, sizes)
    buf = PyBytes_FromStringAndSize(NULL, plen + 16)
    p = <unsigned char*>PyBytes_AS_STRING(buf)
    memcpy(p, PyBytes_AS_STRING(prefix), plen)
    out = []
    for i in range(n):
        _hex16(p + plen, <unsigned long long>off)
        out.append(PyUnicode_DecodeASCII(<char*>p, plen + 16, NULL))
        off += <long long>sizes[i]
    return out


def string_to_properties(s):
    """See ``message.string_to_properties``: one scan of the UTF-8 form (``\\x01`` and
    ``\\x02`` never occur inside a multi-byte character), no list of items in between."""
    cdef Py_ssize_t n, i = 0, start, sep, end
    cdef const char* c
    cdef const char* hit
    cdef dict out = {}
    if type(s) is not str:
        return _py_string_to_properties(s)
    try:
        c = PyUnicode_AsUTF8AndSize(s, &n)
    except UnicodeError:  # a lone surrogate: the pure function splits it as it is
        return _py_string_to_properties(s)
    while i <= n:
        start = i
        hit = <const char*>memchr(c + i, 2, n - i)
        end = n if hit == NULL else hit - c
        hit = <const char*>memchr(c + start, 1, end - start)
        if hit != NULL:
            sep = hit - c
            if sep > start and end > sep + 1:  # a name and a value: kept (the last one wins)
                out[PyUnicode_DecodeUTF8(c + start, sep - start, NULL)] = \
                    PyUnicode_DecodeUTF8(c + sep + 1, end - sep - 1, NULL)
        i = end + 1
    return out
