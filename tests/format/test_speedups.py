"""The compiled record encoder (``format/_speedups.pyx``) against its pure-Python twin.

Every compiled function must return what the pure function in ``format/message.py`` returns —
the same record bytes, the same ``EncodedMessage`` fields — and raise the same exception type for
the same input, over messages hypothesis draws: IPv4 and IPv6 hosts, empty and large bodies,
unicode and illegal properties, fields at and beyond their limits, odd types. The pure functions
are the specification; each record is also decoded again (``decode_message``) and compared with
the message it came from. Skipped, visibly, where the compiled module was not built or
``ROCKETSTORE_PURE_PYTHON`` is set.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import _native
from rocketstore.format import message as M
from rocketstore.format.message import EncodedMessage, Message
from rocketstore.format.record import MAX_PROPERTIES_LENGTH
from tests.conftest import compiled_or_skip

fast = compiled_or_skip("rocketstore.format._speedups", "encoder")


def test_module_uses_the_compiled_functions():
    assert M.encode_message is fast.encode_message
    assert M.encode_properties is fast.encode_properties
    assert M.create_message_ids is fast.create_message_ids
    assert M.encode_batch is fast.encode_batch
    assert M.string_to_properties is fast.string_to_properties
    assert _native.active()["rocketstore.format._speedups"] is True
    from rocketstore.store import put_path
    assert put_path.encode_batch is fast.encode_batch


def test_pure_python_variable_loads_no_compiled_encoder():
    code = ("from rocketstore.format import message as M; from rocketstore.store import commitlog;"
            " from rocketstore import _native;"
            "print(M.encode_message is M.encode_message_py, M.encode_batch is M.encode_batch_py,"
            " commitlog.write_records is commitlog.write_records_py,"
            " _native.active().get('rocketstore.format._speedups'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROCKETSTORE_PURE_PYTHON": "1"}).stdout
    assert out.strip() == "True True True False"


def outcome(fn, *args, **kwargs):
    """(kind, value): the result as plain values, or the exception type."""
    try:
        r = fn(*args, **kwargs)
    except Exception as exc:  # the comparison is over types; wording comes from the pure path
        return ("raise", type(exc))
    return ("ok", _plain(r))


def _plain(r):
    if isinstance(r, EncodedMessage):
        return (type(r).__name__, bytes(r.data), r.store_ts_pos, r.topic, r.queue_id, r.sys_flag,
                dict(r.properties))
    if isinstance(r, (list, tuple)):
        return type(r).__name__, [_plain(x) for x in r]
    return r


texts = st.text(max_size=10) | st.sampled_from(
    ["", "a\x01b", "a\x02b", "\x01", "ü€😀", "\ud800", "TagA", "k1 k2", " "])
names = texts | st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "WAIT", "DELAY", "TIMER_DELAY_SEC",
                                 "TIMER_OUT_MS", "TIMER_DELIVER_MS", "TIMER_DELAY_MS"])
values = texts | st.none() | st.sampled_from(["false", "0", "3", 7, b"x"])
hosts = st.sampled_from([
    "127.0.0.1:10911", "10.1.2.3:1", "[::1]:10911", "::1:9876", "[fe80::1:2]:0",
    "[::ffff:1.2.3.4]:5", "255.255.255.255:2147483647", " 1.2.3.4:5 ",
    "nohost", "1.2.3.4:-1", "1.2.3.4:2147483648", "1.2.3.4", "", 5, None])
ok_hosts = st.sampled_from(["127.0.0.1:10911", "[::1]:10911", "192.168.0.9:7", "[2001:db8::7]:1"])
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)


def wide(base, lo_hi):
    """``base`` mostly; sometimes just outside the field, a bool, a float or None."""
    lo, hi = lo_hi
    return base | st.sampled_from([lo - 1, hi + 1, 1 << 70, True, 1.0, None, "1"])


bodies = (st.binary(max_size=40) | st.just(b"") | st.binary(min_size=200, max_size=300)
          | st.binary(max_size=8).map(bytearray) | st.binary(max_size=8).map(memoryview)
          | st.sampled_from(["text", None, 12]))
topics = (st.text(min_size=1, max_size=12) | st.sampled_from(
    ["", "T" * 127, "T" * 128, "é" * 64, "é" * 63, "BenchTopic", "rmq_sys_wheel_timer",
     "SCHEDULE_TOPIC_XXXX", 7, None]))


@st.composite
def messages(draw, simple: bool = False) -> Message:
    if simple:  # a legal message: what put paths see nearly always
        return Message(topic=draw(st.sampled_from(["T", "BenchTopic", "é-topic"])),
                       body=draw(st.binary(max_size=64)),
                       tags=draw(st.none() | st.sampled_from(["TagA", "é"])),
                       keys=draw(st.none() | st.lists(st.sampled_from(["k1", "k2", "é"]), max_size=3)),
                       properties=draw(st.none() | st.dictionaries(
                           st.sampled_from(["a", "bb", "ü"]), st.text(
                               st.characters(blacklist_categories=("Cs",),
                                             blacklist_characters="\x01\x02"),
                               min_size=1, max_size=5), max_size=2)),
                       queue_id=draw(st.integers(0, 7)), flag=draw(i32),
                       born_timestamp=draw(st.none() | st.integers(0, 1 << 42)))
    return Message(
        topic=draw(topics), body=draw(bodies),
        tags=draw(st.none() | texts | st.just(5)),
        keys=draw(st.none() | texts | st.lists(texts, max_size=3) | st.tuples(texts)
                  | st.lists(st.just(1), min_size=1, max_size=1)),
        properties=draw(st.none() | st.dictionaries(names, values, max_size=4)),
        queue_id=draw(wide(st.integers(0, (1 << 31) - 1), (0, (1 << 31) - 1))),
        flag=draw(wide(i32, (-(1 << 31), (1 << 31) - 1))),
        sys_flag=draw(wide(st.integers(0, 0xFF) | i32, (-(1 << 31), (1 << 31) - 1))),
        born_timestamp=draw(st.none() | wide(i64, (-(1 << 63), (1 << 63) - 1))),
        born_host=draw(st.none() | hosts), store_host=draw(st.none() | hosts),
        reconsume_times=draw(wide(i32, (-(1 << 31), (1 << 31) - 1))),
        prepared_transaction_offset=draw(wide(i64, (-(1 << 63), (1 << 63) - 1))))


def _props_of(msg: Message) -> object:
    try:
        return msg.all_properties()
    except Exception:  # an odd KEYS list: the encoder's own props then
        return {"a": "b"}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=messages() | messages(simple=True), born=hosts | ok_hosts, store=hosts | ok_hosts, born_ts=wide(i64, (-(1 << 63), (1 << 63) - 1)),
       max_body=st.sampled_from([0, 16, 250, 1 << 22]))
def test_encode_message_matches(msg, born, store, born_ts, max_body):
    props = _props_of(msg)
    kw = dict(born_timestamp=born_ts, born_host=born, store_host=store, max_body_size=max_body)
    got = outcome(fast.encode_message, msg, props, **kw)
    assert got == outcome(M.encode_message_py, msg, props, **kw)
    if got[0] == "ok":
        rec = fast.encode_message(msg, props, **kw)
        data = bytearray(rec.data)
        M.patch_record(data, 0, rec.store_ts_pos, 5, 1234, 99)
        back = M.decode_message(bytes(data), 0, check_crc=True)
        assert (back.topic, bytes(back.body), back.queue_id, back.store_timestamp) == \
            (msg.topic, bytes(msg.body), msg.queue_id, 99)
        assert back.born_host == M.format_host(*M.parse_host(born)[:2])
        assert back.store_host == M.format_host(*M.parse_host(store)[:2])
        assert back.properties == {k: v for k, v in props.items() if v is not None}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=messages(simple=True), born=ok_hosts, store=ok_hosts,
       born_ts=wide(i64, (-(1 << 63), (1 << 63) - 1)))
def test_record_fields_encode_as_the_message_they_copy(msg, born, store, born_ts):
    """A ``RecordFields`` filled from a message is encoded, compiled, as the message is (and
    as the pure encoder encodes either): the batched END's committed copies use it."""
    f = M.RecordFields()
    for name in M.RecordFields.__slots__:
        setattr(f, name, getattr(msg, name))
    props = _props_of(msg)
    kw = dict(born_timestamp=born_ts, born_host=born, store_host=store, max_body_size=1 << 22)
    got = outcome(fast.encode_message, f, props, **kw)
    assert got == outcome(fast.encode_message, msg, props, **kw)
    assert got == outcome(M.encode_message_py, f, props, **kw)


