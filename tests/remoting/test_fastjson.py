"""The fastjson dialect of RocketMQ's admin bodies: golden bodies written by RocketMQ 4.9.7's
broker (captured from the Java build's answers), round trips, and malformed input."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.remoting import fastjson
from rocketstore.remoting.fastjson import ObjectKey, message_queue_key

# Answers of RocketMQ 4.9.7's broker and name server to codes 202, 106 and 43, byte for byte.
GOLDEN_202 = (
    '{"offsetTable":{{"brokerName":"broker-a","queueId":3,"topic":"TopicA"}:'
    '{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},'
    '{"brokerName":"broker-a","queueId":1,"topic":"TopicA"}:'
    '{"lastUpdateTimestamp":1795504019684,"maxOffset":5,"minOffset":0}}}')
GOLDEN_106 = ('{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:19911"},'
              '"brokerName":"broker-a","cluster":"DefaultCluster"}},'
              '"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
GOLDEN_43 = '{"offsetTable":{"TopicA@CG":{0:2,1:5}}}'


def test_golden_bodies_parse():
    b = fastjson.loads(GOLDEN_202)
    rows = {k["queueId"]: v for k, v in b["offsetTable"].items()}
    assert rows[1] == {"lastUpdateTimestamp": 1795504019684, "maxOffset": 5, "minOffset": 0}
    key = next(iter(b["offsetTable"]))
    assert isinstance(key, ObjectKey) and key == {"brokerName": "broker-a", "queueId": 3,
                                                  "topic": "TopicA"}
    assert key == message_queue_key("TopicA", "broker-a", 3)
    assert fastjson.loads(GOLDEN_106)["brokerAddrTable"]["broker-a"]["brokerAddrs"] == \
        {0: "127.0.0.1:19911"}
    assert fastjson.loads(GOLDEN_43) == {"offsetTable": {"TopicA@CG": {0: 2, 1: 5}}}


def test_writes_what_rocketmq_writes():
    table = {message_queue_key("TopicA", "broker-a", 3):
             {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0},
             message_queue_key("TopicA", "broker-a", 1):
             {"lastUpdateTimestamp": 1795504019684, "maxOffset": 5, "minOffset": 0}}
    assert fastjson.dumps({"offsetTable": table}) == GOLDEN_202
    assert fastjson.dumps(fastjson.loads(GOLDEN_106), bare_int_keys=True) == GOLDEN_106
    assert fastjson.dumps(fastjson.loads(GOLDEN_43), bare_int_keys=True) == GOLDEN_43
    # fastjson leaves null fields out; a double keeps its point
    assert fastjson.dumps({"b": None, "a": 0.0, "c": [1, "x"]}) == '{"a":0.0,"c":[1,"x"]}'


def test_standard_json_reads_the_same_as_json_module():
    text = json.dumps({"a": [1, 2.5, {"b": None, "c": "\u00e9\n"}], "d": True})
    assert fastjson.loads(text) == json.loads(text)


names = st.text(alphabet="abcXYZ_%@{}:,\"\\ \u00e9", min_size=1, max_size=6)
scalars = st.one_of(st.integers(-2**63, 2**63 - 1), names, st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False))
flat = st.dictionaries(names, scalars, max_size=4)
keys = st.one_of(names, st.builds(ObjectKey, flat))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=10)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(keys, values, max_size=5))
def test_round_trip(obj):
    assert fastjson.loads(fastjson.dumps(obj)) == obj


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='{}[]:,"0123456789-.aetrufnl \\', max_size=40))
def test_malformed_input_is_a_value_error(text):
    try:
        fastjson.loads(text)
    except ValueError:
        pass


def test_deep_nesting_is_refused_not_a_crash():
    for deep in ("{{" * 500 + '"a":1' + "}" * 1000, "[" * 5000, '{"a":' * 5000):
        try:
            fastjson.loads(deep)
        except ValueError:
            continue
        raise AssertionError(f"accepted {deep[:20]}...")
