"""The sans-IO remoting codec: frames, both header serialisations, coercion, limits, errors."""
from __future__ import annotations

import ast
import json
import pathlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.errors import LocalProtocolError, RemoteProtocolError
from rocketstore.remoting import (CLOSED, NEED_DATA, RPC_ONEWAY, RPC_TYPE_RESPONSE,
                                  SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand,
                                  RemotingConnection, RequestCode, ResponseCode, send_header_v1)
from rocketstore.remoting.message_batch import BatchEntry, decode_batch, encode_batch

REMOTING_DIR = pathlib.Path(__file__).resolve().parents[2] / "src" / "rocketstore" / "remoting"


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (stype << 24) | len(header)) \
        + header + body


def test_remoting_package_does_no_io():
    for path in REMOTING_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                root = n.split(".")[0]
                assert root not in ("asyncio", "socket", "selectors", "threading", "trio"), \
                    f"{path.name} imports {n}"


def test_json_golden_response_bytes():
    req = RemotingCommand(code=10, language="CPP", version=63, opaque=5, flag=0,
                          ext_fields={"topic": "T"})
    resp = req.response(ResponseCode.SUCCESS, {"msgId": "7F00000100002A9F0000000000000000",
                                               "queueId": 0, "queueOffset": 0})
    data = RemotingConnection().send(resp)
    header = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"0",'
              b'"queueOffset":"0"},"flag":1,"language":"JAVA","opaque":5,'
              b'"serializeTypeCurrentRPC":"JSON","version":401}')
    assert data == frame(header)


def test_response_echoes_opaque_and_serialisation_and_sets_flag():
    req = RemotingCommand(code=30, opaque=77, serialize_type=SERIALIZE_ROCKETMQ,
                          ext_fields={"topic": "T", "queueId": "1"})
    resp = req.response(ResponseCode.SUCCESS, {"offset": 12})
    assert resp.opaque == 77 and resp.is_response and not resp.is_oneway
    assert resp.serialize_type == SERIALIZE_ROCKETMQ
    assert resp.ext_fields == {"offset": "12"}
    c = RemotingConnection()
    c.receive_data(c.send(resp))
    back = c.next_command()
    assert back.serialize_type == SERIALIZE_ROCKETMQ and back.ext_fields == {"offset": "12"}
    assert back.flag == RPC_TYPE_RESPONSE and back.opaque == 77


def test_rocketmq_binary_header_golden():
    cmd = RemotingCommand(code=10, language="JAVA", version=401, opaque=3, flag=RPC_ONEWAY,
                          remark="hi", ext_fields={"k": "v"}, serialize_type=SERIALIZE_ROCKETMQ)
    data = RemotingConnection().send(cmd)
    header = (struct.pack(">hbhii", 10, 0, 401, 3, 2) + struct.pack(">i", 2) + b"hi"
              + struct.pack(">i", 2 + 1 + 4 + 1) + struct.pack(">h", 1) + b"k"
              + struct.pack(">i", 1) + b"v")
    assert data == frame(header, stype=1)


def test_incoming_values_of_any_json_type_are_coerced_to_strings():
    header = json.dumps({"code": 11, "language": "JAVA", "version": 121, "opaque": 9, "flag": 0,
                         "extFields": {"queueId": 3, "b": True, "c": False, "d": 1.0,
                                       "e": "x", "n": None}}).encode()
    c = RemotingConnection()
    c.receive_data(frame(header, b"body"))
    cmd = c.next_command()
    assert cmd.ext_fields == {"queueId": "3", "b": "true", "c": "false", "d": "1", "e": "x"}
    assert cmd.body == b"body" and cmd.get_int("queueId") == 3 and cmd.get_bool("b")
    assert cmd.get_bool("c") is False


def test_language_given_as_ordinal_and_missing_fields_default():
    c = RemotingConnection()
    c.receive_data(frame(b'{"code":34,"language":1}'))
    cmd = c.next_command()
    assert cmd.language == "CPP" and cmd.opaque == 0 and cmd.ext_fields == {}


def test_v2_send_header_expands_to_v1_names():
    assert send_header_v1({"a": "PG", "b": "T", "e": "2", "i": "TAGS\x01A\x02"}) == {
        "producerGroup": "PG", "topic": "T", "queueId": "2", "properties": "TAGS\x01A\x02"}


commands = st.builds(
    RemotingCommand,
    code=st.integers(0, 32767),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "GO"]),
    version=st.integers(0, 32767),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(max_size=20).filter(lambda s: s != ""),
    ext_fields=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=16), max_size=5),
    body=st.binary(max_size=64),
    serialize_type=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
)