class _Half:
    """A stored half record's fields, as a batched END reads them (``KeptHalf``)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


@st.composite
def halves(draw, simple: bool = False) -> _Half:
    if simple:
        props = {M.PROPERTY_REAL_TOPIC: draw(st.sampled_from(["T", "BenchTopic", "é-topic"])),
                 M.PROPERTY_REAL_QUEUE_ID: str(draw(st.integers(0, 15))),
                 M.PROPERTY_TRANSACTION_PREPARED: "true", "PGROUP": "G",
                 "UNIQ_KEY": draw(st.text("0123456789ABCDEF", min_size=32, max_size=32))}
        props.update(draw(st.dictionaries(st.sampled_from(["a", "TAGS", "KEYS"]),
                                          st.text("xyzé ", min_size=1, max_size=4), max_size=2)))
    else:
        props = draw(st.dictionaries(names, values, max_size=3))
        if draw(st.booleans()):
            props[M.PROPERTY_REAL_TOPIC] = draw(topics)
        if draw(st.booleans()):
            props[M.PROPERTY_REAL_QUEUE_ID] = draw(st.sampled_from(
                ["0", "7", "007", "+3", " 3", "-1", "2147483647", "2147483648", "99999999999",
                 "", "x", "\u0663", "\ud800", "1\ud800", 5, None]))
        if draw(st.booleans()):
            props = dict(props.items()) if draw(st.booleans()) else _MappingOf(props)
    return _Half(properties=props, body=draw(st.binary(max_size=40) if simple else bodies),
                 flag=draw(i32 if simple else wide(i32, (-(1 << 31), (1 << 31) - 1))),
                 sys_flag=draw(st.sampled_from([4, 0, 4 | 0x10, 4 | 0x1, 0x8]) if simple
                               else wide(st.integers(0, 0xFF), (-(1 << 31), (1 << 31) - 1))),
                 born_timestamp=draw(st.none() | st.integers(0, 1 << 42)),
                 born_host=draw(st.sampled_from(["", "10.0.0.1:5"]) if simple else hosts),
                 store_host=draw(st.sampled_from(["", "10.0.0.2:6"]) if simple else hosts),
                 reconsume_times=draw(st.integers(0, 16) if simple else wide(i32, (0, 1))),
                 commitlog_offset=draw(st.integers(0, 1 << 40) if simple else wide(i64, (0, 1))))


class _MappingOf(dict):
    """Not exactly a dict: the compiled function hands it to the pure one."""


def _committed_outcome(fn, hs, **kw):
    out = []
    try:
        got = fn(hs, **kw)
    except Exception as exc:  # a field no record can be made of raises in both, the same way
        return "raised", type(exc).__name__
    for r in got:
        out.append(_plain(r) if isinstance(r, EncodedMessage) else (type(r).__name__, str(r)))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hs=st.lists(halves(simple=True) | halves(), max_size=6),
       now=st.integers(0, 1 << 42), host=ok_hosts)
def test_encode_committed_matches(hs, now, host):
    """The compiled ``encode_committed`` gives the pure one's records and refusals, in order."""
    kw = dict(now=now, host=host, max_body_size=1 << 20)
    assert _committed_outcome(fast.encode_committed, hs, **kw) == \
        _committed_outcome(M.encode_committed_py, hs, **kw)


