"""POP state across a controller-mode failover: two ``rocketstore serve`` of one group under
``rocketstore controller``.

A POP consumer (RocketMQ 5's remoting requests, as the Java client sends them) receives every
message of a topic from the master and acks half of them; the master is then SIGKILLed and the
slave promoted in place. The receive checkpoints and acks are records in the CommitLog (the
revive topic), replicated like any message, and the group's offset reaches the slave with the
metadata sync — so the new master revives exactly the unacked messages once their invisible
time is over (through the group's pop retry topic, with one more reconsume), delivers none of
the acked ones again and nothing of the topic a second time; after those are acked too,
nothing more comes."""
from __future__ import annotations

import time

from rocketstore.client.producer import Producer
from rocketstore.format.message import decode_message
from rocketstore.remoting.codes import RequestCode, ResponseCode
from tests.ha.ha_helpers import wait_for
from tests.ha.procs import Proc

from .conftest import call
from .test_failover_services import fail_over, start_pair
from .test_our_brokers import BN

TOPIC = "CtlPopTopic"
GROUP = "CtlPopGroup"
INVISIBLE_MS = 5000


def pop(addr: str, poll_ms: int = 1000):
    """One POP_MESSAGE of every queue of ``TOPIC``: (response header fields, messages)."""
    r = call(addr, RequestCode.POP_MESSAGE,
             {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 32,
              "invisibleTime": INVISIBLE_MS, "pollTime": poll_ms,
              "bornTime": int(time.time() * 1000), "initMode": 1, "expType": "TAG", "exp": "*",
              "order": "false"}, timeout=poll_ms / 1000 + 10)
    if r.code != ResponseCode.SUCCESS:
        assert r.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND), \
            (r.code, r.remark)
        return {}, []
    out, pos, body = [], 0, r.body or b""
    while pos < len(body):
        m = decode_message(body, pos)
        out.append(m)
        pos += m.store_size
    return r.ext_fields, out


def ack_all(addr: str, fields: dict, msgs: list) -> None:
    """ACK_MESSAGE each of ``msgs`` with the receipt handle RocketMQ 5's client builds from the
    pop's answer (startOffsetInfo: "<retry> <queue> <start offset>" each): ``ExtraInfoUtil``'s
    eight fields."""
    starts = {}
    for e in fields["startOffsetInfo"].split(";"):
        retry, qid, so = e.split(" ")
        starts[(retry, int(qid))] = int(so)
    for m in msgs:
        retry = "1" if "RETRY_TOPIC" in m.properties else "0"  # a revived one, from %RETRY%
        handle = " ".join(map(str, (starts[(retry, m.queue_id)], fields["popTime"],
                                    INVISIBLE_MS, fields["reviveQid"], retry, BN, m.queue_id,
                                    m.queue_offset)))
        r = call(addr, RequestCode.ACK_MESSAGE,
                 {"consumerGroup": GROUP, "topic": TOPIC, "queueId": m.queue_id,
                  "extraInfo": handle, "offset": m.queue_offset})
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


def test_popped_and_acked_state_survives_a_failover(controllers, tmp_path):
    procs: list[Proc] = []
    try:
        ns, ctl, b1, b2 = start_pair(controllers, tmp_path, procs)
        with Producer("ctl-pop-pg", ns.addr) as p:
            sent = {p.send(TOPIC, b"pop-%d" % i).msg_id: b"pop-%d" % i for i in range(10)}
        wait_for(lambda: call(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                              {"topic": TOPIC}).code == 0, 30, "the topic's route", 0.3)

        got: dict[str, bytes] = {}
        acked: set[str] = set()
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            fields, msgs = pop(b1.addr)
            assert not {m.uniq_key for m in msgs} & set(got), "a message popped twice"
            got.update((m.uniq_key, m.body) for m in msgs)
            half = [m for m in msgs if int(m.body.split(b"-")[1]) % 2 == 0]
            if half:
                ack_all(b1.addr, fields, half)
                acked.update(m.uniq_key for m in half)
        assert got == sent
        assert len(acked) == 5
        # the checkpoints and acks are replicated with every put (allAckInSyncStateSet); the
        # group's offset reaches b2 with the metadata sync (syncBrokerMetadataPeriod 2 s)
        time.sleep(3.0)

        fail_over(ns, ctl, b1, b2)
        popped_at = time.monotonic()
        again: dict[str, list] = {}
        while time.monotonic() - popped_at < INVISIBLE_MS / 1000 + 15 and \
                len(again) < len(sent) - len(acked):
            fields, msgs = pop(b2.addr, poll_ms=1000)
            for m in msgs:
                again.setdefault(m.uniq_key, []).append(m)
            if msgs:
                ack_all(b2.addr, fields, msgs)
        unacked = set(sent) - acked
        assert set(again) == unacked, (sorted(set(again) - unacked), sorted(unacked - set(again)))
        for key, ms in again.items():
            assert len(ms) == 1, f"{key} revived {len(ms)} times"
            m = ms[0]
            assert m.body == sent[key] and m.reconsume_times == 1, (m.topic, m.reconsume_times)
        # every revived message acked on b2: nothing more comes, the acked ones never
        time.sleep(INVISIBLE_MS / 1000 + 1)
        fields, msgs = pop(b2.addr, poll_ms=2000)
        assert msgs == [], [(m.topic, m.body) for m in msgs]
        assert b2.proc.poll() is None
    finally:
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()
