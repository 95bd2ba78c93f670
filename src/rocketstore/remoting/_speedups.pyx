# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the remoting codec's per-frame functions (same names, same results).

``connection.py`` and ``header.py`` hold the pure-Python definitions and are the specification:
each function here returns byte-identical values and raises the same exception types for the same
input (``tests/remoting/test_speedups.py`` compares them with hypothesis). Where an input is
unusual — a value out of a field's range, a non-str header value — a function hands the call to
its pure twin, so every error message of the rare paths is the pure one.

The modules pick these up at import unless ``ROCKETSTORE_PURE_PYTHON=1``; see
``rocketstore/_native.py``.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcpy

from ..errors import RemoteProtocolError
from .codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, LanguageCode
from .command import RemotingCommand
from . import header as _pure_header
from json.encoder import encode_basestring as _json_str

cdef dict _LANG_BY_CODE = {m.value: m.name for m in LanguageCode}
cdef dict _CODE_BY_LANG = {m.name: m.value for m in LanguageCode}
cdef int _OTHER = LanguageCode.OTHER.value
cdef int _SER_JSON = SERIALIZE_JSON
cdef int _SER_RMQ = SERIALIZE_ROCKETMQ


cdef inline long _be32(const unsigned char* p) noexcept:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16)
                 | (<unsigned int>p[2] << 8) | <unsigned int>p[3])


cdef inline int _be16(const unsigned char* p) noexcept:
    return <short>((<unsigned int>p[0] << 8) | <unsigned int>p[1])


cdef inline void _put32(unsigned char* p, long v) noexcept:
    cdef unsigned int u = <unsigned int>v
    p[0] = (u >> 24) & 0xFF
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


cdef inline void _put16(unsigned char* p, int v) noexcept:
    cdef unsigned int u = <unsigned int>v
    p[0] = (u >> 8) & 0xFF
    p[1] = u & 0xFF


def cut_frame(bytearray buf, Py_ssize_t pos, long max_frame):
    """See ``connection.cut_frame``."""
    cdef Py_ssize_t avail = PyByteArray_GET_SIZE(buf) - pos
    cdef const unsigned char* p = <const unsigned char*>PyByteArray_AS_STRING(buf) + pos
    cdef long length, word, stype, hlen
    cdef Py_ssize_t start
    if avail >= 4:
        length = _be32(p)
        if length < 4 or length > max_frame:
            raise RemoteProtocolError(
                f"frame length {length & 0xFFFFFFFF} outside 4..{max_frame}")
    if avail < 8:
        return None
    word = _be32(p + 4)
    stype = (word >> 24) & 0xFF
    hlen = word & 0xFFFFFF
    if stype != _SER_JSON and stype != _SER_RMQ:
        raise RemoteProtocolError(f"unknown serialize type {stype}")
    if hlen > length - 4:
        raise RemoteProtocolError(f"header length {hlen} exceeds frame length {length}")
    if avail < 4 + length:
        return None
    header = PyBytes_FromStringAndSize(<const char*>p + 8, hlen)
    body = PyBytes_FromStringAndSize(<const char*>p + 8 + hlen, length - 4 - hlen)
    return (pos + 4 + length, stype, header, body)


cdef inline str _utf8(const unsigned char* p, Py_ssize_t n):
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"bad ROCKETMQ header: {exc}") from exc


def decode_binary(bytes data, body):
    """See ``header._decode_binary``."""
    cdef Py_ssize_t n = len(data)
    cdef const unsigned char* d = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t p, end
    cdef long rlen, elen, vlen
    cdef int klen
    if n < 17:
        return _pure_header._decode_binary_py(data, body)  # its struct error text
    cdef int code = _be16(d)
    cdef int lang = <signed char>d[2]
    cdef int version = _be16(d + 3)
    cdef long opaque = _be32(d + 5)
    cdef long flag = _be32(d + 9)
    rlen = _be32(d + 13)
    p = 17
    if rlen < 0 or p + rlen > n:
        raise RemoteProtocolError(f"remark length {rlen} overruns the header")
    remark = _utf8(d + p, rlen) if rlen else None
    p += rlen
    if p + 4 > n:
        return _pure_header._decode_binary_py(data, body)
    elen = _be32(d + p)
    p += 4
    end = p + elen
    if elen < 0 or end > n:
        raise RemoteProtocolError(f"ext length {elen} overruns the header")
    cdef dict ext = {}
    while p < end:
        if p + 2 > end:
            raise RemoteProtocolError("ext entry overruns the header")
        klen = _be16(d + p)
        p += 2
        if klen < 0 or p + klen + 4 > end:
            raise RemoteProtocolError("ext entry overruns the header")
        key = _utf8(d + p, klen)
        p += klen
        vlen = _be32(d + p)
        p += 4
        if vlen < 0 or p + vlen > end:
            raise RemoteProtocolError("ext entry overruns the header")
        ext[key] = _utf8(d + p, vlen)
        p += vlen
    return RemotingCommand(code, _LANG_BY_CODE.get(lang, "OTHER"), version, opaque, flag,
                           remark, ext, body, _SER_RMQ)


