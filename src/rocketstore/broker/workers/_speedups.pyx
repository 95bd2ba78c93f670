# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``put_batch.link_puts`` (same name, same arguments, byte-identical results).

``put_batch.py`` is the specification. Here a send request of the usual shape — header fields a
``dict`` of ``str``, integers written as plain decimal digits, V2's single-letter names or V1's
names, a ``bytes`` body — is checked against the send rule's plain-send conditions and encoded
without a ``Plan``, ``Put`` or ``link.Put`` object: the record by the record encoder
(``format.message.encode_message``, itself compiled), the PUT head written straight into the
link message's one buffer. A request of any other shape goes to ``put_batch.link_put_py``, so
every unusual header keeps the pure answer. The GIL stays held: every step reads Python objects
(the header dict, its strings, the properties dict); the only work without them is the copy of
the record into the link buffer, too short to be worth a release.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcpy

import time as _time

from . import put_batch as _pure
from . import link as _L
from ...format import message as _message
from ...format.record import STOREHOSTADDRESS_V6_FLAG, TRANSACTION_MASK
from ...store.put_path import check_topic as _check_topic

cdef object _link_put_py = _pure.link_put_py
cdef object _Message = _message.Message
cdef object _encode_message = _message.encode_message
cdef str _CLUSTER = _message.PROPERTY_CLUSTER
cdef str _UNIQ = _message.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
cdef str _DELAY = _message.PROPERTY_DELAY_TIME_LEVEL
cdef str _TRAN = _message.PROPERTY_TRANSACTION_PREPARED
cdef int _V6_STORE = STOREHOSTADDRESS_V6_FLAG
cdef int _TX_MASK = TRANSACTION_MASK
cdef int _PUT = _L.PUT
cdef Py_ssize_t _HEAD = _L.HEAD.size
cdef Py_ssize_t _PUT_HEAD = _L.PUT_HEAD.size
cdef tuple _V1_NAMES = ("queueId", "sysFlag", "bornTimestamp", "flag", "properties",
                        "reconsumeTimes", "defaultTopicQueueNums", "batch", "maxReconsumeTimes")
cdef dict _topics = {}  # topic -> its UTF-8 bytes, or None: not a topic a record may name

cdef object _FALLBACK = object()  # the pure function must decide


