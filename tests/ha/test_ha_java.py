"""Mixed pairs with RocketMQ 4.9.7's own broker (the Java build under ``ROCKETMQ_HOME``; skipped
with a reason without it): a Java slave replicating from ``rocketstore serve``, and a
rocketstore slave replicating from a Java master. Both go through RocketMQ's name server;
the CommitLog bytes and the ConsumeQueue units of the two sides are compared."""
from __future__ import annotations

import json
import os

import pytest

from rocketstore.client.producer import Producer
from rocketstore.remoting.codes import RequestCode

from tests.cluster.java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv

from .ha_helpers import cq_units, read_range, segment_names, wait_for, written_range
from .procs import SEG, start_broker
from .test_ha_serve import TOPIC, _body, admin_call, read_all

JAVA_KEYS = {"brokerClusterName": "HaCluster", "brokerIP2": "127.0.0.1",
             "mappedFileSizeCommitLog": SEG, "mappedFileSizeConsumeQueue": 20000,
             "maxHashSlotNum": 1000, "maxIndexNum": 4000, "slaveTimeout": 1000}


@pytest.fixture
def java_ns(tmp_path):
    home = rocketmq_home()
    ns = start_java_namesrv(home, str(tmp_path / "jns"))
    started = []
    yield home, ns, started
    for p in reversed(started):
        p.stop()
    ns.stop()


def _send_mix(ns_addr: str, n: int, start: int = 0) -> dict[str, bytes]:
    acked = {}
    with Producer("ha-java-pg", ns_addr) as p:
        for i in range(start, start + n):
            body = _body(i) * (1 + (i % 7 == 0) * 20)
            r = p.send(TOPIC, body, keys=[f"k{i}"], tags="even" if i % 2 == 0 else "odd")
            assert r.status == "SEND_OK", r
            acked[r.msg_id] = body
    return acked


def _compare(master_store: str, slave_store: str) -> tuple[int, int]:
    m_dir, s_dir = os.path.join(master_store, "commitlog"), os.path.join(slave_store, "commitlog")
    start, end = written_range(s_dir)
    m_start, m_end = written_range(m_dir)
    assert end == m_end and start >= m_start, ((start, end), (m_start, m_end))
    assert read_range(s_dir, SEG, start, end) == read_range(m_dir, SEG, start, end)
    for name in segment_names(s_dir):  # whole files: blank record and zero tail too
        if int(name) + SEG <= end:
            with open(os.path.join(s_dir, name), "rb") as a, open(os.path.join(m_dir, name), "rb") as b:
                assert a.read() == b.read(), name
    m_cq, s_cq = cq_units(master_store), cq_units(slave_store)
    assert s_cq[(TOPIC, 0)] and {k: v for k, v in s_cq.items() if k[0] == TOPIC} == \
        {k: v for k, v in m_cq.items() if k[0] == TOPIC}
    return start, end


def test_java_slave_replicates_from_rocketstore_master(java_ns, tmp_path):
    home, ns, started = java_ns
    master = start_broker(str(tmp_path / "m"), ns.addr, "SYNC_MASTER")
    try:
        with Producer("ha-java-pg", ns.addr) as p:
            assert p.send(TOPIC, b"first").status == "SLAVE_NOT_AVAILABLE"
        slave = start_java_broker(home, str(tmp_path / "js"), ns.addr, "broker-ha",
                                  extra={**JAVA_KEYS, "brokerId": 1, "brokerRole": "SLAVE"})
        started.append(slave)
        with Producer("ha-java-pg", ns.addr) as p:
            wait_for(lambda: p.send(TOPIC, b"probe").status == "SEND_OK", 60,
                     "the Java slave to acknowledge")
        acked = _send_mix(ns.addr, 1500)
        assert cluster_rows(home, ns.addr) == [("broker-ha", "0", master.addr), ("broker-ha", "1", slave.addr)]
        # the Java slave's SlaveSynchronize read the topic from our fast port (listenPort - 2)
        topics = os.path.join(str(tmp_path / "js"), "store", "config", "topics.json")
        wait_for(lambda: os.path.exists(topics) and TOPIC in open(topics).read(), 30,
                 "the Java slave's topic sync")
        # the master dies: a consumer going by the name server reads everything from the slave
        # (once the name server has dropped the master: until then a pull may still go to it)
        master.kill()

        def from_slave():
            try:
                f = read_all(ns.addr, TOPIC)
            except ConnectionError:
                return None  # routed to the dead master still
            return f if len(f) >= len(acked) else None
        found = wait_for(from_slave, 60, "reads from the Java slave")
        assert all(found.get(k) == v for k, v in acked.items())
    finally:
        master.kill()
    started.remove(slave)
    slave.stop()
    start, end = _compare(str(tmp_path / "m" / "store"), str(tmp_path / "js" / "store"))
    assert start == 0 and end > 3 * SEG  # several files, from the first


def test_rocketstore_slave_replicates_from_java_master(java_ns, tmp_path):
    home, ns, started = java_ns
    jm = start_java_broker(home, str(tmp_path / "jm"), ns.addr, "broker-ha",
                           extra={**JAVA_KEYS, "brokerRole": "SYNC_MASTER"})
    started.append(jm)
    slave = start_broker(str(tmp_path / "s"), ns.addr, "SLAVE")
    try:
        with Producer("ha-java-pg", ns.addr) as p:
            wait_for(lambda: _ok(p), 60, "our slave to acknowledge the Java master")
        acked = _send_mix(ns.addr, 1500)
        wait_for(lambda: TOPIC in json.loads(admin_call(ns.addr, slave.addr,
                                                        RequestCode.GET_ALL_TOPIC_CONFIG).body)
                 ["topicConfigTable"], 30, "SlaveSynchronize from the Java master")
        # RocketMQ's operator tool sees the mixed pair as it sees a Java pair
        assert cluster_rows(home, ns.addr) == [("broker-ha", "0", jm.addr), ("broker-ha", "1", slave.addr)]
        status = mqadmin(home, "brokerStatus", "-n", ns.addr, "-b", slave.addr)
        assert "haRole" in status and "SLAVE" in status and "commitLogMaxOffset" in status
        assert slave.stop() == 0
    finally:
        slave.kill()
    started.remove(jm)
    jm.stop()
    start, end = _compare(str(tmp_path / "jm" / "store"), str(tmp_path / "s" / "store"))
    assert end > 3 * SEG
    assert len(acked) == 1500


def mqadmin(home: str, *args: str) -> str:
    import subprocess
    env = dict(os.environ, TOOLS_HEAP="192m")
    env.pop("ROCKETMQ_HOME", None)
    p = subprocess.run(["timeout", "120", os.path.join(home, "mqadmin"), *args],
                       capture_output=True, text=True, env=env)
    return p.stdout + p.stderr


def cluster_rows(home: str, ns_addr: str) -> list[tuple[str, str, str]]:
    """(broker name, BID, address) rows of ``mqadmin clusterList``."""
    rows = []
    for line in mqadmin(home, "clusterList", "-n", ns_addr).splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[0] == "HaCluster":
            rows.append((parts[1], parts[2], parts[3]))
    return rows


def _ok(p) -> bool:
    try:
        return p.send(TOPIC, b"probe").status == "SEND_OK"
    except Exception:  # noqa: BLE001 - the topic is created by the first sends
        return False
