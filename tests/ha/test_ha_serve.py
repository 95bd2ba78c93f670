"""A rocketstore master/slave pair as operators run it: a name server, ``rocketstore serve`` per
side configured by RocketMQ broker.conf keys, real producers and pull consumers, SIGKILL,
SIGSTOP and a TCP proxy the test controls."""
from __future__ import annotations

import hashlib
import os
import signal
import threading
import time

import pytest

from rocketstore.client.consumer import PullConsumer
from rocketstore.client.producer import Producer
from rocketstore.remoting.codes import RequestCode, ResponseCode

from .ha_helpers import (TcpProxy, cq_units, pull_every, read_range, segment_names, wait_for,
                         written_range)
from .procs import SEG, free_port_block, start_broker, start_namesrv

TOPIC = "HaTopic"


@pytest.fixture
def cluster(tmp_path):
    procs = []

    def track(p):
        procs.append(p)
        return p
    ns = track(start_namesrv(str(tmp_path / "ns")))
    yield ns, track, tmp_path
    for p in reversed(procs):
        if p.proc.poll() is None:
            os.kill(p.proc.pid, signal.SIGCONT)
            p.stop()


def _body(i: int) -> bytes:
    return (b"m%06d|" % i) + hashlib.sha256(b"%d" % i).digest() * (1 + i % 40)


def admin_call(ns_addr: str, addr: str, code: int, fields=None):
    with PullConsumer("ha-admin", ns_addr) as c:
        from rocketstore.client._sync import LoopThread  # noqa: F401 - same loop as the facade
        return c._lt.run(c._impl.instance.invoke(addr, code, fields or {}, ok=tuple(range(-1, 300))))


