"""``TimerMetrics``: timers waiting per real topic, persisted as RocketMQ 5 does in
``<root>/config/timermetrics`` (``{"dataVersion": .., "timingCount": {topic: {"count": n,
"timeStamp": ms}}}``, written via temp file, the previous version kept as ``.bak``)."""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from ..checkpoint import atomic_write

log = logging.getLogger(__name__)
TIMER_DIST = (5, 60, 300, 900, 3600, 14400, 28800, 86400)  # seconds, RocketMQ's timerDist


class TimerMetrics:
    def __init__(self, path: str) -> None:
        self.path = path
        self.timer_dist = TIMER_DIST
        self._counts: dict[str, list[int]] = {}  # topic -> [count, timeStamp]
        self._lock = threading.Lock()
        self._version = [0, int(time.time() * 1000), 0]
        self._dirty = False

    def load(self) -> None:
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("%s unreadable (%s); trying its backup", path, exc)
                continue
            for topic, m in (data.get("timingCount") or {}).items():
                self._counts[topic] = [int(m.get("count", 0)), int(m.get("timeStamp", 0))]
            dv = data.get("dataVersion") or {}
            self._version = [int(dv.get("stateVersion", 0)), int(dv.get("timestamp", 0)),
                             int(dv.get("counter", 0))]
            return

    def add(self, topic: str, delta: int, now_ms: int) -> None:
        with self._lock:
            m = self._counts.setdefault(topic, [0, 0])
            m[0] += delta
            m[1] = now_ms
            self._version[2] += 1
            self._version[1] = now_ms
            self._dirty = True

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {t: m[0] for t, m in self._counts.items()}

    def encode(self) -> str:
        with self._lock:
            return json.dumps({
                "dataVersion": {"counter": self._version[2], "stateVersion": self._version[0],
                                "timestamp": self._version[1]},
                "timingCount": {t: {"count": m[0], "timeStamp": m[1]} for t, m in self._counts.items()},
            }, indent=1)

    def persist(self) -> None:
        if not self._dirty and os.path.exists(self.path):
            return
        self._dirty = False
        text = self.encode()
        if os.path.exists(self.path):
            try:
                os.replace(self.path, self.path + ".bak")
            except OSError:
                pass
        atomic_write(self.path, text.encode())
