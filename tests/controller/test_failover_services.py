"""Timer messages and undecided transactions across a controller-mode failover (issue 31 §3):
two ``rocketstore serve`` brokers of one group under ``rocketstore controller``.

Before the kill: timer messages due soon (the master delivers them), timer messages due after
the failover, and half (prepared) transactions left undecided (the producer's check answers
UNKNOW until the master is dead). The master is SIGKILLed; the slave is promoted. Then every
timer message is on its topic exactly once — none delivered twice by the new master's wheel
(it does not re-enqueue what the old one delivered), each at or after its due time — and each
undecided transaction is checked back from the new master and resolved: the committed ones
delivered once, the rolled-back ones never. The slave serves ``--metrics-port`` and
``--console`` (both show its role and epoch before and after the promotion) and
``--grpc-port`` (restarted on the master's state, on the same port)."""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.request
from typing import Any

from rocketstore.client.producer import Producer
from rocketstore.client.transaction import LocalTransactionState, TransactionProducer
from tests.ha.ha_helpers import pull_every, wait_for
from tests.ha.procs import Proc, free_port_block, start_namesrv

from rocketstore.remoting.codes import RequestCode

from .conftest import call, write_conf
from .test_java_brokers import namesrv_ids, sync_state
from .test_our_brokers import start_ctl_broker

TIMER_TOPIC = "CtlTimerTopic"
TX_TOPIC = "CtlTxTopic"


def pull_all(ns: str, topic: str, queues: int = 2) -> list:
    """Every message of ``topic`` but the seeds (plain sends, to create the topic)."""
    return [m for _, m in pull_every(ns, topic, queues, "ctl-svc-reader") if m.body != b"seed"]


def ops_view(ready: dict) -> tuple[str, int, int]:
    """(role, epoch, broker id) as /metrics says them, checked against the console's overview."""
    text = urllib.request.urlopen(ready["metrics"], timeout=10).read().decode()
    role = next(line.split('"')[1] for line in text.splitlines()
                if line.startswith("rocketstore_ha_role{"))
    epoch = next(int(float(line.split()[-1])) for line in text.splitlines()
                 if line.startswith("rocketstore_ha_master_epoch "))
    over = json.loads(urllib.request.urlopen(ready["console"].rstrip("/") + "/api/overview",
                                             timeout=10).read())
    b = over["brokers"][0]
    assert (b["role"], b["epoch"]) == (role, epoch), (b, role, epoch)
    assert over["replication"]["controller_mode"] is True
    return role, epoch, b["id"]


def start_pair(controllers, tmp_path, procs: list[Proc], b2_args: tuple[str, ...] = (),
               **keys) -> tuple[Proc, Any, Proc, Proc]:
    """A name server, our controller and two ``rocketstore serve`` of one group (``keys`` in
    both broker.conf files, ``b2_args`` on b2's command line): b1 master (brokerId 0 at the
    name server), b2 in the SyncStateSet. Every process is appended to ``procs``."""
    ns = start_namesrv(str(tmp_path / "ns"))
    procs.append(ns)
    ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                 scanNotActiveBrokerInterval=500), str(tmp_path / "ctl.log"))
    b1 = start_ctl_broker(str(tmp_path / "b1"), ns.addr, ctl.addr, free_port_block(), **keys)
    procs.append(b1)
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 1, 30, "b1 master", 0.2)
    b2 = start_ctl_broker(str(tmp_path / "b2"), ns.addr, ctl.addr, free_port_block(), *b2_args,
                          **keys)
    procs.append(b2)
    assert b2.ready["role"] == "SLAVE"
    wait_for(lambda: len(sync_state(ctl.addr).get("inSyncReplicas", [])) == 2, 40,
             "b2 in the SyncStateSet", 0.2)
    wait_for(lambda: namesrv_ids(ns.addr).get(0) == b1.addr, 30, "b1 as brokerId 0", 0.2)
    return ns, ctl, b1, b2


def fail_over(ns: Proc, ctl, b1: Proc, b2: Proc,
              killed: threading.Event | None = None) -> dict:
    """SIGKILL b1 (then set ``killed``); wait until the controller elects b2 and the name server
    has it as brokerId 0; b2's role line (an in-place promotion to SYNC_MASTER, epoch 2)."""
    b1.proc.send_signal(signal.SIGKILL)
    b1.proc.wait(10)
    if killed is not None:
        killed.set()
    t_kill = time.monotonic()
    wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 2, 30, "b2 elected", 0.1)
    wait_for(lambda: namesrv_ids(ns.addr).get(0) == b2.addr, 30, "b2 as brokerId 0", 0.1)
    print(f"b2 registered as master {time.monotonic() - t_kill:.2f} s after the kill")
    promoted = json.loads(b2.proc.stdout.readline())  # the role line: in place
    assert promoted["role"] == "SYNC_MASTER" and promoted["promoted_in_place"], promoted
    assert promoted["broker_id"] == 0 and promoted["master_epoch"] == 2
    return promoted