@settings(max_examples=200, deadline=None)
@given(h=halves(simple=True), now=st.integers(0, 1 << 42))
def test_encode_committed_is_the_committed_copy(h, now):
    """Each record is the half's committed copy, decoded: real topic and queue, COMMIT, the
    half's offset as preparedTransactionOffset, REAL_TOPIC / REAL_QID / TRAN_MSG gone."""
    rec = fast.encode_committed([h], now=now, host="127.0.0.1:9", max_body_size=1 << 20)[0]
    data = bytearray(rec.data)
    M.patch_record(data, 0, rec.store_ts_pos, 3, 4096, 5)
    back = M.decode_message(bytes(data), 0, check_crc=True)
    want_props = {k: v for k, v in h.properties.items()
                  if k not in (M.PROPERTY_REAL_TOPIC, M.PROPERTY_REAL_QUEUE_ID,
                               M.PROPERTY_TRANSACTION_PREPARED)}
    assert (back.topic, back.queue_id, bytes(back.body), back.properties) == (
        h.properties[M.PROPERTY_REAL_TOPIC], int(h.properties[M.PROPERTY_REAL_QUEUE_ID]),
        h.body, want_props)
    kept = ~(0xC | M.BORNHOST_V6_FLAG | M.STOREHOSTADDRESS_V6_FLAG) & 0xFF  # the hosts set those
    assert back.sys_flag & 0xC == 0x8 and back.sys_flag & kept == h.sys_flag & kept
    assert back.prepared_transaction_offset == h.commitlog_offset
    assert back.born_timestamp == (h.born_timestamp or now) and back.flag == h.flag
    assert back.born_host == (h.born_host or "127.0.0.1:9")


