"""Timer messages through ``rocketstore serve`` with real clients of both protocols: our 4.x
remoting producer (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS``) and PyPI
``rocketmq-python-client`` 5.x (gRPC ``delivery_timestamp``, whole seconds in that client).

Each schedules at +2 s, +65 s (rolled over several times: the window is 10 s here), a time
already past, and the roll window's edge; each arrives within 1 s of its time and never early.
A SIGKILLed broker delivers, at once on restart, what came due while it was down; a cancel
(``TIMER_DEL_UNIQKEY``) keeps a message from being delivered; ``timerMaxDelaySec`` is answered
as RocketMQ answers it.
"""
from __future__ import annotations

import signal
import threading
import time

import pytest

from rocketstore.client import Producer, PullConsumer
from rocketstore.errors import BrokerError

from ..broker.conftest import start_server
from .conftest import client_python, make_topics, run_script, write_conf

pytestmark = pytest.mark.interop
WINDOW_S = 10  # timerRollWindowSlot=100 at timerPrecisionMs=100


def _conf(tmp_path, **extra) -> str:
    keys = dict(timerPrecisionMs=100, timerRollWindowSlot=100, timerMaxDelaySec=3600,
                timerFlushIntervalMs=200, mappedFileSizeTimerLog=52 * 400)
    keys.update(extra)
    return write_conf(tmp_path / "broker.conf", **keys)


class Arrivals:
    """A 4.x pull consumer long-polling every queue of a topic; notes when each message came."""

    def __init__(self, namesrv: str, topic: str, queues: int) -> None:
        self.seen: list[tuple[object, int]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(namesrv, topic, q), daemon=True)
                         for q in range(queues)]
        for t in self._threads:
            t.start()

    def _run(self, namesrv: str, topic: str, q: int) -> None:
        c = PullConsumer(f"CG_timer_{q}", namesrv)
        offset = 0
        try:
            while not self._stop.is_set():
                try:
                    r = c.pull(topic, q, offset, 32, suspend_ms=1000)
                except Exception:
                    time.sleep(0.1)
                    continue
                now = int(time.time() * 1000)
                for m in r.messages or []:
                    self.seen.append((m, now))
                offset = r.next_begin_offset if r.next_begin_offset > offset else offset
        finally:
            c.shutdown()

    def wait(self, n: int, timeout_s: float) -> list:
        end = time.monotonic() + timeout_s
        while len(self.seen) < n and time.monotonic() < end:
            time.sleep(0.05)
        return list(self.seen)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)


def _check_on_time(arrived, due_of) -> None:
    """Never early; the broker delivers (re-puts) within 1 s of the time, and the long-polling
    consumer has it within 1 s more on this shared, loaded test machine."""
    for m, at in arrived:
        due = due_of(m)
        assert m.store_timestamp >= due, (m.body, "early by", due - m.store_timestamp)
        assert m.store_timestamp - due <= 1000, (m.body, "delivered late by", m.store_timestamp - due)
        assert at - due <= 2000, (m.body, "arrived late by", at - due)