def test_timers_and_undecided_transactions_survive_a_failover(controllers, tmp_path):
    procs: list[Proc] = []
    tx_producer = None
    try:
        keys = dict(transactionTimeOut=3000, transactionCheckInterval=1000, timerPrecisionMs=100)
        ns, ctl, b1, b2 = start_pair(controllers, tmp_path, procs, (
            "--metrics-port", "0", "--console", "0", "--grpc-port", "0"), **keys)
        assert b2.ready["metrics"] and b2.ready["console"]
        assert ops_view(b2.ready) == ("SLAVE", 1, 2)

        seeds = set()
        with Producer("ctl-svc-pg", ns.addr) as p:  # both topics exist (their routes)
            for topic in (TIMER_TOPIC, TX_TOPIC):
                seeds.add(p.send(topic, b"seed").msg_id)

        def routed(topic: str) -> bool:  # registered at the name server
            return call(ns.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == 0
        wait_for(lambda: routed(TIMER_TOPIC) and routed(TX_TOPIC), 30, "the topics' routes", 0.3)

        killed = threading.Event()
        checks: dict[str, int] = {}
        commit_keys: set[str] = set()

        def check(msg):  # undecided until the old master is gone
            if not killed.is_set():
                return LocalTransactionState.UNKNOW
            checks[msg.uniq_key] = checks.get(msg.uniq_key, 0) + 1
            return LocalTransactionState.COMMIT_MESSAGE if msg.uniq_key in commit_keys \
                else LocalTransactionState.ROLLBACK_MESSAGE

        tx_producer = TransactionProducer("ctl-svc-tx", ns.addr, check_listener=check,
                                          heartbeat_interval_s=1.0).start()
        halves: dict[str, bytes] = {}
        for i in range(6):
            r = tx_producer.send_message_in_transaction(
                TX_TOPIC, b"tx-%d" % i, lambda m, a: LocalTransactionState.UNKNOW)
            assert r.status == "SEND_OK", r.status
            halves[r.msg_id] = b"tx-%d" % i
            if i % 2 == 0:
                commit_keys.add(r.msg_id)

        due: dict[str, int] = {}  # uniq key -> TIMER_DELIVER_MS
        now_ms = int(time.time() * 1000)
        with Producer("ctl-svc-pg", ns.addr, retries=0) as p:
            for i in range(16):
                # 4 due before the kill (delivered by b1), 12 after it (by the promoted b2)
                at = now_ms + (1500 + 100 * i if i < 4 else 9000 + 300 * i)
                r = p.send(TIMER_TOPIC, b"timer-%d" % i,
                           properties={"TIMER_DELIVER_MS": str(at)})
                assert r.status == "SEND_OK", r.status
                due[r.msg_id] = at
        early = {k for k, at in due.items() if at < now_ms + 5000}
        wait_for(lambda: early <= {m.uniq_key for m in pull_all(ns.addr, TIMER_TOPIC)}, 30,
                 "the early timer messages from b1", 0.2)
        time.sleep(0.5)  # their re-puts replicated (allAckInSyncStateSet)

        promoted = fail_over(ns, ctl, b1, b2, killed)
        assert ops_view(b2.ready) == ("SYNC_MASTER", 2, 0)
        assert promoted["grpc"] == b2.ready["grpc"]  # the gRPC service, restarted on its port
        host, _, port = promoted["grpc"].rpartition(":")
        socket.create_connection((host, int(port)), timeout=5).close()

        # every timer message delivered, then (after a further wheel turn) still exactly once
        def timers():
            got = pull_all(ns.addr, TIMER_TOPIC)
            return got if set(due) <= {m.uniq_key for m in got} else None
        wait_for(timers, 40, "every timer message", 0.5)
        time.sleep(2.0)
        got = pull_all(ns.addr, TIMER_TOPIC)
        seen = [m.uniq_key for m in got]
        assert sorted(seen) == sorted(due), f"timer messages twice or missing: {len(seen)} " \
                                            f"for {len(due)}"
        for m in got:
            assert m.store_timestamp >= due[m.uniq_key] - 1, \
                (m.uniq_key, m.store_timestamp, due[m.uniq_key])

        # every undecided transaction checked from the new master and resolved once
        wait_for(lambda: {m.uniq_key for m in pull_all(ns.addr, TX_TOPIC)} >= commit_keys
                 and set(checks) >= set(halves), 40, "the transactions resolved", 0.5)
        time.sleep(3.0)  # a further check round: nothing more may be delivered
        tx = pull_all(ns.addr, TX_TOPIC)
        assert sorted(m.uniq_key for m in tx) == sorted(commit_keys)
        assert all(m.body == halves[m.uniq_key] for m in tx)
        assert b2.proc.poll() is None
    finally:
        if tx_producer is not None:
            tx_producer.shutdown()
        for p in reversed(procs):
            if p.proc.poll() is None:
                p.stop()
