"""store/ha between two stores over real sockets on 127.0.0.1 (the broker-level pairs, with
real processes and RocketMQ's own brokers, are in test_ha_serve.py / test_ha_java.py)."""
from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from rocketstore import MessageStore
from rocketstore.format.message import Message
from rocketstore.store.results import PutStatus
from tests.conftest import small_config

from .ha_helpers import TcpProxy, cq_units, read_range, segment_names, wait_for, written_range

SEG = 64 * 1024


def master_cfg(root, **kw):
    base = dict(broker_role="SYNC_MASTER", ha_listen_port=0, ha_send_heartbeat_interval=200,
                slave_timeout=800, mapped_file_size_commitlog=SEG)
    base.update(kw)
    return small_config(root, **base)


def slave_cfg(root, master_ha: str, **kw):
    base = dict(broker_role="SLAVE", ha_master_address=master_ha, ha_send_heartbeat_interval=200,
                mapped_file_size_commitlog=SEG)
    base.update(kw)
    return small_config(root, **base)


def put_many(store, n, *, start=0, topic="HaT", queues=4):
    out = []
    for i in range(start, start + n):
        body = (b"%d|" % i) + os.urandom(i % 900)
        r = store.put_message(Message(topic=topic, body=body, queue_id=i % queues,
                                      properties={"KEYS": f"k{i}"}))
        out.append(r)
    return out


def assert_same_bytes(master_root, slave_root):
    """The slave holds the master's bytes over the slave's whole range, and the same CQ units."""
    mdir, sdir = os.path.join(master_root, "commitlog"), os.path.join(slave_root, "commitlog")
    m_start, m_end = written_range(mdir)
    s_start, s_end = written_range(sdir)
    assert s_end == m_end, (s_end, m_end)
    assert s_start >= m_start
    assert read_range(sdir, SEG, s_start, s_end) == read_range(mdir, SEG, s_start, s_end)
    for name in segment_names(sdir):  # whole segments, blank record and zero tail included
        if int(name) + SEG <= s_end:
            assert open(os.path.join(sdir, name), "rb").read() == open(os.path.join(mdir, name), "rb").read()
    return s_start, s_end