def wait_slave_topic(ns_addr: str, slave_addr: str, topic: str, timeout: float = 20.0) -> None:
    import json
    wait_for(lambda: topic in json.loads(admin_call(ns_addr, slave_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
                                         .body)["topicConfigTable"], timeout,
             "SlaveSynchronize to copy the topic")


def read_all(ns_addr: str, topic: str, queues: int = 4) -> dict[str, bytes]:
    """uniq key -> body of every message a pull consumer finds by the name server's route."""
    return {m.uniq_key: m.body for _, m in pull_every(ns_addr, topic, queues, "ha-reader")}


def test_sync_master_sigkill_loses_nothing_acknowledged_and_failover(cluster):
    ns, track, tmp = cluster
    mport = free_port_block()
    master = track(start_broker(str(tmp / "m"), ns.addr, "SYNC_MASTER", port=mport))
    acked: dict[str, bytes] = {}
    with Producer("ha-pg", ns.addr) as p:
        r = p.send(TOPIC, _body(0))  # the topic exists before the slave's first sync
        assert r.status == "SLAVE_NOT_AVAILABLE"  # stored; no slave yet
        acked[r.msg_id] = _body(0)
    slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE"))
    wait_slave_topic(ns.addr, slave.addr, TOPIC)
    with Producer("ha-pg", ns.addr) as p:
        wait_for(lambda: p.send(TOPIC, b"probe").status == "SEND_OK", 20, "the slave to replicate")
    # refusals of a slave, RocketMQ's codes
    r = admin_call(ns.addr, slave.addr, RequestCode.SEND_MESSAGE_V2,
                   {"a": "g", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0,
                    "i": "", "j": 0, "k": False, "m": False})
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    r = admin_call(ns.addr, slave.addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                   {"topic": "Nope", "defaultTopic": "TBW102", "readQueueNums": 1,
                    "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "slave" in r.remark
    r = admin_call(ns.addr, slave.addr, RequestCode.END_TRANSACTION,
                   {"producerGroup": "g", "tranStateTableOffset": 0, "commitLogOffset": 0,
                    "commitOrRollback": 8, "fromTransactionCheck": False, "msgId": "x"})
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE

    lock = threading.Lock()
    stop = threading.Event()
    counter = iter(range(1, 10**9))

    def load():
        with Producer("ha-pg", ns.addr, retries=0) as p:
            while not stop.is_set():
                with lock:
                    i = next(counter)
                try:
                    res = p.send(TOPIC, _body(i))
                except Exception:  # noqa: BLE001 - the master died under us
                    if stop.is_set():
                        return
                    time.sleep(0.05)
                    continue
                if res.status == "SEND_OK":
                    with lock:
                        acked[res.msg_id] = _body(i)
    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) > 400, 60, "acknowledged sends")
    master.kill()  # SIGKILL mid-load
    stop.set()
    for t in threads:
        t.join(30)
    n_acked = len(acked)
    # the name server dropped the dead master: the route holds only the slave, reads go there
    found = read_all(ns.addr, TOPIC)
    lost = [k for k in acked if found.get(k) != acked[k]]
    assert not lost, f"{len(lost)} of {n_acked} acknowledged messages missing on the slave"

    # manual failover: the slave restarts as the master (brokerId 0) on the same store
    slave.stop()
    new_master = track(start_broker(str(tmp / "s"), ns.addr, "ASYNC_MASTER", port=int(slave.addr.split(":")[1])))
    with Producer("ha-pg", ns.addr) as p:
        for i in range(10**6, 10**6 + 50):
            res = wait_for(lambda: _try_send(p, _body(i)), 30, "sends to the new master")
            acked[res.msg_id] = _body(i)
    found = read_all(ns.addr, TOPIC)
    assert all(found.get(k) == v for k, v in acked.items())
    assert new_master.stop() == 0


def _try_send(p, body):
    try:
        r = p.send(TOPIC, body)
    except Exception:  # noqa: BLE001 - the route still names the old master for a moment
        return None
    return r if r.status == "SEND_OK" else None


def test_slave_stopped_or_cut_gives_timeout_codes_then_catches_up(cluster):
    ns, track, tmp = cluster
    mport = free_port_block()
    proxy = TcpProxy(mport + 1)
    try:
        master = track(start_broker(str(tmp / "m"), ns.addr, "SYNC_MASTER", port=mport))
        slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE",
                                   haMasterAddress=f"127.0.0.1:{proxy.port}"))
        with Producer("ha-pg", ns.addr, retries=0) as p:
            wait_for(lambda: p.send(TOPIC, b"probe").status == "SEND_OK", 30, "replication")
            _stop(slave.proc.pid)
            t0 = time.monotonic()
            r = p.send(TOPIC, b"while stopped")
            took = time.monotonic() - t0
            assert r.status == "FLUSH_SLAVE_TIMEOUT" and 0.9 <= took < 6.0, (r, took)
            os.kill(slave.proc.pid, signal.SIGCONT)
            wait_for(lambda: p.send(TOPIC, b"after SIGCONT").status == "SEND_OK", 10, "SEND_OK again")
            proxy.cut()
            r = wait_for(lambda: (lambda x: x if x.status == "SLAVE_NOT_AVAILABLE" else None)(
                p.send(TOPIC, b"cut")), 10, "SLAVE_NOT_AVAILABLE")
            for i in range(200):
                p.send(TOPIC, _body(i))
            proxy.restore()
            wait_for(lambda: p.send(TOPIC, b"restored").status == "SEND_OK", 30, "catch-up")
        assert master.stop() == 0
        assert slave.stop() == 0
    finally:
        proxy.close()
    m_dir, s_dir = str(tmp / "m" / "store" / "commitlog"), str(tmp / "s" / "store" / "commitlog")
    start, end = written_range(s_dir)
    assert (start, end) == written_range(m_dir)
    assert read_range(s_dir, SEG, start, end) == read_range(m_dir, SEG, start, end)
    assert cq_units(str(tmp / "s" / "store")) == cq_units(str(tmp / "m" / "store"))


