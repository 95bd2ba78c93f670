"""System topics and the topics no client may send to (RocketMQ 4.9's ``TopicValidator``).

A client that sends to ``SCHEDULE_TOPIC_XXXX`` or to a transaction topic would slip past the
checks the broker applies on the way in (delay levels, half messages, check counts); RocketMQ
refuses such sends with NO_PERMISSION ("Sending message to topic[X] is forbidden."), and so do we.
"""
from __future__ import annotations

from ...format.message import SCHEDULE_TOPIC

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
BENCHMARK_TOPIC = "BenchmarkTest"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

SYSTEM_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC, BENCHMARK_TOPIC,
                           TRANS_HALF_TOPIC, TRACE_TOPIC, TRANS_OP_HALF_TOPIC,
                           TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})
NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                     TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC,
                                     OFFSET_MOVED_EVENT})


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def send_forbidden_remark(topic: str) -> str:
    return f"Sending message to topic[{topic}] is forbidden."
