"""A worker's read of sends planned in one call (``broker.workers.put_batch.link_puts``): the
link PUT each plain send becomes, decoded independently, None for every other send, and the
compiled twin (``broker/workers/_speedups.pyx``) byte-identical to the pure function on
generated requests. The first two tests run on whichever path is loaded (``make test`` runs
this file on both); the last one is skipped, visibly, without the compiled twin."""
from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.broker.send_rule import SendRules
from rocketstore.broker.workers import link as L
from rocketstore.broker.workers import put_batch
from rocketstore.format.message import decode_message
from rocketstore.remoting.header import SEND_V1_TO_V2

RULES = SendRules(cluster_name="C1", store_host="127.0.0.1:10911", generate_uniq_key=True,
                  max_message_size=4096, fast_sends=True, max_reconsume_times=3)
PEER = "127.0.0.1:50000"
NOW = 1_700_000_000_000


def keys(prefix: str):
    n = itertools.count()
    return lambda: f"{prefix}{next(n):08X}"


def v2(h: dict[str, str]) -> dict[str, str]:
    return {SEND_V1_TO_V2.get(k, k): v for k, v in h.items()}


def header(topic="T1", queue="3", props="TAGS\x01a\x02", born="1234", **more) -> dict[str, str]:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "8", "queueId": queue, "sysFlag": "0",
            "bornTimestamp": born, "flag": "7", "properties": props, "reconsumeTimes": "0",
            **more}


def test_a_plain_send_becomes_one_link_put_holding_its_record():
    body = b"hello" * 20
    items = [(310, v2(header()), body), (10, header(queue="1", props="", born="0"), b"x")]
    got = put_batch.link_puts(items, PEER, RULES, 100, 9, now_ms=NOW, uniq_key=keys("K"))
    msgs = L.LinkDecoder().feed(b"".join(got))
    assert [k for k, _ in msgs] == [L.PUT, L.PUT]
    first, second = (L.parse_put(p) for _, p in msgs)
    assert (first.seq, first.conn, first.queue_id, first.topic, first.body_len,
            first.default_queue_nums) == (100, 9, 3, "T1", len(body), 8)
    assert (second.seq, second.queue_id, second.body_len) == (101, 1, 1)
    m = decode_message(first.record)
    assert (m.topic, m.queue_id, m.body, m.flag, m.born_timestamp) == ("T1", 3, body, 7, 1234)
    assert m.properties == {"TAGS": "a", "CLUSTER": "C1", "UNIQ_KEY": "K00000000"}
    assert first.record[first.props_off - 2:first.props_off] == \
        len(b"TAGS\x01a\x02CLUSTER\x01C1\x02UNIQ_KEY\x01K00000000\x02").to_bytes(2, "big")
    m2 = decode_message(second.record)
    assert (m2.born_timestamp, m2.properties["UNIQ_KEY"]) == (NOW, "K00000001")


def test_every_send_that_is_not_plain_goes_to_the_writer_whole():
    cases = [
        (320, header(), "a batch"),
        (310, header(batch="true"), "a batch flag"),
        (310, header(props="DELAY\x013\x02"), "a delay level"),
        (310, header(props="TRAN_MSG\x01true\x02"), "a half message"),
        (310, header(props="TIMER_DELAY_SEC\x015\x02"), "a timer"),
        (310, header(sysFlag="4"), "a prepared transaction"),
        (310, header(topic="%RETRY%G"), "a retry topic"),
        (310, header(topic="a/b"), "a topic no directory may have"),
        (310, header(topic=""), "no topic"),
        (310, header(queue="-1"), "a queue for the writer to pick"),
        (310, header(queue="x"), "a header integer that is not one"),
        (11, header(), "not a send"),
    ]
    items = [(code, v2(h), b"b") for code, h, _ in cases]
    got = put_batch.link_puts(items, PEER, RULES, 1, 1, now_ms=NOW)
    assert [why for (_, _, why), g in zip(cases, got) if g is not None] == []
    off = SendRules(**{**RULES.to_json(), "fast_sends": False})
    assert put_batch.link_puts([(310, v2(header()), b"b")], PEER, off, 1, 1) == [None]
    big = SendRules(**{**RULES.to_json(), "max_message_size": 3})
    assert put_batch.link_puts([(310, v2(header()), b"four")], PEER, big, 1, 1) == [None]