def test_slave_sigkill_and_restart_mid_stream_stays_identical(cluster):
    ns, track, tmp = cluster
    master = track(start_broker(str(tmp / "m"), ns.addr, "ASYNC_MASTER"))
    slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE"))
    with Producer("ha-pg", ns.addr) as p:  # the slave holds the first file before the load
        p.send(TOPIC, b"first")
    m_cl, s_cl = str(tmp / "m" / "store" / "commitlog"), str(tmp / "s" / "store" / "commitlog")
    wait_for(lambda: os.path.isdir(s_cl) and written_range(s_cl)[1] >= written_range(m_cl)[1] > 0,
             30, "the slave's first bytes")
    stop = threading.Event()
    sent = [0]

    def load():
        with Producer("ha-pg", ns.addr) as p:
            i = 0
            while not stop.is_set():
                p.send(TOPIC, _body(i))
                i += 1
            sent[0] = i
    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(2.0)
        slave.kill()
        time.sleep(1.0)
        slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE"))
        time.sleep(2.0)
    finally:
        stop.set()
        t.join(30)
    assert sent[0] > 100
    s_store = str(tmp / "s" / "store")
    wait_for(lambda: written_range(os.path.join(s_store, "commitlog"))[1]
             >= written_range(str(tmp / "m" / "store" / "commitlog"))[1], 30, "catch-up")
    time.sleep(0.5)  # the slave's reput
    assert master.stop() == 0 and slave.stop() == 0
    m_dir, s_dir = str(tmp / "m" / "store" / "commitlog"), os.path.join(s_store, "commitlog")
    start, end = written_range(s_dir)
    assert start == 0 and end == written_range(m_dir)[1]
    assert read_range(s_dir, SEG, start, end) == read_range(m_dir, SEG, start, end)
    assert segment_names(s_dir)[0] == "0" * 20
    assert cq_units(s_store) == cq_units(str(tmp / "m" / "store"))


