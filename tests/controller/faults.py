"""A fault loop and its checker for controller-mode groups, as Jepsen tests a database: producers
and a reader run without pause while the test kills, pauses and cuts processes; afterwards the
checker proves, from what clients were told and what the brokers hold,

- every message acknowledged with SEND_OK is readable, exactly once by msgId (the producers do
  not retry: a send whose answer was lost is "maybe", and may be there once or not at all),
- no message was served at a (queue, offset) where the final history has another one (a queue
  never goes backwards under a reader), and
- the replicas' epoch files agree: an epoch two replicas both hold starts at the same offset
  (no two masters wrote one epoch differently).

The group's processes are started by the test (RocketMQ 5.3.3's brokers today); the loop and
the checker only use the name server's route, GET_BROKER_EPOCH_CACHE and signals."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rocketstore.client.consumer import PullConsumer
from rocketstore.client.producer import Producer
from rocketstore.controller.codes import ControllerRequest as Q

from tests.ha.ha_helpers import pull_every


@dataclass
class History:
    acked: dict[str, bytes] = field(default_factory=dict)  # msgId -> body (SEND_OK)
    maybe: int = 0  # sends that failed or timed out: stored or not, nobody was told
    refused: dict[str, int] = field(default_factory=dict)  # non-OK statuses seen, counted
    served: dict[tuple[int, int], str] = field(default_factory=dict)  # (queue, offset) -> msgId
    ack_times: list[float] = field(default_factory=list)


class Load:
    """``senders`` producer threads (retries off) and one reader thread on ``topic``."""

    def __init__(self, namesrv: str, topic: str, senders: int = 2, queues: int = 4) -> None:
        self.ns, self.topic, self.queues = namesrv, topic, queues
        self.h = History()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, args=(i,), daemon=True)
                         for i in range(senders)]
        self._threads.append(threading.Thread(target=self._read, daemon=True))

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> History:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        return self.h

    def acked_count(self) -> int:
        with self._lock:
            return len(self.h.acked)

    def _send(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                with Producer(f"fault-pg-{n}", self.ns, retries=0, timeout_s=5) as p:
                    while not self._stop.is_set():
                        body = f"s{n}-{i}".encode() * 4
                        i += 1
                        try:
                            r = p.send(self.topic, body)
                        except Exception:  # noqa: BLE001 - an unknown outcome
                            with self._lock:
                                self.h.maybe += 1
                            raise
                        time.sleep(0.002)  # a steady load, not a flood the checker must read back
                        with self._lock:
                            if r.status == "SEND_OK":
                                self.h.acked[r.msg_id] = body
                                self.h.ack_times.append(time.monotonic())
                            else:
                                self.h.refused[r.status] = self.h.refused.get(r.status, 0) + 1
            except Exception:  # noqa: BLE001 - no master, a stale route, a dead broker
                time.sleep(0.1)

    def _read(self) -> None:
        nxt = dict.fromkeys(range(self.queues), 0)
        while not self._stop.is_set():
            try:
                with PullConsumer("fault-reader", self.ns) as c:
                    while not self._stop.is_set():
                        got = False
                        for q in range(self.queues):
                            r = c.pull(self.topic, q, nxt[q], 32)
                            if r.status != "FOUND":
                                continue
                            got = True
                            with self._lock:
                                for k, m in enumerate(r.messages):
                                    self.h.served.setdefault((q, m.queue_offset), m.uniq_key)
                            nxt[q] = r.next_begin_offset
                        if not got:
                            time.sleep(0.1)
            except Exception:  # noqa: BLE001
                time.sleep(0.2)


def read_history(namesrv: str, topic: str, queues: int = 4) -> dict[tuple[int, int], str]:
    """(queue, offset) -> msgId of every message the group's master serves now."""
    return {(q, m.queue_offset): m.uniq_key
            for q, m in pull_every(namesrv, topic, queues, "fault-checker")}


def epoch_entries(call, addr: str) -> list[dict]:
    """A replica's epoch file as GET_BROKER_EPOCH_CACHE (1007) answers it."""
    from rocketstore.remoting.fastjson import loads
    r = call(addr, Q.GET_BROKER_EPOCH_CACHE, {})
    assert r.code == 0, r.remark
    return loads(r.body)["epochList"]


def check(h: History, final: dict[tuple[int, int], str], epochs: dict[str, list[dict]]) -> dict:
    """The three properties above; returns counts for the report, raises AssertionError."""
    by_id: dict[str, list[tuple[int, int]]] = {}
    for pos, mid in final.items():
        by_id.setdefault(mid, []).append(pos)
    lost = [m for m in h.acked if m not in by_id]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:3]}"
    dup = {m: p for m, p in by_id.items() if len(p) > 1}
    assert not dup, f"{len(dup)} messages stored more than once, e.g. {list(dup.items())[:3]}"
    backwards = {pos: (mid, final.get(pos)) for pos, mid in h.served.items() if final.get(pos) != mid}
    assert not backwards, (f"{len(backwards)} (queue, offset)s served one message and now hold "
                           f"another (or none), e.g. {list(backwards.items())[:3]}")
    starts: dict[int, dict[str, int]] = {}
    for addr, entries in epochs.items():
        for e in entries:
            starts.setdefault(int(e["epoch"]), {})[addr] = int(e["startOffset"])
    split = {ep: s for ep, s in starts.items() if len(set(s.values())) > 1}
    assert not split, f"replicas disagree where an epoch starts: {split}"
    return {"acked": len(h.acked), "maybe": h.maybe, "refused": dict(h.refused),
            "served_checked": len(h.served), "stored": len(final), "epochs": sorted(starts)}