def test_record_fields_take_the_compiled_path(monkeypatch):
    """Not the pure fallback: the pure encoder (which looks up ``encode_properties_py`` when
    it runs) is not called for a ``RecordFields``; it is for an object of another type."""
    calls = []
    real = M.encode_properties_py

    def spy(props):
        calls.append(1)
        return real(props)
    monkeypatch.setattr(M, "encode_properties_py", spy)
    kw = dict(born_timestamp=1, born_host="127.0.0.1:1", store_host="127.0.0.1:2",
              max_body_size=100)
    f = M.RecordFields()
    f.topic, f.body, f.queue_id, f.flag, f.sys_flag = "T", b"x", 1, 0, 0
    f.reconsume_times, f.prepared_transaction_offset = 0, 77
    rec = fast.encode_message(f, {"a": "b"}, **kw)
    assert (rec.topic, rec.queue_id) == ("T", 1) and not calls

    class Other:  # same fields, another type: handed to the pure twin
        pass
    o = Other()
    for name in M.RecordFields.__slots__:
        setattr(o, name, getattr(f, name))
    assert fast.encode_message(o, {"a": "b"}, **kw).data == rec.data and calls


@settings(max_examples=300, deadline=None)
@given(props=st.dictionaries(names, values, max_size=5), kind=st.sampled_from(["dict", "items"]))
def test_encode_properties_matches(props, kind):
    if kind == "items":  # a Mapping that is not a dict: the pure path
        from types import MappingProxyType
        props = MappingProxyType(props)
    assert outcome(fast.encode_properties, props) == outcome(M.encode_properties_py, props)


