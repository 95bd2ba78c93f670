"""The send rule (``broker.send_rule.plan_send``) on generated send headers: what each becomes,
the record a plain send is encoded into, and the same decision on every route."""
from __future__ import annotations

from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.send_rule import (Put, Refused, SendRules, Whole, plan_send,
                                          put_failure_remark, send_answer_header, send_topic)
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.format.message import decode_message
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.header import SEND_V1_TO_V2
from rocketstore.store.results import PutStatus

RULES = SendRules(cluster_name="C1", store_host="127.0.0.1:10911", generate_uniq_key=True,
                  max_message_size=4096, fast_sends=True, max_reconsume_times=3)
PEER = "127.0.0.1:50000"
NOW = 1_700_000_000_000

_prop_name = st.sampled_from(["KEYS", "TAGS", "a", "UNIQ_KEY", "DELAY", "TRAN_MSG",
                              "TIMER_DELAY_SEC", "WAIT"])
_prop_value = st.sampled_from(["0", "1", "3", "true", "false", "x y", "abc"])
_props = st.dictionaries(_prop_name, _prop_value, max_size=4)
_int_text = st.one_of(st.integers(-5, 40).map(str), st.sampled_from(["", "null", "true", "x"]))


@st.composite
def send_requests(draw):
    props = draw(_props)
    topic = draw(st.sampled_from(["T1", "T_2", "%RETRY%G", "SCHEDULE_TOPIC_XXXX", "a/b", "",
                                  "x" * 130]))
    h = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
         "defaultTopicQueueNums": draw(st.sampled_from(["4", "8", "", "70000"])),
         "queueId": draw(_int_text), "sysFlag": draw(st.sampled_from(["0", "4", "8", "12"])),
         "bornTimestamp": draw(st.sampled_from(["0", "1234", ""])), "flag": draw(_int_text),
         "properties": "".join(f"{k}\x01{v}\x02" for k, v in props.items()),
         "reconsumeTimes": draw(st.sampled_from(["0", "2", "5"]))}
    if draw(st.booleans()):
        h["batch"] = draw(st.sampled_from(["true", "false"]))
    code = draw(st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                                 RequestCode.SEND_BATCH_MESSAGE]))
    if code != RequestCode.SEND_MESSAGE:
        h = {SEND_V1_TO_V2[k]: v for k, v in h.items()}
    body = draw(st.binary(max_size=64)) if draw(st.integers(0, 9)) else b"z" * 5000
    return code, h, body, props


def _as_int(v: str, default: int = 0) -> int | None:
    """The test's own reading of a header integer (None: not one)."""
    if v in ("", "null"):
        return default
    if v == "true":
        return 1
    try:
        return int(v)
    except ValueError:
        return None


def _v1(h: dict[str, str]) -> dict[str, str]:
    back = {v: k for k, v in SEND_V1_TO_V2.items()}
    return h if "topic" in h else {back.get(k, k): v for k, v in h.items()}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(send_requests())
def test_a_worker_plans_records_only_for_plain_sends(req):
    code, h, body, props = req
    plan = plan_send(code, h, body, PEER, RULES, None, NOW)
    v1 = _v1(h)
    ints = {k: _as_int(v1[k]) for k in ("queueId", "sysFlag", "flag", "reconsumeTimes",
                                         "bornTimestamp", "defaultTopicQueueNums")}
    batch = code == RequestCode.SEND_BATCH_MESSAGE or v1.get("batch") == "true"
    topic = v1["topic"]
    plain = (not batch and None not in ints.values() and not topic.startswith("%")
             and topic not in ("", "a/b") and len(topic) <= 127 and ints["queueId"] >= 0
             and not ints["sysFlag"] & 12 and -32768 <= ints["defaultTopicQueueNums"] <= 32767
             and not any(k.startswith("TIMER_") for k in props)
             and props.get("DELAY", "0") == "0" and props.get("TRAN_MSG") != "true"
             and len(body) <= RULES.max_message_size)
    if not plain:  # a worker sends these whole (or refused: the writer answers either way)
        assert not isinstance(plan, Put), (h, plan)
        return
    assert isinstance(plan, Put), (h, plan)
    m = decode_message(plan.record.data)
    assert (m.topic, m.queue_id, m.body, m.flag) == (topic, ints["queueId"], body, ints["flag"])
    assert m.born_host == PEER and m.reconsume_times == ints["reconsumeTimes"]
    assert m.born_timestamp == (ints["bornTimestamp"] or NOW)
    want = {k: v for k, v in props.items()}
    want["CLUSTER"] = "C1"
    assert {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"} == \
        {k: v for k, v in want.items() if k != "UNIQ_KEY"}
    assert m.properties["UNIQ_KEY"] == props.get("UNIQ_KEY", m.properties["UNIQ_KEY"])
    assert len(m.properties["UNIQ_KEY"]) == (len(props["UNIQ_KEY"]) if "UNIQ_KEY" in props else 32)
    assert plan.record.data[plan.props_off:].decode().startswith(
        next(iter(m.properties)) if m.properties else "")
    assert plan.body_len == len(body)


def test_answers_have_one_shape():
    assert send_answer_header("ID", 2, 7) == {
        "msgId": "ID", "queueId": 2, "queueOffset": 7, "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true", "recallHandle": None, "transactionId": None}
    assert put_failure_remark(PutStatus.SERVICE_NOT_AVAILABLE, "store is shut down") == \
        "put message failed: SERVICE_NOT_AVAILABLE store is shut down"
    assert put_failure_remark(PutStatus.SERVICE_NOT_AVAILABLE, None, batch=True) == \
        "put messages failed: SERVICE_NOT_AVAILABLE"
    assert put_failure_remark(PutStatus.WHEEL_TIMER_MSG_ILLEGAL, "too far") == "too far"


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(send_requests())
def test_with_the_topic_table_every_send_is_decided(tmp_path, req):
    """The processor's and the one-process path's plan: the topic checks answer first; a plan
    that is a ``Put`` is the worker's ``Put`` (the same record but for the UNIQ_KEY)."""
    code, h, body, props = req
    cfg = BrokerConfig()
    topics = TopicConfigManager(str(tmp_path))
    lookup = partial(send_topic, topics, cfg)
    plan = plan_send(code, h, body, PEER, RULES, lookup, NOW)
    v1 = _v1(h)
    topic = v1["topic"]
    if topic in ("SCHEDULE_TOPIC_XXXX",):
        assert plan == Refused(ResponseCode.NO_PERMISSION,
                               f"Sending message to topic[{topic}] is forbidden.")
        return
    if _as_int(v1["defaultTopicQueueNums"]) is None:
        assert isinstance(plan, Refused) and plan.code == ResponseCode.SYSTEM_ERROR
        return
    if isinstance(plan, Put):
        alone = plan_send(code, {**h, **({"queueId": str(plan.queue_id)} if "topic" in h else
                                        {"e": str(plan.queue_id)})}, body, PEER, RULES, None, NOW)
        assert isinstance(alone, Put)
        a, b = decode_message(plan.record.data), decode_message(alone.record.data)
        a.properties.pop("UNIQ_KEY"), b.properties.pop("UNIQ_KEY")
        assert (a.topic, a.queue_id, a.body, a.properties) == (b.topic, b.queue_id, b.body,
                                                               b.properties)
        assert 0 <= plan.queue_id < topics.get(topic).write_queue_nums
    elif isinstance(plan, Whole) and plan.dlq:
        assert plan.message.topic == "%DLQ%G" and plan.message.queue_id == 0
        assert _as_int(v1["reconsumeTimes"]) >= RULES.max_reconsume_times
