"""The compiled remoting codec (``remoting/_speedups.pyx``) against its pure-Python twin.

Every function of the compiled module must return what the pure function returns — the same
bytes, the same command — and raise the same exception type for the same input, over commands
and byte strings hypothesis draws (well-formed, truncated, corrupted and hostile). The expected
values come from the pure functions in ``header.py`` / ``connection.py`` (the specification) and,
for encoding, from decoding again with the other path. Skipped, visibly, where the compiled module
was not built or ``ROCKETSTORE_PURE_PYTHON`` is set.
"""
from __future__ import annotations

import dataclasses
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import _native
from rocketstore.errors import RemoteProtocolError
from rocketstore.remoting import connection, header
from rocketstore.remoting.codes import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, LanguageCode
from rocketstore.remoting.command import RemotingCommand
from tests.conftest import compiled_or_skip

fast = compiled_or_skip("rocketstore.remoting._speedups", "codec")


def test_modules_use_the_compiled_functions():
    assert header._decode_binary is fast.decode_binary
    assert header._encode_binary is fast.encode_binary
    assert header._encode_json_fast is fast.encode_json_fast
    assert connection.cut_frame is fast.cut_frame
    assert _native.active()["rocketstore.remoting._speedups"] is True


def test_pure_python_variable_loads_no_compiled_code(tmp_path):
    import subprocess
    import sys
    code = ("from rocketstore.remoting import header, connection; from rocketstore import _native;"
            "print(header._decode_binary is header._decode_binary_py,"
            " connection.cut_frame is connection.cut_frame_py, _native.active())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROCKETSTORE_PURE_PYTHON": "1"}).stdout
    first, second, active = out.strip().split(" ", 2)
    assert (first, second) == ("True", "True")
    loaded = eval(active)  # a dict repr: every compiled module asked for, none loaded
    assert loaded["rocketstore.remoting._speedups"] is False
    assert not any(loaded.values()), loaded


def outcome(fn, *args):
    """(kind, value): the result, or the exception type (messages may differ only in wording)."""
    try:
        r = fn(*args)
    except Exception as exc:  # the comparison is over types
        kind = RemoteProtocolError if isinstance(exc, RemoteProtocolError) else type(exc)
        return ("raise", kind)
    if isinstance(r, RemotingCommand):
        return ("ok", dataclasses.astuple(r))
    return ("ok", r)


texts = st.text(max_size=12) | st.sampled_from(["", "a\"b\\c", "\x00\x1f\x7f", "ü€😀", "\ud800"])
i16 = st.integers(-(1 << 15), (1 << 15) - 1)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
languages = st.sampled_from([m.name for m in LanguageCode]) | texts


@st.composite
def commands(draw) -> RemotingCommand:
    wide = draw(st.booleans())  # values outside the fields' ranges: the pure path's errors
    ints = st.integers(-(1 << 40), 1 << 40) if wide else i32
    return RemotingCommand(
        code=draw(i16 if not wide else ints), language=draw(languages),
        version=draw(i16 if not wide else ints), opaque=draw(ints), flag=draw(ints),
        remark=draw(st.none() | texts),
        ext_fields=draw(st.dictionaries(texts, texts, max_size=5)),
        body=draw(st.binary(max_size=6)),
        serialize_type=draw(st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ])))


@settings(max_examples=400, deadline=None)
@given(cmd=commands())
def test_encoders_match(cmd):
    assert outcome(fast.encode_binary, cmd) == outcome(header._encode_binary_py, cmd)
    assert outcome(fast.encode_json_fast, cmd) == outcome(header._encode_json_fast_py, cmd)


@settings(max_examples=200, deadline=None)
@given(cmd=commands(), odd=st.sampled_from([True, 1.5, None, b"x", 7]))
def test_encoders_match_on_odd_field_types(cmd, odd):
    for name in ("code", "version", "opaque", "flag", "remark", "language"):
        c = dataclasses.replace(cmd, **{name: odd})
        assert outcome(fast.encode_binary, c) == outcome(header._encode_binary_py, c)
        assert outcome(fast.encode_json_fast, c) == outcome(header._encode_json_fast_py, c)
    c = dataclasses.replace(cmd, ext_fields={**cmd.ext_fields, "k": odd})
    assert outcome(fast.encode_binary, c) == outcome(header._encode_binary_py, c)
    assert outcome(fast.encode_json_fast, c) == outcome(header._encode_json_fast_py, c)


@settings(max_examples=400, deadline=None)
@given(cmd=commands(), cut=st.integers(0, 200), flips=st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3))
def test_binary_decoder_matches_on_good_cut_and_corrupted_headers(cmd, cut, flips):
    try:
        good = header._encode_binary_py(cmd)
    except Exception:  # out-of-range fields: nothing to decode
        return
    for data in (good, good[:cut], good + b"\x00" * (cut % 3)):
        assert outcome(fast.decode_binary, data, b"B") == outcome(header._decode_binary_py, data, b"B")
    bad = bytearray(good)
    for pos, value in flips:
        if bad:
            bad[pos % len(bad)] = value
    bad = bytes(bad)
    assert outcome(fast.decode_binary, bad, b"") == outcome(header._decode_binary_py, bad, b"")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64))
def test_binary_decoder_matches_on_arbitrary_bytes(data):
    assert outcome(fast.decode_binary, data, b"") == outcome(header._decode_binary_py, data, b"")


def _frame(hdr: bytes, body: bytes, stype: int) -> bytes:
    return struct.pack(">ii", 4 + len(hdr) + len(body), (stype << 24) | len(hdr)) + hdr + body


@settings(max_examples=300, deadline=None)
@given(hdr=st.binary(max_size=20), body=st.binary(max_size=20), stype=st.integers(0, 3),
       lead=st.binary(max_size=6), cut=st.integers(0, 60), max_frame=st.sampled_from([16, 1 << 24]),
       junk=st.binary(max_size=12))
def test_frame_cutter_matches(hdr, body, stype, lead, cut, max_frame, junk):
    whole = lead + _frame(hdr, body, stype) + junk
    for data in (whole, whole[:len(lead) + cut], junk):
        buf = bytearray(data)
        for pos in {0, len(lead), min(len(lead), len(buf))}:
            assert outcome(fast.cut_frame, buf, pos, max_frame) == \
                outcome(connection.cut_frame_py, buf, pos, max_frame)


@settings(max_examples=100, deadline=None)
@given(cmds=st.lists(commands(), min_size=1, max_size=4), chunk=st.integers(1, 40))
def test_a_stream_decodes_the_same_on_both_paths(cmds, chunk):
    """Whole connections: frames from the pure encoder, fed in chunks to a connection on each path."""
    stream = bytearray()
    for c in cmds:
        try:
            stream += connection.RemotingConnection().send(c)
        except Exception:  # out-of-range fields cannot be framed
            continue

    def run(cut, dec_bin):
        saved = connection.cut_frame, header._decode_binary
        connection.cut_frame, header._decode_binary = cut, dec_bin
        try:
            conn, got = connection.RemotingConnection(), []
            try:
                for i in range(0, len(stream), chunk):
                    conn.receive_data(bytes(stream[i:i + chunk]))
                    while (c := conn.next_command()) is not connection.NEED_DATA:
                        got.append(dataclasses.astuple(c))
            except RemoteProtocolError:  # a JSON header with a field outside int32
                got.append("RemoteProtocolError")
            return got
        finally:
            connection.cut_frame, header._decode_binary = saved

    assert run(fast.cut_frame, fast.decode_binary) == \
        run(connection.cut_frame_py, header._decode_binary_py)