def _stop(pid: int) -> None:
    """SIGSTOP, then wait until every thread of the process is stopped (state T): on a loaded
    machine a thread can still run for a moment after the signal is queued."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                    states.append(fh.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not stop")


def test_operators_see_the_pair(cluster):
    import json
    import subprocess
    import sys
    import urllib.request

    ns, track, tmp = cluster
    master = track(start_broker(str(tmp / "m"), ns.addr, "SYNC_MASTER",
                                args=("--metrics-port", "0", "--console", "0")))
    slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE"))
    with Producer("ha-pg", ns.addr) as p:
        wait_for(lambda: _try_send(p, b"probe"), 30, "replication")
        for i in range(50):
            assert p.send(TOPIC, _body(i)).status == "SEND_OK"

    def status(*target: str) -> dict:
        out = subprocess.run([sys.executable, "-m", "rocketstore.cli", "status",
                              *(target or ("--namesrv", ns.addr)), "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout)
    rows = status()["brokers"]
    assert [(r["name"], r["id"], r["addr"], r["replication"]["role"]) for r in rows] == \
        [("broker-ha", 0, master.addr, "SYNC_MASTER"), ("broker-ha", 1, slave.addr, "SLAVE")]
    m_row, s_row = rows
    slaves = m_row["replication"]["slaves"]
    assert len(slaves) == 1 and slaves[0]["lag_bytes"] == 0 and not slaves[0]["stalled"]
    assert s_row["replication"]["master"]["connected"]
    assert s_row["runtime"]["commitLogMaxOffset"] == m_row["runtime"]["commitLogMaxOffset"]
    text = subprocess.run([sys.executable, "-m", "rocketstore.cli", "status", "--namesrv", ns.addr],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"(brokerId 1)" in text and "lag 0 bytes" in text and "role" in text

    metrics = urllib.request.urlopen(master.ready["metrics"], timeout=10).read().decode()
    assert 'rocketstore_ha_slave_lag_bytes{slave="' in metrics
    assert 'rocketstore_ha_role{role="SYNC_MASTER"} 1.0' in metrics
    page = urllib.request.urlopen(master.ready["console"], timeout=10).read().decode()
    assert 'id="ha-slaves"' in page and "STALLED" not in page

    # the slave stops: its lag shows in bytes and seconds on every view
    _stop(slave.proc.pid)
    try:
        with Producer("ha-pg", ns.addr, retries=0) as p:
            assert p.send(TOPIC, b"x" * 5000).status == "FLUSH_SLAVE_TIMEOUT"
        lagging = status("--broker", master.addr)["brokers"][0]["replication"]["slaves"][0]
        assert lagging["lag_bytes"] > 5000 and lagging["lag_seconds"] >= 0.9
        metrics = urllib.request.urlopen(master.ready["metrics"], timeout=10).read().decode()
        line = next(x for x in metrics.splitlines() if x.startswith("rocketstore_ha_slave_lag_bytes{"))
        assert float(line.rsplit(" ", 1)[1]) > 5000
    finally:
        os.kill(slave.proc.pid, signal.SIGCONT)
    wait_for(lambda: status()["brokers"][0]["replication"]["slaves"][0]["lag_bytes"] == 0, 20,
             "catch-up")


@pytest.mark.parametrize("slave_read", [True, False])
def test_master_suggests_the_slave_to_lagging_readers(cluster, slave_read):
    """suggestWhichBrokerId as RocketMQ's PullMessageProcessor sets it: with slaveReadEnable a
    pull further behind the CommitLog end than accessMessageInMemoryMaxRatio of RAM (0 here:
    any pull that is not at the end) is sent to whichBrokerWhenConsumeSlowly (1); without it,
    always the master (0)."""
    ns, track, tmp = cluster
    master = track(start_broker(str(tmp / "m"), ns.addr, "ASYNC_MASTER",
                                slaveReadEnable=str(slave_read).lower(),
                                accessMessageInMemoryMaxRatio=0))
    with Producer("ha-pg", ns.addr) as p:
        for i in range(5):
            p.send(TOPIC, _body(i), queue_id=0)
    wait_for(lambda: admin_call(ns.addr, master.addr, RequestCode.GET_MAX_OFFSET,
                                {"topic": TOPIC, "queueId": 0}).ext_fields.get("offset") == "5",
             10, "dispatch")
    r = admin_call(ns.addr, master.addr, RequestCode.PULL_MESSAGE,
                   {"consumerGroup": "lagging", "topic": TOPIC, "queueId": 0, "queueOffset": 0,
                    "maxMsgNums": 1, "sysFlag": 2, "commitOffset": 0, "suspendTimeoutMillis": 0,
                    "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
    assert r.code == ResponseCode.SUCCESS
    assert r.ext_fields["suggestWhichBrokerId"] == ("1" if slave_read else "0")


def test_a_topic_created_just_before_the_master_dies_is_served_by_the_slave(cluster):
    """SlaveSynchronize copies the topic table every 10 s; the slave learns a topic from the
    replicated CommitLog itself, so a topic made moments before the master died is served."""
    import json
    ns, track, tmp = cluster
    master = track(start_broker(str(tmp / "m"), ns.addr, "SYNC_MASTER"))
    with Producer("ha-pg", ns.addr) as p:
        p.send(TOPIC, _body(0))  # the pair's first topic, copied by the slave's first sync
    slave = track(start_broker(str(tmp / "s"), ns.addr, "SLAVE"))
    wait_slave_topic(ns.addr, slave.addr, TOPIC)
    with Producer("ha-pg", ns.addr) as p:
        wait_for(lambda: p.send(TOPIC, b"probe").status == "SEND_OK", 20, "the slave to replicate")
        sent = {}
        for i in range(8):  # a topic the slave's last sync did not see; SEND_OK: replicated
            r = p.send("BornLate", _body(i), queue_id=i % 4)
            assert r.status == "SEND_OK", r.status
            sent[r.msg_id] = _body(i)
    master.kill()
    configs = lambda: json.loads(admin_call(ns.addr, slave.addr,  # noqa: E731
                                            RequestCode.GET_ALL_TOPIC_CONFIG).body)
    wait_for(lambda: "BornLate" in configs()["topicConfigTable"], 10, "the slave to learn the topic")
    assert configs()["topicConfigTable"]["BornLate"]["readQueueNums"] == 4
    # failover as operators do it: the slave restarts as the master on its own store
    slave.stop()
    track(start_broker(str(tmp / "s"), ns.addr, "ASYNC_MASTER",
                       port=int(slave.addr.split(":")[1])))
    assert read_all(ns.addr, "BornLate") == sent