@pytest.mark.parametrize("extra", [-1, 0, 1, 2])
@pytest.mark.parametrize("host", ["127.0.0.1:10911", "[::1]:10911"])
def test_properties_and_body_at_their_limits(extra, host):
    """A properties string of exactly 32767 bytes is stored, one byte more is refused; a body of
    max_body_size bytes is stored, one more is refused — the same on both paths."""
    key = "K"
    target = MAX_PROPERTIES_LENGTH - 3 + extra  # "K" \x01 value \x02
    props = {key: "é" * (target // 2) + "x" * (target % 2)}
    plen = len(M.encode_properties_py(props))
    assert plen == MAX_PROPERTIES_LENGTH + extra
    body = os.urandom(100)
    for max_body in (99, 100):
        msg = Message(topic="T", body=body)
        kw = dict(born_timestamp=1, born_host=host, store_host=host, max_body_size=max_body)
        got = outcome(fast.encode_message, msg, props, **kw)
        assert got == outcome(M.encode_message_py, msg, props, **kw)
        want_ok = plen <= MAX_PROPERTIES_LENGTH and max_body >= 100
        assert (got[0] == "ok") == want_ok
        if not want_ok:
            with pytest.raises(M.MessageTooLarge if max_body < 100 else M.PropertiesTooLarge):
                fast.encode_message(msg, props, **kw)


def test_v6_hosts_set_the_sys_flags_and_widen_the_record():
    msg = Message(topic="T", body=b"abc", sys_flag=0x30 | 0x4)
    for born, store, flags, size in (("1.2.3.4:1", "1.2.3.4:2", 0x4, 0),
                                     ("[::1]:1", "1.2.3.4:2", 0x14, 12),
                                     ("1.2.3.4:1", "[::2]:2", 0x24, 12),
                                     ("[::1]:1", "[::2]:2", 0x34, 24)):
        kw = dict(born_timestamp=7, born_host=born, store_host=store, max_body_size=10)
        rec = fast.encode_message(msg, {}, **kw)
        assert rec.sys_flag == flags
        assert len(rec.data) == M.record_length(3, 1, 0) + size
        assert _plain(rec) == _plain(M.encode_message_py(msg, {}, **kw))


property_strings = st.lists(st.sampled_from(["\x01", "\x02", "KEYS", "a", "ü€😀", "\ud800", "",
                                             "\x01\x01", "\x02\x02", "7F00", " "])
                            | st.text(max_size=6), max_size=12).map("".join)


@settings(max_examples=600, deadline=None)
@given(s=property_strings | st.builds(
    lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items()),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6)) | st.sampled_from(
    [None, b"a\x01b", 5]))
def test_string_to_properties_matches(s):
    """The properties string of a record or a send, split as RocketMQ's
    ``string2messageProperties`` splits it: empty names and values dropped, a name given twice
    keeps its last value, a value may hold ``\\x01``; unicode, lone surrogates and other types
    as the pure function takes them."""
    assert outcome(fast.string_to_properties, s) == outcome(M.string_to_properties_py, s)


def test_string_to_properties_reference_values():
    split = fast.string_to_properties
    assert split("") == {} and split("\x02\x02\x01") == {}
    assert split("KEYS\x01k1 k2\x02TAGS\x01t\x02") == {"KEYS": "k1 k2", "TAGS": "t"}
    assert split("a\x01b\x01c\x02a\x01z\x02\x01v\x02k\x01") == {"a": "z"}  # "b\x01c", then z
    assert split("a\x01b\x01c") == {"a": "b\x01c"}
    assert split("ü\x01€😀") == {"ü": "€😀"}


@settings(max_examples=200, deadline=None)
@given(host=hosts, first=st.integers(-(1 << 64), 1 << 64) | st.integers(0, 1 << 40),
       sizes=st.lists(st.integers(0, 1 << 20) | st.sampled_from([-1, 1 << 50, 1.5, None]),
                      max_size=6))
def test_create_message_ids_matches(host, first, sizes):
    assert outcome(fast.create_message_ids, host, first, sizes) == \
        outcome(M.create_message_ids_py, host, first, sizes)


def test_message_ids_reference_values():
    """Offset msgIds as RocketMQ writes them: ip | port | offset, upper-case hex."""
    assert fast.create_message_ids("10.0.0.1:10911", 0, [100, 28]) == [
        "0A00000100002A9F0000000000000000", "0A00000100002A9F0000000000000064"]
    assert fast.create_message_ids("[::1]:1", 255, [1]) == [
        "00000000000000000000000000000001" "00000001" "00000000000000FF"]