@settings(max_examples=200, deadline=None)
@given(cmds=st.lists(commands, min_size=1, max_size=4), cuts=st.lists(st.integers(1, 50)))
def test_round_trip_under_any_chunking(cmds, cuts):
    enc = RemotingConnection()
    stream = b"".join(enc.send(c) for c in cmds)
    dec = RemotingConnection()
    got, pos = [], 0
    sizes = cuts or [len(stream)]
    i = 0
    while pos < len(stream):
        n = sizes[i % len(sizes)]
        dec.receive_data(stream[pos:pos + n])
        pos += n
        i += 1
        while (c := dec.next_command()) is not NEED_DATA:
            got.append(c)
    dec.receive_data(b"")
    assert dec.next_command() is CLOSED
    assert got == cmds


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_give_commands_need_data_or_remote_protocol_error(data):
    c = RemotingConnection()
    c.receive_data(data)
    c.receive_data(b"")  # then the peer closes
    try:
        while c.next_command() is not CLOSED:
            pass
    except RemoteProtocolError:
        assert c.state == "ERROR"
        with pytest.raises(RemoteProtocolError):
            c.next_command()


@pytest.mark.parametrize("data, why", [
    (struct.pack(">i", 2**31 - 1) + b"\0" * 4, "frame length"),
    (b"\x80\x00\x00\x00", "frame length"),  # 2**31 reads as a negative int32
    (struct.pack(">i", 16 * 1024 * 1024 + 1), "frame length"),
    (struct.pack(">i", 3) + b"\0" * 8, "frame length"),
    (struct.pack(">ii", 10, 0x05000002) + b"{}", "serialize type"),
    (struct.pack(">ii", 10, 100) + b"\0" * 6, "header length"),
    (frame(b"not json at all"), "not JSON"),
    (frame(b"[1,2,3]"), "not an object"),
    (frame(b'{"opaque":1}'), "code"),
    (frame(b'{"code":"ten"}'), "integer"),
    (frame(b'{"code":1,"extFields":[1]}'), "extFields"),
    (frame(b"\xff\xfe"), "not JSON"),
    (frame(struct.pack(">hbhii", 1, 0, 1, 1, 0) + struct.pack(">i", 99), stype=1), "remark"),
])
def test_bad_input_raises_remote_protocol_error(data, why):
    c = RemotingConnection()
    c.receive_data(data)
    with pytest.raises(RemoteProtocolError, match=why):
        c.next_command()
    assert c.state == "ERROR"


def test_large_length_is_rejected_before_the_bytes_arrive():
    c = RemotingConnection()
    c.receive_data(struct.pack(">i", 100 * 1024 * 1024))
    with pytest.raises(RemoteProtocolError):
        c.next_command()


def test_truncated_frame_then_eof_is_an_error_and_clean_eof_is_closed():
    whole = RemotingConnection().send(RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"{}"))
    c = RemotingConnection()
    c.receive_data(whole[:-3])
    assert c.next_command() is NEED_DATA
    c.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        c.next_command()
    c2 = RemotingConnection()
    c2.receive_data(whole)
    c2.receive_data(b"")
    assert c2.next_command().code == RequestCode.HEART_BEAT
    assert c2.next_command() is CLOSED


def test_sending_over_the_frame_limit_is_a_local_error():
    c = RemotingConnection(max_frame=1024)
    with pytest.raises(LocalProtocolError):
        c.send(RemotingCommand.request(10, {}, b"x" * 2000))


def test_message_batch_round_trip_and_errors():
    entries = [BatchEntry(b"a", {"TAGS": "A", "UNIQ_KEY": "U1"}, 0),
               BatchEntry(b"", {}, 7), BatchEntry(b"xyz" * 100, {"KEYS": "k1 k2"}, 1)]
    data = encode_batch(entries)
    assert decode_batch(data) == entries
    # first entry, by hand: size, magic 0, crc 0, flag, body len, body, props len, props
    props = b"TAGS\x01A\x02UNIQ_KEY\x01U1\x02"
    first = struct.pack(">iiiii", 20 + 1 + 2 + len(props), 0, 0, 0, 1) + b"a" \
        + struct.pack(">h", len(props)) + props
    assert data.startswith(first)
    with pytest.raises(ValueError, match="entry 0"):
        decode_batch(data[:10])
    with pytest.raises(ValueError, match="entry 1"):
        decode_batch(data[:len(first) + 5])