# -- the compiled twin against the pure function -----------------------------------------------
_ints = st.one_of(st.integers(-3, 12).map(str), st.integers(-2**40, 2**40).map(str),
                  st.sampled_from(["", "null", "true", "False", " 5", "+2", "x", "0x1", "9" * 20,
                                   "-", "١", "70000", "-32769"]))
_prop_names = st.sampled_from(["KEYS", "TAGS", "a", "UNIQ_KEY", "DELAY", "TRAN_MSG", "CLUSTER",
                               "TIMER_DELAY_SEC", "WAIT", ""])
_prop_values = st.sampled_from(["0", "1", "3", "true", "TRUE", "false", "x y", "", "ü"])


_safe_ints = st.integers(0, 7).map(str)
_plain_props = st.lists(st.tuples(st.sampled_from(["KEYS", "TAGS", "a", "UNIQ_KEY", "WAIT",
                                                   "CLUSTER", "DELAY", "TRAN_MSG"]),
                                  st.sampled_from(["0", "1", "x y", "false", "ü"])),
                        max_size=4).map(lambda kv: "".join(f"{k}\x01{v}\x02" for k, v in kv))


@st.composite
def send_items(draw):
    """Half near a plain send (most of those become PUTs), half anything a header may hold."""
    if draw(st.booleans()):
        ints, props = _safe_ints, _plain_props
        topics = st.sampled_from(["T1", "T_2", "ü-topic"])
        sys_flags = st.sampled_from(["0", "0", "1", "4"])
    else:
        ints = _ints
        props = st.one_of(
            st.lists(st.tuples(_prop_names, _prop_values), max_size=5).map(
                lambda kv: "".join(f"{k}\x01{v}\x02" for k, v in kv)),
            st.text(alphabet="ab\x01\x02T_IMER", max_size=12))
        topics = st.sampled_from(["T1", "T_2", "%RETRY%G", "%DLQ%G", "a/b", "", "x" * 130,
                                  "ü-topic", "..", "SCHEDULE_TOPIC_XXXX"])
        sys_flags = st.one_of(st.sampled_from(["0", "4", "8", "12", "1", "-1"]), ints)
    h = {"producerGroup": "PG", "topic": draw(topics),
         "defaultTopicQueueNums": draw(ints), "queueId": draw(ints), "flag": draw(ints),
         "sysFlag": draw(sys_flags),
         "bornTimestamp": draw(st.one_of(st.sampled_from(["0", "1234", ""]), ints)),
         "reconsumeTimes": draw(st.sampled_from(["0", "1", "5", ""])),
         "properties": draw(props)}
    if draw(st.booleans()):
        h["batch"] = draw(st.sampled_from(["false", "true", "1", "0", "TRUE", ""]))
    h = {k: v for k, v in h.items() if k == "topic" or draw(st.integers(0, 9)) > 0}
    style = draw(st.sampled_from(["v2", "v2", "v1", "v2+v1"]))
    if style == "v2":
        h = v2(h)
    elif style == "v2+v1":  # a V1 name beside the letters: the expansion's order decides
        h = {**v2(h), draw(st.sampled_from(["queueId", "flag", "properties"])): draw(_ints)}
    code = draw(st.sampled_from([310, 310, 310, 10, 320, 11]))
    body = draw(st.one_of(st.binary(max_size=64), st.binary(max_size=8), st.just(b"x" * 5000)))
    return code, h, body


rule_sets = st.builds(SendRules, cluster_name=st.sampled_from(["C1", "DefaultCluster"]),
                      store_host=st.sampled_from(["127.0.0.1:10911", "[::1]:10911"]),
                      generate_uniq_key=st.booleans(),
                      max_message_size=st.sampled_from([4096, 4096, 4096, 16]),
                      fast_sends=st.integers(0, 7).map(bool))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(send_items(), max_size=8), rule_sets,
       st.sampled_from([PEER, "[::1]:40000", "10.1.2.3:1"]), st.integers(0, 2**40),
       st.integers(0, 2**32 - 1))
def test_compiled_twin_is_byte_identical(items, rules, peer, seq0, conn):
    from tests.conftest import compiled_or_skip
    fast = compiled_or_skip("rocketstore.broker.workers._speedups", "send batch")
    k1, k2 = keys("U"), keys("U")
    want = put_batch.link_puts_py(items, peer, rules, seq0, conn, now_ms=NOW, uniq_key=k1)
    got = fast.link_puts(items, peer, rules, seq0, conn, now_ms=NOW, uniq_key=k2)
    assert got == want
    assert k1() == k2()  # as many UNIQ_KEYs made on both paths