def test_sync_pair_replicates_bytes_and_queues(tmp_path):
    m = MessageStore(master_cfg(tmp_path / "m"))
    s = None
    try:
        r = m.put_message(Message(topic="HaT", body=b"before any slave"))
        assert r.status is PutStatus.SLAVE_NOT_AVAILABLE  # stored, but no slave in reach
        s = MessageStore(slave_cfg(tmp_path / "s", f"127.0.0.1:{m.ha.port}"))
        wait_for(lambda: m.ha.connection_count, 5, "the slave to connect")
        results = put_many(m, 1500)
        assert [r.status for r in results] == [PutStatus.PUT_OK] * 1500
        # the acknowledgement came from the slave: it holds every acknowledged byte
        assert s.get_max_phy_offset() >= results[-1].wrote_offset + results[-1].wrote_bytes
        refused = s.put_message(Message(topic="HaT", body=b"x"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert s.wait_dispatched(10)
        st = m.ha_status()
        assert st["slaves"][0]["lag_bytes"] == 0 and not st["slaves"][0]["stalled"]
        assert s.ha_status()["master"]["connected"]
        # the slave's own reput built its queues and index
        got = s.query_message("HaT", "k777")
        assert [x.body.split(b"|")[0] for x in got.messages] == [b"777"]
    finally:
        if s is not None:
            s.close()
        m.close()
    assert_same_bytes(str(tmp_path / "m"), str(tmp_path / "s"))
    mq, sq = cq_units(str(tmp_path / "m")), cq_units(str(tmp_path / "s"))
    assert sq == mq and sum(len(v) for v in mq.values()) == 20 * 1501


def test_empty_slave_starts_at_masters_last_file_unless_full_catch_up(tmp_path):
    m = MessageStore(master_cfg(tmp_path / "m", broker_role="ASYNC_MASTER"))
    try:
        put_many(m, 600)
        top = m.get_max_phy_offset()
        assert top > 3 * SEG
        late = MessageStore(slave_cfg(tmp_path / "late", f"127.0.0.1:{m.ha.port}"))
        try:
            wait_for(lambda: late.get_max_phy_offset() == top, 10, "the late slave to catch up")
            assert late.get_min_phy_offset() == top - top % SEG  # RocketMQ's start
        finally:
            late.close()
    finally:
        m.close()
    assert_same_bytes(str(tmp_path / "m"), str(tmp_path / "late"))
    m = MessageStore(master_cfg(tmp_path / "m", broker_role="ASYNC_MASTER", ha_full_catch_up=True))
    try:
        full = MessageStore(slave_cfg(tmp_path / "full", f"127.0.0.1:{m.ha.port}"))
        try:
            wait_for(lambda: full.get_max_phy_offset() == top, 10, "the full catch-up")
            assert full.get_min_phy_offset() == 0
            assert full.wait_dispatched(10)
            assert full.get_max_offset_in_queue("HaT", 0) == 150
        finally:
            full.close()
    finally:
        m.close()
    assert_same_bytes(str(tmp_path / "m"), str(tmp_path / "full")) == (0, top)


def test_cut_connection_gives_timeout_codes_then_catches_up(tmp_path):
    m = MessageStore(master_cfg(tmp_path / "m", slave_timeout=500))
    proxy = TcpProxy(0)
    try:
        proxy.target = ("127.0.0.1", m.ha.port)
        s = MessageStore(slave_cfg(tmp_path / "s", f"127.0.0.1:{proxy.port}"))
        try:
            wait_for(lambda: m.ha.connection_count, 5, "the slave to connect")
            assert all(r.status is PutStatus.PUT_OK for r in put_many(m, 50))
            proxy.paused.set()  # connection up, nothing flows: the wait runs out
            t0 = time.monotonic()
            r = put_many(m, 1, start=50)[0]
            took = time.monotonic() - t0
            assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT and 0.45 <= took < 4.0, (r, took)
            proxy.cut()  # connection gone: no slave in reach, answered at once
            proxy.paused.clear()
            wait_for(lambda: m.ha.connection_count == 0, 5, "the master to see the cut")
            t0 = time.monotonic()
            r = put_many(m, 1, start=51)[0]
            assert r.status is PutStatus.SLAVE_NOT_AVAILABLE and time.monotonic() - t0 < 1.0
            put_many(m, 200, start=52)
            proxy.restore()
            wait_for(lambda: s.get_max_phy_offset() == m.get_max_phy_offset(), 10, "catch-up")
            assert put_many(m, 1, start=252)[0].status is PutStatus.PUT_OK
            assert s.wait_dispatched(10)
        finally:
            s.close()
    finally:
        proxy.close()
        m.close()
    assert_same_bytes(str(tmp_path / "m"), str(tmp_path / "s"))
    assert cq_units(str(tmp_path / "s")) == cq_units(str(tmp_path / "m"))


def test_bad_bytes_on_the_ha_port_harm_neither_side(tmp_path):
    m = MessageStore(master_cfg(tmp_path / "m", broker_role="ASYNC_MASTER"))
    try:
        put_many(m, 100)
        for junk in (b"\xff" * 8, b"GET / HTTP/1.1\r\n\r\n", struct.pack(">q", 1 << 60) * 3, b"\x00" * 3):
            with socket.create_connection(("127.0.0.1", m.ha.port)) as c:
                c.sendall(junk)
                time.sleep(0.1)
        # a fake master sending frames that are not frames, then one at a wrong offset
        fake = socket.socket()
        fake.bind(("127.0.0.1", 0))
        fake.listen(4)
        s = MessageStore(slave_cfg(tmp_path / "s", f"127.0.0.1:{fake.getsockname()[1]}"))
        try:
            for frame in (struct.pack(">qi", 0, -5), struct.pack(">qi", -1, 10), b"\x01" * 40):
                conn, _ = fake.accept()
                assert len(conn.recv(8)) == 8
                conn.sendall(frame)
                conn.close()
            assert s.get_max_phy_offset() == 0
            s.ha.client.set_master_address(f"127.0.0.1:{m.ha.port}")  # the next connect
            wait_for(lambda: s.get_max_phy_offset() == m.get_max_phy_offset(), 15, "the real master")
            assert put_many(m, 10, start=100)[-1].ok  # the master still serves
            wait_for(lambda: s.get_max_phy_offset() == m.get_max_phy_offset(), 15, "catch-up")
        finally:
            fake.close()
            s.close()
    finally:
        m.close()
    assert_same_bytes(str(tmp_path / "m"), str(tmp_path / "s"))


def test_slave_behind_the_masters_oldest_file_is_flagged(tmp_path):
    m = MessageStore(master_cfg(tmp_path / "m", broker_role="ASYNC_MASTER"))
    try:
        put_many(m, 100)
        s = MessageStore(slave_cfg(tmp_path / "s", f"127.0.0.1:{m.ha.port}"))
        wait_for(lambda: s.get_max_phy_offset() == m.get_max_phy_offset(), 10, "catch-up")
        s.close()
        put_many(m, 800, start=100)
        m.commitlog.queue.delete_first_files(3)  # as the clean service does with old files
        assert m.get_min_phy_offset() > os.path.getsize(next(
            os.path.join(tmp_path / "s" / "commitlog", n) for n in segment_names(str(tmp_path / "s" / "commitlog"))))
        s = MessageStore(slave_cfg(tmp_path / "s", f"127.0.0.1:{m.ha.port}",
                                   ha_send_heartbeat_interval=100))
        try:
            before = s.get_max_phy_offset()
            st = wait_for(lambda: (lambda x: x if x["slaves"] and x["slaves"][0]["stalled"] else None)(
                m.ha_status()), 15, "the stalled flag")
            assert st["slaves"][0]["behind_oldest_file"] and st["slaves"][0]["lag_bytes"] > 0
            assert s.get_max_phy_offset() == before  # nothing appended out of place
            assert put_many(m, 1, start=900)[0].ok
        finally:
            s.close()
    finally:
        m.close()
