"""Fuzzing the sans-IO frame codec: whatever bytes a peer sends, ``next_command`` returns a
command, ``NEED_DATA`` or ``CLOSED``, or raises ``RemoteProtocolError`` — never any other
exception (deep JSON nesting once escaped as ``RecursionError``, ``1e400`` as ``OverflowError``,
``NaN`` as ``ValueError``). A decoded command can always be answered."""
from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.errors import RemoteProtocolError
from rocketstore.remoting import (CLOSED, NEED_DATA, SERIALIZE_JSON, SERIALIZE_ROCKETMQ,
                                  RemotingCommand, RemotingConnection, ResponseCode)


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) \
        + header + body


def drain(data: bytes) -> list[RemotingCommand]:
    """Feed ``data`` then EOF; every command decoded, or RemoteProtocolError (the invariant)."""
    c = RemotingConnection()
    c.receive_data(data)
    c.receive_data(b"")
    got = []
    try:
        while (cmd := c.next_command()) is not CLOSED:
            assert cmd is not NEED_DATA  # after EOF the codec must decide
            got.append(cmd)
    except RemoteProtocolError:
        assert c.state == "ERROR"
        with pytest.raises(RemoteProtocolError):
            c.next_command()
    for cmd in got:  # the broker answers every request it decoded: that must encode
        for stype in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
            cmd.serialize_type = stype
            RemotingConnection().send(cmd.response(ResponseCode.SUCCESS, {"k": "v"}))
    return got


def nested(depth: int, leaf: object = 1) -> str:
    return "[" * depth + json.dumps(leaf) + "]" * depth


# JSON values a hostile peer can write: huge and non-finite numbers, deep nesting, odd types
hostile_numbers = st.sampled_from(["1e400", "-1e400", "NaN", "Infinity", "-Infinity",
                                   "99999999999999999999", "-2147483649", "2147483648",
                                   "1.5", "-0.0", "1e5", "0"]) | st.integers().map(str)
json_leaf = st.one_of(st.sampled_from(["null", "true", "false"]), hostile_numbers,
                      st.text(max_size=10).map(json.dumps))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
    st.dictionaries(st.text(max_size=5), inner, max_size=3).map(
        lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")),
    max_leaves=8)
deep_value = st.sampled_from([10, 900, 5_000, 100_000]).map(nested)
field_names = st.sampled_from(["code", "opaque", "flag", "version", "language", "remark",
                               "extFields", "serializeTypeCurrentRPC"]) | st.text(max_size=6)


@st.composite
def hostile_json_headers(draw) -> bytes:
    fields = draw(st.dictionaries(field_names, json_value | deep_value, max_size=6))
    if draw(st.booleans()):
        fields.setdefault("code", draw(hostile_numbers | st.just("10")))
    if draw(st.booleans()):
        ext = draw(st.dictionaries(st.text(max_size=5), json_value | deep_value, max_size=4))
        fields["extFields"] = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in ext.items()) + "}"
    text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields.items()) + "}"
    return text.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(header=hostile_json_headers(), body=st.binary(max_size=8))
def test_hostile_json_headers_decode_or_raise_remote_protocol_error(header, body):
    drain(frame(header, body))


@pytest.mark.parametrize("header", [
    b'{"code":1e400}', b'{"code":NaN}', b'{"code":-Infinity}', b'{"code":1,"opaque":1e400}',
    b'{"code":1,"version":Infinity}', b'{"code":1,"flag":NaN}', b'{"code":2147483648}',
    b'{"code":1,"opaque":99999999999999999999}',
    b'{"code":1,"extFields":{"a":' + nested(100_000).encode() + b'}}',
    b'{"code":1,"remark":' + nested(100_000).encode() + b'}',
    nested(100_000).encode(),
])
def test_known_bad_headers_are_remote_protocol_errors(header):
    c = RemotingConnection()
    c.receive_data(frame(header))
    with pytest.raises(RemoteProtocolError):
        c.next_command()
    assert c.state == "ERROR"


def test_integral_floats_and_numeric_strings_still_decode():
    # fastjson reads 10.0 and "10" into an int field; so do we (within int32)
    c = RemotingConnection()
    c.receive_data(frame(b'{"code":10.0,"opaque":"7","flag":0,"version":-1}'))
    cmd = c.next_command()
    assert (cmd.code, cmd.opaque, cmd.version) == (10, 7, -1)


commands = st.builds(
    RemotingCommand, code=st.integers(0, 32767), opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3), remark=st.none() | st.text(min_size=1, max_size=8),
    ext_fields=st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=8), max_size=4),
    body=st.binary(max_size=16), serialize_type=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]))


@st.composite
def mutated_streams(draw) -> bytes:
    """Valid frames, then bytes flipped, inserted, deleted or the stream cut anywhere."""
    data = bytearray(b"".join(RemotingConnection().send(c)
                              for c in draw(st.lists(commands, min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "cut", "int32"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and data:
            del data[pos:pos + draw(st.integers(1, 4))]
        elif kind == "cut":
            del data[pos:]
        elif kind == "int32" and len(data) >= pos + 4:
            data[pos:pos + 4] = struct.pack(">i", draw(st.sampled_from(
                [-1, 0, 1, 4, 0x7FFFFFFF, -0x80000000, 0xFFFFFF, 16 << 20])))
    return bytes(data)


@settings(max_examples=400, deadline=None)
@given(data=mutated_streams())
def test_mutated_frames_decode_or_raise_remote_protocol_error(data):
    drain(data)


any_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # no lone surrogates
json_commands = st.builds(
    RemotingCommand, code=st.integers(-2**31, 2**31 - 1), language=any_text,
    version=st.integers(-2**31, 2**31 - 1), opaque=st.integers(-2**31, 2**31 - 1),
    flag=st.integers(0, 3), remark=st.none() | any_text,
    ext_fields=st.dictionaries(any_text, any_text, max_size=5))


@settings(max_examples=300, deadline=None)
@given(cmd=json_commands)
def test_hand_built_json_header_equals_json_dumps(cmd):
    from rocketstore.remoting.header import _encode_json_fast, _encode_json_generic, encode_header
    fast = _encode_json_fast(cmd)
    assert fast is not None and fast == _encode_json_generic(cmd)
    assert encode_header(cmd) == fast
    c = RemotingConnection()
    c.receive_data(c.send(cmd))
    back = c.next_command()
    assert (back.code, back.language, back.opaque, back.remark, back.ext_fields) == \
        (cmd.code, cmd.language, cmd.opaque, cmd.remark, cmd.ext_fields)


def test_unusual_field_types_take_the_generic_json_path():
    from rocketstore.remoting.header import _encode_json_fast, encode_header
    cmd = RemotingCommand(code=10, ext_fields={"n": 5, "s": "x"})  # a non-str ext value
    assert _encode_json_fast(cmd) is None
    assert b'"extFields":{"n":5,"s":"x"}' in encode_header(cmd)