def encode_binary(cmd):
    """See ``header._encode_binary``."""
    code, version, opaque, flag = cmd.code, cmd.version, cmd.opaque, cmd.flag
    remark, ext = cmd.remark, cmd.ext_fields
    if not (type(code) is int and type(version) is int and type(opaque) is int
            and type(flag) is int and (remark is None or type(remark) is str)
            and type(ext) is dict
            and -32768 <= code <= 32767 and -32768 <= version <= 32767
            and -2147483648 <= opaque <= 2147483647 and -2147483648 <= flag <= 2147483647):
        return _pure_header._encode_binary_py(cmd)
    lang_obj = _CODE_BY_LANG.get(cmd.language)
    cdef int lang = _OTHER if lang_obj is None else lang_obj
    rb = (<str>remark).encode("utf-8") if remark else b""
    cdef list pieces = []
    cdef Py_ssize_t total = 21 + len(rb)
    for k, v in (<dict>ext).items():
        if type(k) is not str or type(v) is not str:
            return _pure_header._encode_binary_py(cmd)
        kb = (<str>k).encode("utf-8")
        vb = (<str>v).encode("utf-8")
        if len(kb) > 32767:
            return _pure_header._encode_binary_py(cmd)
        pieces.append(kb)
        pieces.append(vb)
        total += 6 + len(kb) + len(vb)
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* o = <unsigned char*>PyBytes_AS_STRING(out)
    cdef Py_ssize_t q = 0, ln
    cdef long ext_len = total - 21 - len(rb)
    _put16(o, code)
    o[2] = <unsigned char>(lang & 0xFF)
    _put16(o + 3, version)
    _put32(o + 5, opaque)
    _put32(o + 9, flag)
    _put32(o + 13, len(rb))
    q = 17
    ln = len(rb)
    if ln:
        memcpy(o + q, PyBytes_AS_STRING(rb), ln)
        q += ln
    _put32(o + q, ext_len)
    q += 4
    cdef Py_ssize_t i
    for i in range(0, len(pieces), 2):
        kb = pieces[i]
        vb = pieces[i + 1]
        ln = len(kb)
        _put16(o + q, <int>ln)
        q += 2
        memcpy(o + q, PyBytes_AS_STRING(kb), ln)
        q += ln
        ln = len(vb)
        _put32(o + q, ln)
        q += 4
        memcpy(o + q, PyBytes_AS_STRING(vb), ln)
        q += ln
    return out


cdef inline bint _plain(str s):
    """True when JSON writes ``s`` as itself in quotes (ASCII, nothing to escape)."""
    cdef Py_UCS4 c
    if not s.isascii():
        return False
    for c in s:
        if c < 0x20 or c == 0x22 or c == 0x5C or c == 0x7F:
            return False
    return True


cdef inline str _js(str s):
    if _plain(s):
        return '"' + s + '"'
    return _json_str(s)


def encode_json_fast(cmd):
    """See ``header._encode_json_fast``."""
    code, flag, opaque, version = cmd.code, cmd.flag, cmd.opaque, cmd.version
    lang, remark, ext = cmd.language, cmd.remark, cmd.ext_fields
    if not (type(code) is int and type(flag) is int and type(opaque) is int
            and type(version) is int and type(lang) is str
            and (remark is None or type(remark) is str)):
        return None
    cdef list parts = ['{"code":', str(code)]
    cdef bint first = True
    if ext:
        parts.append(',"extFields":{')
        for k, v in ext.items():
            if type(k) is not str or type(v) is not str:
                return None
            if not first:
                parts.append(",")
            first = False
            parts.append(_js(k))
            parts.append(":")
            parts.append(_js(v))
        parts.append("}")
    parts.append(',"flag":')
    parts.append(str(flag))
    parts.append(',"language":')
    parts.append(_js(lang))
    parts.append(',"opaque":')
    parts.append(str(opaque))
    if remark is not None:
        parts.append(',"remark":')
        parts.append(_js(remark))
    parts.append(',"serializeTypeCurrentRPC":"JSON","version":')
    parts.append(str(version))
    parts.append("}")
    return "".join(parts).encode("utf-8")