batch_kw = st.fixed_dictionaries({
    "now": wide(st.integers(0, 1 << 42), (-(1 << 63), (1 << 63) - 1)),
    "default_host": hosts, "max_body_size": st.sampled_from([0, 16, 1 << 22]),
    "generate_uniq_key": st.just(False)})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(messages(), min_size=1, max_size=4) | st.lists(messages(simple=True),
                                                                    min_size=1, max_size=6),
       kw=batch_kw)
def test_encode_batch_matches(msgs, kw):
    assert outcome(fast.encode_batch, msgs, **kw) == outcome(M.encode_batch_py, msgs, **kw)


@settings(max_examples=100, deadline=None)
@given(msgs=st.lists(messages(simple=True), min_size=1, max_size=6),
       own=st.lists(st.booleans(), min_size=6, max_size=6))
def test_encode_batch_generates_uniq_keys_for_messages_without_one(msgs, own):
    """With ``generate_uniq_key`` each message without UNIQ_KEY gets a fresh one (distinct, in
    ``UniqKeyGenerator``'s 32-hex-digit form); one that has its own keeps it — on both paths,
    whose records then differ only in those fresh keys."""
    for m, mine in zip(msgs, own):
        if mine:
            m.properties = {**(m.properties or {}), "UNIQ_KEY": "MY" + m.topic}
    kw = dict(now=5, default_host="127.0.0.1:10911", max_body_size=1 << 20, generate_uniq_key=True)
    got_fast, wait_fast = fast.encode_batch(msgs, **kw)
    got_pure, wait_pure = M.encode_batch_py(msgs, **kw)
    assert wait_fast == wait_pure
    fresh = []
    for m, a, b in zip(msgs, got_fast, got_pure):
        ka, kb = a.properties["UNIQ_KEY"], b.properties["UNIQ_KEY"]
        if (m.properties or {}).get("UNIQ_KEY"):
            assert ka == kb == m.properties["UNIQ_KEY"]
            assert a.data == b.data
        else:
            assert len(ka) == len(kb) == 32 and int(ka, 16) >= 0 and ka != kb
            fresh += [ka, kb]
            born = m.born_timestamp if m.born_timestamp is not None else 5
            same = M.encode_message_py(m, {**a.properties}, born_timestamp=born,
                                       born_host="127.0.0.1:10911",
                                       store_host="127.0.0.1:10911", max_body_size=1 << 20)
            assert same.data == a.data
    assert len(set(fresh)) == len(fresh)


@pytest.mark.parametrize("props,error", [
    ({"DELAY": "3"}, "a batch cannot be delayed"),
    ({"DELAY": "0"}, None),
    ({"TIMER_DELAY_SEC": "5"}, "a batch cannot carry timer properties"),
    ({"TIMER_DELIVER_MS": "5", "TIMER_OUT_MS": "1"}, None),
    ({"WAIT": "false"}, None),
])
def test_encode_batch_refusals_and_wait(props, error):
    msgs = [Message("T", b"x"), Message("T", b"y", properties=props)]
    kw = dict(now=1, default_host="127.0.0.1:1", max_body_size=10, generate_uniq_key=False)
    for fn in (fast.encode_batch, M.encode_batch_py):
        if error:
            with pytest.raises(M.BatchRefused, match=error):
                fn(msgs, **kw)
        else:
            recs, wait = fn(msgs, **kw)
            assert len(recs) == 2 and wait == (props.get("WAIT") != "false")


def test_encoded_message_fields_are_plain_values():
    msg = Message(topic="T", body=b"body", tags="TagA", keys=["a", "b"], queue_id=3)
    rec = fast.encode_message(msg, msg.all_properties(), born_timestamp=1,
                              born_host="1.2.3.4:5", store_host="[::1]:6", max_body_size=10)
    assert dataclasses.astuple(rec)[1:] == (56, "T", 3, 0x20, {"TAGS": "TagA", "KEYS": "a b"})
