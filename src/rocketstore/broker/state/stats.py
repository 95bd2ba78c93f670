"""``BrokerStats``: message counters and rates the admin views report (RocketMQ's ``BrokerStats``
and the TPS part of ``BrokerStatsManager``).

Theory of operation: the send and pull handlers call ``record_put``/``record_get`` with counts;
each counter keeps a running total and a ring of one-second buckets, so a rate over the last
10 s, 60 s or 600 s is a sum over buckets (RocketMQ's ``putTps`` string is "10s 60s 600s").
"Today morning" / "yesterday morning" totals are snapshots taken when the local date changes,
as RocketMQ's ``BrokerStats.record()`` does at midnight. Thread-safe; cheap enough for every
request (one lock, a few integer adds).
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Callable

WINDOWS_S = (10, 60, 600)
_RING = 601


class RateCounter:
    """A total plus per-second buckets for windowed rates."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.total = 0
        self._buckets = [0] * _RING
        self._stamps = [-1] * _RING

    def add(self, n: int = 1) -> None:
        sec = int(self.clock())
        i = sec % _RING
        if self._stamps[i] != sec:
            self._stamps[i], self._buckets[i] = sec, 0
        self._buckets[i] += n
        self.total += n

    def rate(self, window_s: int) -> float:
        """Events per second over the last ``window_s`` whole seconds."""
        now = int(self.clock())
        lo = now - window_s
        s = sum(b for b, t in zip(self._buckets, self._stamps) if lo <= t < now)
        return s / window_s


class BrokerStats:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.boot_ms = int(clock() * 1000)
        self._lock = threading.Lock()
        self.put_msgs = RateCounter(clock)
        self.put_bytes = RateCounter(clock)
        self.put_failed = 0
        self.get_found = RateCounter(clock)  # messages handed out by pulls
        self.get_miss = RateCounter(clock)  # pulls that found nothing
        self.get_transferred = RateCounter(clock)  # bytes handed out
        self.get_by_group: dict[tuple[str, str], RateCounter] = defaultdict(
            lambda: RateCounter(clock))  # (group, topic) -> messages
        self.put_by_topic: dict[str, RateCounter] = defaultdict(lambda: RateCounter(clock))
        self._day = self._today()
        self.put_total_yesterday_morning = 0
        self.put_total_today_morning = 0
        self.get_total_yesterday_morning = 0
        self.get_total_today_morning = 0

    def _today(self) -> tuple[int, int, int]:
        return time.localtime(self.clock())[:3]

    def _roll_day(self) -> None:
        day = self._today()
        if day != self._day:
            self._day = day
            self.put_total_yesterday_morning = self.put_total_today_morning
            self.get_total_yesterday_morning = self.get_total_today_morning
            self.put_total_today_morning = self.put_msgs.total
            self.get_total_today_morning = self.get_found.total

    # -- recording ------------------------------------------------------------------------------
    def record_put(self, topic: str, msgs: int, size: int, ok: bool = True) -> None:
        with self._lock:
            self._roll_day()
            if not ok:
                self.put_failed += 1
                return
            self.put_msgs.add(msgs)
            self.put_bytes.add(size)
            self.put_by_topic[topic].add(msgs)

    def record_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        with self._lock:
            self._roll_day()
            if msgs <= 0:
                self.get_miss.add(1)
                return
            self.get_found.add(msgs)
            self.get_transferred.add(size)
            self.get_by_group[(group, topic)].add(msgs)

    # -- reading --------------------------------------------------------------------------------
    def group_get_tps(self, group: str, topic: str, window_s: int = 60) -> float:
        with self._lock:
            c = self.get_by_group.get((group, topic))
            return c.rate(window_s) if c else 0.0

    def topic_put_tps(self, topic: str, window_s: int = 60) -> float:
        with self._lock:
            c = self.put_by_topic.get(topic)
            return c.rate(window_s) if c else 0.0

    def tps_string(self, counter: RateCounter) -> str:
        """RocketMQ's "10s 60s 600s" rate string (first field parsed by mqadmin clusterList)."""
        with self._lock:
            return " ".join(f"{counter.rate(w):.1f}" for w in WINDOWS_S)

    def totals(self) -> dict[str, int]:
        with self._lock:
            self._roll_day()
            return {"msgPutTotalYesterdayMorning": self.put_total_yesterday_morning,
                    "msgPutTotalTodayMorning": self.put_total_today_morning,
                    "msgPutTotalTodayNow": self.put_msgs.total,
                    "msgGetTotalYesterdayMorning": self.get_total_yesterday_morning,
                    "msgGetTotalTodayMorning": self.get_total_today_morning,
                    "msgGetTotalTodayNow": self.get_found.total,
                    "putMessageTimesTotal": self.put_msgs.total,
                    "putMessageSizeTotal": self.put_bytes.total,
                    "putMessageFailedTimes": self.put_failed}


__all__ = ["BrokerStats", "RateCounter", "WINDOWS_S"]
