"""Header serialisations: JSON (type 0) and ROCKETMQ binary (type 1).

JSON header, as fastjson writes ``RemotingCommand`` (keys sorted, null remark left out)::

    {"code":0,"extFields":{"queueId":"0"},"flag":1,"language":"JAVA","opaque":5,
     "serializeTypeCurrentRPC":"JSON","version":401}

ROCKETMQ binary header, big-endian::

    off  size  field
      0     2  code
      2     1  language (LanguageCode ordinal)
      3     2  version
      5     4  opaque
      9     4  flag
     13     4  remark length R (0 = null), then R bytes UTF-8
   +R       4  ext length E, then E bytes of { int16 keyLen, key, int32 valLen, value }*

Theory of operation: ``encode_header`` / ``decode_header`` are pure functions from a
``RemotingCommand`` to header bytes and back (the body is framed by ``connection``). Decoding is
lenient about *types* — every ext value of any JSON type is coerced to the string Java would hold
(``true`` → ``"true"``, ``4`` → ``"4"``) — and strict about *shape*: a header that is not a JSON
object, lacks ``code`` or overruns its length raises ``RemoteProtocolError``. Encoding always
writes ext values as JSON strings: RocketMQ's C++ client silently ignores numeric values.
"""
from __future__ import annotations

import json
import struct
from typing import Any
from json.encoder import encode_basestring as _json_str  # what json.dumps(ensure_ascii=False) writes

from .. import _native
from ..errors import RemoteProtocolError
from .codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, LanguageCode
from .command import RemotingCommand, to_ext_str

BIN_FIXED = struct.Struct(
    ">"
    "h"  # code
    "b"  # language
    "h"  # version
    "i"  # opaque
    "i"  # flag
)
_I32 = struct.Struct(">i")
_H16 = struct.Struct(">h")
_LANG_BY_CODE = {m.value: m.name for m in LanguageCode}
_SERIALIZE_NAMES = {SERIALIZE_JSON: "JSON", SERIALIZE_ROCKETMQ: "ROCKETMQ"}


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        return _encode_binary(cmd)
    if cmd.serialize_type != SERIALIZE_JSON:
        raise ValueError(f"unknown serialize type {cmd.serialize_type}")
    fast = _encode_json_fast(cmd)
    if fast is not None:
        return fast
    return _encode_json_generic(cmd)


_INT = int.__repr__


def _encode_json_fast_py(cmd: RemotingCommand) -> bytes | None:
    """The bytes of ``_encode_json_generic`` built by hand (no dict, no encoder object) for the
    usual command: int code/flag/opaque/version, str language/remark/ext values. None for
    anything else, which takes the generic path."""
    code, flag, opaque, version = cmd.code, cmd.flag, cmd.opaque, cmd.version
    lang, remark, ext = cmd.language, cmd.remark, cmd.ext_fields
    if not (type(code) is int and type(flag) is int and type(opaque) is int
            and type(version) is int and type(lang) is str
            and (remark is None or type(remark) is str)):
        return None
    parts = ['{"code":', _INT(code)]
    if ext:
        items = []
        for k, v in ext.items():
            if type(k) is not str or type(v) is not str:
                return None
            items.append(f"{_json_str(k)}:{_json_str(v)}")
        parts.append(',"extFields":{')
        parts.append(",".join(items))
        parts.append("}")
    parts.append(f',"flag":{_INT(flag)},"language":{_json_str(lang)},"opaque":{_INT(opaque)}')
    if remark is not None:
        parts.append(f',"remark":{_json_str(remark)}')
    parts.append(f',"serializeTypeCurrentRPC":"JSON","version":{_INT(version)}}}')
    return "".join(parts).encode("utf-8")


def _encode_json_generic(cmd: RemotingCommand) -> bytes:
    obj: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_header(data: bytes, serialize_type: int, body: bytes) -> RemotingCommand:
    """The command of one frame; any malformed header raises ``RemoteProtocolError`` only."""
    try:
        if serialize_type == SERIALIZE_JSON:
            return _decode_json(data, body)
        if serialize_type == SERIALIZE_ROCKETMQ:
            return _decode_binary(data, body)
    except RemoteProtocolError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError, struct.error) as exc:
        # the receive boundary (as h11's): whatever the peer's bytes made a parser raise is
        # the peer's fault, never an exception of another kind escaping into the server
        raise RemoteProtocolError(f"bad header: {type(exc).__name__}: {exc}") from exc
    raise RemoteProtocolError(f"unknown serialize type {serialize_type}")


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _int_field(obj: dict[str, Any], name: str, default: int | None) -> int:
    """A Java ``int`` header field: a JSON number or numeric string within int32."""
    v = obj.get(name, default)
    if v is None:
        raise RemoteProtocolError(f"header lacks {name!r}")
    n: int | None = None
    if isinstance(v, (bool, int)):
        n = int(v)
    elif isinstance(v, float):
        if v.is_integer():  # False for inf and nan, which int() cannot take
            n = int(v)
    elif isinstance(v, str) and len(v) <= 20:
        try:
            n = int(v)
        except ValueError:
            pass
    if n is None:
        raise RemoteProtocolError(f"header field {name!r} is not an integer: {_short(v)}")
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise RemoteProtocolError(f"header field {name!r} is outside int32: {_short(v)}")
    return n