cdef inline void _be(unsigned char* p, unsigned long long v, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        p[n - 1 - i] = (v >> (8 * i)) & 0xFF


cdef int _header_int(object v, long long default, long long* out):
    """``send_rule.header_int`` for the usual values: 1 and ``out`` set, or 0 (the pure
    function decides: "true"/"false", signs, spaces, too long, not a ``str``)."""
    cdef const char* s
    cdef Py_ssize_t n, i = 0
    cdef long long x = 0
    cdef bint neg = False
    if v is None:
        out[0] = default
        return 1
    if type(v) is not str:
        return 0
    s = PyUnicode_AsUTF8AndSize(v, &n)
    if n == 0 or (n == 4 and s[0] == c'n' and s[1] == c'u' and s[2] == c'l' and s[3] == c'l'):
        out[0] = default
        return 1
    if s[0] == c'-':
        neg = True
        i = 1
    if n - i < 1 or n - i > 18:
        return 0
    while i < n:
        if s[i] < c'0' or s[i] > c'9':
            return 0
        x = x * 10 + (s[i] - c'0')
        i += 1
    out[0] = -x if neg else x
    return 1


cdef object _topic_bytes(str topic):
    cached = _topics.get(topic, False)
    if cached is not False:
        return cached
    tb = None
    if not topic.startswith("%") and _check_topic(topic) is None:
        tb = topic.encode()
    if len(_topics) >= 4096:
        _topics.clear()
    _topics[topic] = tb
    return tb


cdef object _one(object fields, object body, str peer, object rules,
                 unsigned long long seq, unsigned long long conn, object now_ms, object uniq_key,
                 object cluster, object store_host, object max_size, bint gen_uniq):
    """The link PUT message, None, or ``_FALLBACK``."""
    cdef long long dq, qid, flag, sys_flag, born, reconsume
    cdef Py_ssize_t tlen, rlen, props_off, host
    cdef unsigned char* p
    if type(fields) is not dict or type(body) is not bytes:
        return _FALLBACK
    d = <dict>fields
    if "topic" in d:
        topic = d.get("topic")
        v_dq, v_qid, v_flag = d.get("defaultTopicQueueNums"), d.get("queueId"), d.get("flag")
        v_sys, v_born, v_rec = d.get("sysFlag"), d.get("bornTimestamp"), d.get("reconsumeTimes")
        raw, batch = d.get("properties"), d.get("batch")
    else:
        for name in _V1_NAMES:
            if name in d:  # a V1 name beside V2's letters: the expansion decides which wins
                return _FALLBACK
        topic = d.get("b")
        v_dq, v_qid, v_flag = d.get("d"), d.get("e"), d.get("h")
        v_sys, v_born, v_rec = d.get("f"), d.get("g"), d.get("j")
        raw, batch = d.get("i"), d.get("m")
    if not topic:
        return None  # the send processor answers a send without a topic
    if type(topic) is not str:
        return _FALLBACK
    if (<str>topic).startswith("%"):
        return None  # retry, dead-letter and system topics: never a plain record here
    if not (_header_int(v_dq, 0, &dq) and _header_int(v_qid, 0, &qid)
            and _header_int(v_flag, 0, &flag) and _header_int(v_sys, 0, &sys_flag)
            and _header_int(v_born, 0, &born) and _header_int(v_rec, 0, &reconsume)):
        return _FALLBACK
    if batch is not None:
        if type(batch) is not str:
            return _FALLBACK
        if (<str>batch).lower() in ("true", "1"):
            return None
    if raw is None or raw == "":
        props = {}
        raw = ""
    elif type(raw) is not str:
        return _FALLBACK
    else:
        props = {}
        for item in (<str>raw).split("\x02"):
            k, _, v = (<str>item).partition("\x01")
            if k and v:
                props[k] = v
    props[_CLUSTER] = cluster
    if (qid < 0 or sys_flag & _TX_MASK or not -32768 <= dq <= 32767
            or (<str>props.get(_TRAN, "")).lower() == "true"
            or props.get(_DELAY, "0") not in ("", "0")):
        return None
    if "TIMER_" in <str>raw:
        for k in props:
            if (<str>k).startswith("TIMER_"):
                return None
    tb = _topic_bytes(<str>topic)
    if tb is None:
        return None
    if born == 0:
        born = now_ms if now_ms is not None else int(_time.time() * 1000)
    if gen_uniq and _UNIQ not in props:
        props[_UNIQ] = uniq_key()
    msg = _Message(topic=topic, body=body, properties=props, queue_id=qid, flag=flag,
                   sys_flag=sys_flag, born_timestamp=born, born_host=peer,
                   reconsume_times=reconsume)
    try:
        enc = _encode_message(msg, props, born_timestamp=born, born_host=peer,
                              store_host=store_host, max_body_size=max_size)
    except (ValueError, TypeError):
        return None
    data = enc.data
    if type(data) is not bytes:
        return _FALLBACK
    ts_pos = enc.store_ts_pos
    rec_sys = enc.sys_flag
    rec_qid = enc.queue_id
    host = 20 if rec_sys & _V6_STORE else 8
    tlen = PyBytes_GET_SIZE(tb)
    rlen = PyBytes_GET_SIZE(data)
    props_off = ts_pos + 8 + host + 16 + PyBytes_GET_SIZE(body) + 1 + tlen + 2
    if (not 0 <= ts_pos <= 0xFFFF or not -(1 << 31) <= rec_sys < (1 << 31)
            or not 0 <= rec_qid < (1 << 31) or tlen > 255):
        return _FALLBACK
    out = PyBytes_FromStringAndSize(NULL, _HEAD + _PUT_HEAD + tlen + rlen)
    p = <unsigned char*>PyBytes_AS_STRING(out)
    _be(p, _PUT_HEAD + tlen + rlen, 4)  # HEAD: payload length u32, kind u8
    p[4] = _PUT
    p += _HEAD
    _be(p, seq, 8)  # PUT_HEAD: seq u64, conn u32, queue id i32, sys flag i32, ...
    _be(p + 8, conn, 4)
    _be(p + 12, <unsigned long long>(<long long>rec_qid) & 0xFFFFFFFF, 4)
    _be(p + 16, <unsigned long long>(<long long>rec_sys) & 0xFFFFFFFF, 4)
    _be(p + 20, ts_pos, 2)  # ... store-timestamp position u16, body length u32,
    _be(p + 22, PyBytes_GET_SIZE(body), 4)
    _be(p + 26, <unsigned long long>dq & 0xFFFF, 2)  # default queue nums i16,
    _be(p + 28, props_off, 4)  # properties offset u32, topic length u8
    p[32] = tlen
    p += _PUT_HEAD
    memcpy(p, PyBytes_AS_STRING(tb), tlen)
    memcpy(p + tlen, PyBytes_AS_STRING(data), rlen)
    return out


def link_puts(items, peer, rules, seq0, conn, now_ms=None, uniq_key=_message.create_uniq_key):
    """See ``put_batch.link_puts``."""
    cdef Py_ssize_t i, n = len(items)
    cdef unsigned long long s0 = 0, c = 0
    if not rules.fast_sends:
        return [None] * n
    out = [None] * n
    cluster = rules.cluster_name
    store_host = rules.store_host
    max_size = rules.max_message_size
    gen_uniq = bool(rules.generate_uniq_key)
    seq0 = int(seq0)
    fast = (type(peer) is str and type(cluster) is str and type(conn) is int
            and 0 <= conn <= 0xFFFFFFFF and 0 <= seq0 and seq0 + n <= 0xFFFFFFFFFFFFFFFF)
    if fast:
        s0 = seq0
        c = conn
    for i in range(n):
        code, fields, body = items[i]
        if code != 10 and code != 310:
            continue  # not SEND_MESSAGE or SEND_MESSAGE_V2: handled whole
        r = _FALLBACK
        if fast:
            try:
                r = _one(fields, body, peer, rules, s0 + i, c, now_ms, uniq_key, cluster,
                         store_host, max_size, gen_uniq)
            except Exception:  # as the pure function: the writer's send processor answers
                r = None
        if r is _FALLBACK:
            r = _link_put_py(code, fields, body, peer, rules, seq0 + i, conn, now_ms, uniq_key)
        out[i] = r
    return out
