"""The multi-process broker (``serve --workers N``, broker.conf ``serverWorkerProcesses``): N
broker processes, N - 1 workers owning the client sockets and encoding plain sends, one writer
owning the store (``--workers 3`` below: two workers).

Every test runs real ``rocketstore serve`` processes and real clients on 127.0.0.1. What the
workers wrote is checked against the store's files, decoded independently of the put path, and
against a one-process broker given the same sends.
"""
from __future__ import annotations

import glob
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from rocketstore.client import Producer, PullConsumer
from rocketstore.format.message import BLANK, decode_message

from .conftest import free_port, metric, start_server, wait_max_offset


def _serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "serve", "--store",
                           str(tmp_path / "store"), "--host", "127.0.0.1", "--port", "0", *args],
                          capture_output=True, text=True, timeout=60)


def workers_of(pid: int) -> list[int]:
    out: list[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return sorted(out)


def wait_for(pred, timeout: float = 20.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def store_records(store: str) -> list:
    """Every message record of a stopped store's CommitLog, decoded from the files."""
    out = []
    for path in sorted(glob.glob(os.path.join(store, "commitlog", "*"))):
        with open(path, "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 8 <= len(buf):
            size, magic = struct.unpack_from(">ii", buf, pos)
            if size == 0 and magic == 0:
                break
            m = decode_message(buf, pos, check_crc=True)
            if m is BLANK:
                break
            out.append(m)
            pos += m.store_size
    return out


def test_bad_worker_counts_are_refused_before_any_file(tmp_path):
    for value in ("0", "257"):
        r = _serve(tmp_path, "--workers", value)
        assert r.returncode == 2, r.stderr
        assert f"--workers: {value} worker processes: use 1 (one process) to 256" in r.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text("serverWorkerProcesses=many\n")
    r = _serve(tmp_path, "--config", str(conf))
    assert r.returncode == 2 and "'many' is not a number" in r.stderr
    assert not os.path.exists(tmp_path / "store" / "commitlog")


def test_default_is_one_worker_per_core_and_one_means_one_process(tmp_path):
    srv = start_server(str(tmp_path / "a"))
    try:
        cores = os.cpu_count() or 1
        expected = cores - 1  # one process per core: the writer and cores - 1 workers
        assert len(wait_for(lambda: len(workers_of(srv.proc.pid)) == expected
                            and workers_of(srv.proc.pid)) or []) == expected
        with Producer("PG", srv.namesrv) as p:
            assert p.send("DefaultWorkers", b"x").status == "SEND_OK"
    finally:
        assert srv.stop() == 0, srv.log()
    srv = start_server(str(tmp_path / "b"), "--workers", "1")
    try:
        with Producer("PG", srv.namesrv) as p:
            assert p.send("OneWorker", b"one").status == "SEND_OK"
        assert workers_of(srv.proc.pid) == []
    finally:
        assert srv.stop() == 0, srv.log()


def _send_mix(namesrv: str, topic: str, n: int, producers: int = 3) -> list:
    """Sends from several connections (spread over the workers): plain sends with tags, keys
    and properties, a delayed one and a batch (both handled whole by the writer)."""
    results = []
    ps = [Producer(f"PG{i}", namesrv) for i in range(producers)]
    try:
        for i in range(n):
            r = ps[i % producers].send(topic, b"body-%d" % i, tags=f"T{i % 3}",
                                       keys=[f"k{i}", "shared"], properties={"n": str(i)},
                                       queue_id=i % 4)
            results.append(r)
        results.append(ps[0].send(topic, b"delayed", delay_level=1, queue_id=0))
        results.append(ps[1].send_batch(topic, [b"batch-0", b"batch-1"], queue_id=1))
    finally:
        for p in ps:
            p.shutdown()
    return results


def test_sends_and_pulls_through_two_workers(tmp_path):
    srv = start_server(str(tmp_path / "store"), "--workers", "3",
                       "--message-delay-level", "1s 2s")
    try:
        assert len(wait_for(lambda: len(workers_of(srv.proc.pid)) == 2
                            and workers_of(srv.proc.pid))) == 2
        results = _send_mix(srv.namesrv, "WTopic", 40)
        assert all(r.status == "SEND_OK" for r in results)
        per_queue: dict[int, list[int]] = {}
        for r in results[:40]:
            per_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
        assert {q: sorted(v) for q, v in per_queue.items()} == {q: list(range(10)) for q in range(4)}
        with PullConsumer("CG_w", srv.namesrv) as c:
            got = {}
            for q in range(4):
                wait_max_offset(c, "WTopic", q, 10 + (1 if q == 1 else 0) * 2)
                r = c.pull("WTopic", q, 0, 32)
                for m in r.messages:
                    got[m.body] = m
            assert wait_max_offset(c, "WTopic", 0, 11, timeout_s=20) == 11  # the delayed one
            m0 = c.pull("WTopic", 0, 10, 32).messages
        for i in range(40):
            m = got[b"body-%d" % i]
            assert (m.topic, m.queue_id, m.tags) == ("WTopic", i % 4, f"T{i % 3}")
            assert m.keys == [f"k{i}", "shared"] and m.properties["n"] == str(i)
            assert m.properties["CLUSTER"] == "DefaultCluster"
            assert m.properties["UNIQ_KEY"] == results[i].msg_id  # the client's id, kept
            assert m.born_host.startswith("127.0.0.1:")
        assert {b"batch-0", b"batch-1"} <= set(got)
        assert [m.body for m in m0] == [b"delayed"]
        # the index the writer's dispatch built from the worker-encoded records
        q = subprocess.run([sys.executable, "-m", "rocketstore.cli", "query", "--namesrv",
                            srv.namesrv, "--topic", "WTopic", "--key", "k7"],
                           capture_output=True, text=True, timeout=60)
        assert q.returncode == 0 and "body-7" in q.stdout, q.stdout + q.stderr
    finally:
        assert srv.stop() == 0, srv.log()


def test_refusals_are_the_one_process_answers(tmp_path):
    """A send the fast path cannot take is handled whole by the writer: same code and remark."""
    conf = tmp_path / "broker.conf"
    conf.write_text("autoCreateTopicEnable=false\n")
    answers = []
    for workers in ("1", "3"):
        srv = start_server(str(tmp_path / f"s{workers}"), "--workers", workers, "--config",
                           str(conf))
        try:
            from rocketstore.client.admin import AdminClient
            with AdminClient(srv.namesrv) as admin:
                admin.create_topic("Exists", read_queue_nums=2, write_queue_nums=2)
            with Producer("PG", srv.namesrv) as p:
                ok = p.send("Exists", b"fine", queue_id=1)
                assert ok.status == "SEND_OK" and ok.queue_offset == 0
                row = []
                for topic, qid in (("Missing", 0), ("Exists", 5)):
                    try:
                        p.send(topic, b"no", queue_id=qid)
                        row.append("sent")
                    except Exception as exc:  # the broker's refusal, as the client raises it
                        row.append(str(exc))
                answers.append(row)
        finally:
            assert srv.stop() == 0, srv.log()
    assert answers[0] == answers[1], answers
    assert "sent" not in answers[0]


def _fields(m) -> tuple:
    props = {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
    return (m.topic, m.queue_id, m.queue_offset, m.flag, m.sys_flag, m.body, m.body_crc,
            sorted(props.items()), m.reconsume_times, m.store_host, m.born_host.split(":")[0])


def test_worker_records_equal_one_process_records(tmp_path):
    """The same sends through the send processor (one process, serverFastSends=false), the fast
    path of a one-process broker (--workers 1) and two worker processes (--workers 3): the
    CommitLog records agree in every field but the times, the client's port and the generated
    UNIQ_KEY."""
    slow = tmp_path / "slow.conf"
    slow.write_text("serverFastSends=false\n")
    stores = []
    for name, workers, extra in (("processor", "1", ["--config", str(slow)]), ("local", "1", []),
                                 ("workers", "3", [])):
        store = str(tmp_path / name)
        port = free_port()
        srv = start_server(store, "--workers", workers, "--port", str(port),
                           "-o", "store_host=127.0.0.1:10911", *extra)
        try:
            with Producer("PG", srv.namesrv) as p:
                for i in range(30):
                    p.send("Same", bytes([i]) * (i * 37), tags=f"t{i % 2}", keys=[f"key{i}"],
                           properties={"a": "x" * i}, queue_id=i % 3)
        finally:
            assert srv.stop() == 0, srv.log()
        stores.append(store)
    processor, local, workers = (store_records(s) for s in stores)
    assert len(processor) == len(local) == len(workers) == 30
    assert [_fields(m) for m in local] == [_fields(m) for m in processor]
    assert [_fields(m) for m in workers] == [_fields(m) for m in processor]


# -- processes dying ---------------------------------------------------------------------------
class Load:
    """Producer threads sending unique bodies; what was acknowledged."""

    def __init__(self, namesrv: str, topic: str, threads: int = 4) -> None:
        self.acked: set[bytes] = set()
        self.errors = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(namesrv, topic, i), daemon=True)
                        for i in range(threads)]

    def _run(self, namesrv: str, topic: str, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                with Producer(f"PGL{i}", namesrv, timeout_s=3.0) as p:
                    while not self.stop.is_set():
                        body = b"t%d-%d" % (i, n)
                        n += 1
                        if p.send(topic, body).status == "SEND_OK":
                            with self.lock:
                                self.acked.add(body)
            except Exception:
                with self.lock:
                    self.errors += 1
                time.sleep(0.05)

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def test_sigkill_of_a_worker_loses_only_its_connections(tmp_path):
    store = str(tmp_path / "store")
    mport = free_port()
    srv = start_server(store, "--workers", "3", "--metrics-port", str(mport))
    try:
        assert metric(mport, "rocketstore_worker_processes") == 2
        assert metric(mport, "rocketstore_worker_restarts_total") == 0
        before = wait_for(lambda: len(workers_of(srv.proc.pid)) == 2 and workers_of(srv.proc.pid))
        with Load(srv.namesrv, "KillW") as load:
            assert wait_for(lambda: load.count() > 200, timeout=30)
            os.kill(before[0], signal.SIGKILL)
            after = wait_for(lambda: (lambda w: len(w) == 2 and before[0] not in w and w)(
                workers_of(srv.proc.pid)), timeout=20)
            assert after and before[0] not in after, "the killed worker was not restarted"
            n = load.count()
            assert wait_for(lambda: load.count() > n + 200, timeout=30), "sends did not resume"
        acked = set(load.acked)
        assert srv.proc.poll() is None
        assert "restarting it" in srv.log()
        assert metric(mport, "rocketstore_worker_restarts_total") == 1
        assert metric(mport, "rocketstore_worker_processes") == 2
    finally:
        assert srv.stop() == 0, srv.log()
    stored = [m.body for m in store_records(store)]
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged messages lost"


def test_sigkill_of_the_writer_stops_the_workers_and_recovers(tmp_path):
    store = str(tmp_path / "store")
    port = free_port()
    srv = start_server(store, "--workers", "3", "--port", str(port))
    try:
        kids = wait_for(lambda: len(workers_of(srv.proc.pid)) == 2 and workers_of(srv.proc.pid))
        with Load(srv.namesrv, "KillWriter") as load:
            assert wait_for(lambda: load.count() > 200, timeout=30)
            srv.proc.send_signal(signal.SIGKILL)
            srv.proc.wait(10)
            time.sleep(0.3)
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
    acked = set(load.acked)
    # the workers see their link end and exit: nothing keeps the port or the clients
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{k}") and
                                    _state(k) not in ("Z", "X") for k in kids), timeout=15)
    with socket.socket() as s:  # the port is free again for the restarted broker
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
    srv2 = start_server(store, "--workers", "3", "--port", str(port))
    try:
        with Producer("PG", srv2.namesrv) as p:
            assert p.send("KillWriter", b"after").status == "SEND_OK"
    finally:
        assert srv2.stop() == 0, srv2.log()
    stored = [m.body for m in store_records(store)]
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged messages lost"
    assert b"after" in stored


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


# -- what a worker closes itself ---------------------------------------------------------------
def test_bad_and_stalled_frames_close_only_that_connection(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("serverFrameReadTimeoutSeconds=1\nserverChannelMaxIdleTimeSeconds=2\n")
    srv = start_server(str(tmp_path / "store"), "--workers", "3", "--config", str(conf))
    host, port = srv.broker.rsplit(":", 1)
    try:
        with Producer("PG", srv.namesrv) as p:
            garbage = socket.create_connection((host, int(port)))
            garbage.sendall(struct.pack(">i", -5) + b"junk")
            garbage.settimeout(5)
            assert garbage.recv(100) == b""  # closed at once
            half = socket.create_connection((host, int(port)))
            half.sendall(struct.pack(">ii", 100, 10) + b"{")  # a frame that never ends
            half.settimeout(10)
            t0 = time.monotonic()
            assert half.recv(100) == b""
            assert 0.5 < time.monotonic() - t0 < 8
            idle = socket.create_connection((host, int(port)))
            idle.settimeout(15)
            t0 = time.monotonic()
            assert idle.recv(100) == b""  # the writer's idle sweep, through the worker
            assert 1.5 < time.monotonic() - t0 < 12
            assert p.send("StillServing", b"ok").status == "SEND_OK"
            for s in (garbage, half, idle):
                s.close()
    finally:
        assert srv.stop() == 0, srv.log()



def test_sync_flush_through_workers(tmp_path):
    """SYNC_FLUSH: a worker's send is answered after the group commit that covers it."""
    store = str(tmp_path / "store")
    srv = start_server(store, "--workers", "3", "-o", "flush_disk_type=SYNC_FLUSH")
    try:
        with Load(srv.namesrv, "SyncW", threads=6) as load:
            assert wait_for(lambda: load.count() > 300, timeout=40)
        assert load.errors == 0
        acked = set(load.acked)
    finally:
        assert srv.stop() == 0, srv.log()
    assert acked <= {m.body for m in store_records(store)}


# -- with RocketMQ's Java producer --------------------------------------------------------------
def _java_home() -> str:
    from tests import referee
    return referee.home(referee.V4)


def _java_producer(tmp_path, namesrv: str, topic: str, seconds: int):
    home = _java_home()
    classes = tmp_path / "classes"
    src = os.path.join(os.path.dirname(__file__), "java", "AckedProducer.java")
    subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes), src],
                   check=True, capture_output=True)
    env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="256m", HOME=str(tmp_path))
    out = open(tmp_path / "java.out", "w")
    proc = subprocess.Popen([os.path.join(home, "java-run"), "AckedProducer", namesrv, topic,
                             "8", str(seconds)], stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, tmp_path / "java.out"


def _acks(path) -> set[bytes]:
    acked = set()
    for line in open(path, encoding="utf-8", errors="replace"):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK" and parts[2] == "SEND_OK":
            acked.add(parts[1].encode())
    return acked


@pytest.mark.parametrize("victim", ["worker", "writer"])
def test_java_producer_kill_points(tmp_path, victim):
    """RocketMQ's own producer (8 threads, one connection) while a worker or the writer is
    SIGKILLed: every message it saw acknowledged is in the CommitLog afterwards."""
    _java_home()  # skips before anything starts
    store = str(tmp_path / "store")
    port, ns_port = free_port(), free_port()
    args = ("--workers", "3", "--port", str(port))
    srv = start_server(store, *args, namesrv_port=ns_port)
    srv2 = proc = None
    try:
        proc, out = _java_producer(tmp_path, srv.namesrv, "JavaKill", 25)
        assert wait_for(lambda: len(_acks(out)) > 300, timeout=90), open(out).read()[-2000:]
        if victim == "worker":
            for pid in workers_of(srv.proc.pid):
                os.kill(pid, signal.SIGKILL)  # whichever holds the client's connection
        else:
            srv.proc.send_signal(signal.SIGKILL)
            srv.proc.wait(10)
            time.sleep(1)
            srv2 = start_server(store, *args, namesrv_port=ns_port)
        n = len(_acks(out))
        assert wait_for(lambda: len(_acks(out)) > n + 300, timeout=60), \
            "the Java producer did not get answers again: " + open(out).read()[-2000:]
        proc.wait(60)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        codes = [s.stop() for s in (srv, srv2) if s is not None and s.proc.poll() is None]
    assert codes == [0] * len(codes), srv.log()
    acked = _acks(out)
    stored = {m.body for m in store_records(store)}
    assert acked <= stored, f"{len(acked - stored)} acknowledged messages lost"