def _short(v: object) -> str:
    text = repr(v) if not isinstance(v, (list, dict)) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _decode_json(data: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: deep nesting
        raise RemoteProtocolError(f"header is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"header is JSON {type(obj).__name__}, not an object")
    code = _int_field(obj, "code", None)
    ext_raw = obj.get("extFields") or {}
    if not isinstance(ext_raw, dict):
        raise RemoteProtocolError("header extFields is not an object")
    ext = {k: v if type(v) is str else to_ext_str(v)  # JSON keys are always str
           for k, v in ext_raw.items() if v is not None}
    lang = obj.get("language", "JAVA")
    if isinstance(lang, int):
        lang = _LANG_BY_CODE.get(lang, "OTHER")
    remark = obj.get("remark")
    return RemotingCommand(code=code, language=str(lang),
                           version=_int_field(obj, "version", 0),
                           opaque=_int_field(obj, "opaque", 0),
                           flag=_int_field(obj, "flag", 0),
                           remark=None if remark is None else str(remark),
                           ext_fields=ext, body=body, serialize_type=SERIALIZE_JSON)


def _encode_binary_py(cmd: RemotingCommand) -> bytes:
    try:
        lang = LanguageCode[cmd.language].value
    except KeyError:
        lang = LanguageCode.OTHER.value
    parts = [BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += [_I32.pack(len(remark)), remark]
    ext = bytearray()
    for k, v in cmd.ext_fields.items():
        kb, vb = k.encode("utf-8"), v.encode("utf-8")
        ext += _H16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
    parts += [_I32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def _decode_binary_py(data: bytes, body: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = BIN_FIXED.unpack_from(data, 0)
        p = BIN_FIXED.size
        (rlen,) = _I32.unpack_from(data, p)
        p += 4
        if rlen < 0 or p + rlen > len(data):
            raise RemoteProtocolError(f"remark length {rlen} overruns the header")
        remark = data[p:p + rlen].decode("utf-8") if rlen else None
        p += rlen
        (elen,) = _I32.unpack_from(data, p)
        p += 4
        end = p + elen
        if elen < 0 or end > len(data):
            raise RemoteProtocolError(f"ext length {elen} overruns the header")
        ext: dict[str, str] = {}
        while p < end:
            (klen,) = _H16.unpack_from(data, p)
            p += 2
            key = data[p:p + klen].decode("utf-8")
            p += klen
            (vlen,) = _I32.unpack_from(data, p)
            p += 4
            if klen < 0 or vlen < 0 or p + vlen > end:
                raise RemoteProtocolError("ext entry overruns the header")
            ext[key] = data[p:p + vlen].decode("utf-8")
            p += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"bad ROCKETMQ header: {exc}") from exc
    return RemotingCommand(code=code, language=_LANG_BY_CODE.get(lang, "OTHER"),
                           version=version, opaque=opaque, flag=flag, remark=remark,
                           ext_fields=ext, body=body, serialize_type=SERIALIZE_ROCKETMQ)


# ---- the compiled twins (``_speedups.pyx``; ``rocketstore._native``) --------------------------
_encode_json_fast, _encode_binary, _decode_binary = (_encode_json_fast_py, _encode_binary_py,
                                                     _decode_binary_py)
_speedups = _native.load("rocketstore.remoting._speedups")
if _speedups is not None:
    _encode_json_fast, _encode_binary, _decode_binary = (
        _speedups.encode_json_fast, _speedups.encode_binary, _speedups.decode_binary)


# ---- request-header field names -------------------------------------------------------------
# SendMessageRequestHeaderV2 shortens SendMessageRequestHeader's names to single letters.
SEND_V2_FIELDS = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch",
    "n": "brokerName",
}
SEND_V1_TO_V2 = {v: k for k, v in SEND_V2_FIELDS.items()}


def send_header_v1(ext: dict[str, str]) -> dict[str, str]:
    """Expand a SEND_MESSAGE_V2 header's single-letter names to the V1 names."""
    return {SEND_V2_FIELDS.get(k, k): v for k, v in ext.items()}