@pytest.mark.timeout(240)
def test_both_clients_schedule_and_get_each_message_on_time(tmp_path):
    py = client_python()
    store = str(tmp_path / "store")
    make_topics(store, {"TimerR": 2, "TimerG": 2})
    srv = start_server(store, "--grpc-port", "0", "--config", _conf(tmp_path))
    arrivals = Arrivals(srv.namesrv, "TimerR", 2)
    try:
        t0 = int(time.time() * 1000)
        due = {b"r-plus2": t0 + 2000, b"r-plus65": t0 + 65_000, b"r-past": t0 - 3000,
               b"r-edge": t0 + WINDOW_S * 1000}
        acked = {}
        with Producer("PG_timer", srv.namesrv) as p:
            for body, at in due.items():
                r = p.send("TimerR", body, properties={"TIMER_DELIVER_MS": str(at)})
                assert r.status == "SEND_OK", body
                acked[body] = int(time.time() * 1000)
            sent = int(time.time() * 1000)
            assert p.send("TimerR", b"r-sec", properties={"TIMER_DELAY_SEC": "3"}).status == "SEND_OK"
            assert p.send("TimerR", b"r-ms", properties={"TIMER_DELAY_MS": "2500"}).status == "SEND_OK"
            due[b"r-sec"] = sent + 3000
            due[b"r-ms"] = sent + 2500
            with pytest.raises(BrokerError) as exc:  # beyond timerMaxDelaySec: RocketMQ's answer
                p.send("TimerR", b"too-far", properties={"TIMER_DELAY_SEC": "3601"})
            assert exc.value.code == 13 and "max delay 3600000ms" in (exc.value.remark or "")
        # the 5.x client, in its own process: +2 s, +65 s, past, the edge; then a SimpleConsumer
        grpc_sent, grpc_got = run_script(
            py, tmp_path,
            ("delays", srv.grpc, "TimerG", "2,65,-3,%d,!3700" % WINDOW_S),
            ("receive", srv.grpc, "TimerG", "G_timer", 4, 30, "ack", 45), timeout=200)
        got = arrivals.wait(len(due), 80)
        assert sorted(m.body for m, _ in got) == sorted(due)
        _check_on_time([(m, at) for m, at in got if m.body != b"r-past"], lambda m: due[m.body])
        past = next(at for m, at in got if m.body == b"r-past")
        # a past time: at once (counted from its acknowledgement: the producer's first route
        # lookup and connection come before it and take their own time on a loaded machine)
        assert past - acked[b"r-past"] < 1000
        rolled = next(m for m, _ in got if m.body == b"r-plus65")
        assert int(rolled.properties["TIMER_ROLL_TIMES"]) >= 5
        assert {"TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_OUT_MS"} <= set(rolled.properties)

        refused = [s for s in grpc_sent if "refused" in s]
        grpc_sent = [s for s in grpc_sent if "refused" not in s]
        # beyond timerMaxDelaySec: the broker's WHEEL_TIMER_MSG_ILLEGAL as ILLEGAL_DELIVERY_TIME
        assert len(refused) == 1 and refused[0]["refused"], refused
        assert "BadRequestException" in refused[0]["refused"], refused  # a 400xx code
        assert "max delay 3600000ms" in refused[0]["refused"], refused
        assert sorted(g["message_id"] for g in grpc_got) == sorted(s["message_id"] for s in grpc_sent)
        for g in grpc_got:
            s = next(s for s in grpc_sent if s["message_id"] == g["message_id"])
            if s["deliver_ms"] <= s["sent_ms"]:
                assert g["received_ms"] - s["sent_ms"] < 1500  # past: at once
                continue
            assert g["received_ms"] >= s["deliver_ms"], s
            assert g["received_ms"] - s["deliver_ms"] <= 1000, (s, g["received_ms"])
    finally:
        arrivals.stop()
        assert srv.stop() == 0, srv.log()[-3000:]


@pytest.mark.timeout(120)
def test_killed_broker_delivers_what_came_due_and_cancel_works(tmp_path):
    store = str(tmp_path / "store")
    make_topics(store, {"TimerK": 1})
    conf = _conf(tmp_path)
    srv = start_server(store, "--config", conf)
    try:
        t0 = int(time.time() * 1000)
        due = {}
        with Producer("PG_timer", srv.namesrv) as p:
            for i in range(10):
                at = t0 + 2000 + 100 * i
                assert p.send("TimerK", b"k%d" % i, properties={"TIMER_DELIVER_MS": str(at)}).status == "SEND_OK"
                due[b"k%d" % i] = at
            at = t0 + 10_000  # after the restart (however slow the start): on time
            assert p.send("TimerK", b"late", properties={"TIMER_DELIVER_MS": str(at)}).status == "SEND_OK"
            due[b"late"] = at
            victim = p.send("TimerK", b"cancelled", properties={"TIMER_DELIVER_MS": str(t0 + 2500)})
            cancel = p.send("TimerK", b"cancel", properties={
                "TIMER_DELIVER_MS": str(t0 + 2500), "TIMER_DEL_UNIQKEY": f"TimerK+{victim.msg_id}"})
            assert victim.status == cancel.status == "SEND_OK"
        time.sleep(0.5)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
    except BaseException:
        srv.proc.kill()
        raise
    time.sleep(max(0.0, (t0 + 3500 - time.time() * 1000) / 1000))  # all but "late" came due
    srv = start_server(store, "--config", conf)
    restarted = int(time.time() * 1000)
    arrivals = Arrivals(srv.namesrv, "TimerK", 1)
    try:
        assert restarted < due[b"late"] - 500, "the broker took too long to start again"
        got = arrivals.wait(len(due), 15)
        time.sleep(1.0)  # anything extra (a duplicate, the cancelled one) would show up by now
        got = list(arrivals.seen)
        assert sorted(m.body for m, _ in got) == sorted(due)  # once each; the cancelled never
        for m, at in got:
            assert m.store_timestamp >= due[m.body]
            if m.body != b"late":  # re-put at once by the restarted broker
                assert m.store_timestamp - restarted < 1000, (m.body, m.store_timestamp - restarted)
        _check_on_time([(m, at) for m, at in got if m.body == b"late"], lambda m: due[m.body])
    finally:
        arrivals.stop()
        assert srv.stop() == 0, srv.log()[-3000:]
