"""QUERY_ASSIGNMENT's allocation (RocketMQ 5.3.3's ``AllocateMessageQueueAveragely``,
``...ByCircle`` and ``QueryAssignmentProcessor.allocate4Pop``): expected shares written out by
hand from RocketMQ's rules, not computed by the code under test. The wire behaviour against the
Java broker is in ``test_pop5_probe`` (a 5.x push consumer with ``clientRebalance(false)``)."""
from __future__ import annotations

from rocketstore.broker.processors.assignment import (allocate_avg, allocate_by_circle,
                                                       allocate_for_pop)

MQS = [("T", "b", q) for q in range(8)]
CIDS = ["c0", "c1", "c2"]


def qids(mqs):
    return [q for _t, _b, q in mqs]


def test_averagely_gives_consecutive_blocks_the_first_clients_one_more():
    assert [qids(allocate_avg(MQS, CIDS, c)) for c in CIDS] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # more clients than queues: one each, the rest none
    two = MQS[:2]
    assert [qids(allocate_avg(two, CIDS, c)) for c in CIDS] == [[0], [1], []]
    assert allocate_avg(MQS, CIDS, "stranger") == []


def test_by_circle_deals_queues_round():
    assert [qids(allocate_by_circle(MQS, CIDS, c)) for c in CIDS] == [[0, 3, 6], [1, 4, 7],
                                                                        [2, 5]]


def test_pop_share():
    # share <= 0: every client pops each broker's "any queue" (-1)
    two_brokers = [("T", "a", 0), ("T", "a", 1), ("T", "b", 0)]
    assert allocate_for_pop(allocate_avg, two_brokers, CIDS, "c1", 0) == [("T", "a", -1),
                                                                           ("T", "b", -1)]
    # share 1 of 3 clients, 8 queues: its own block and the next client's
    assert qids(allocate_for_pop(allocate_avg, MQS, CIDS, "c2", 1)) == [6, 7, 0, 1, 2]
    # more clients than queues: one queue each, by position
    four = ["c0", "c1", "c2", "c3"]
    assert qids(allocate_for_pop(allocate_avg, MQS[:3], four, "c3", 1)) == [0]
