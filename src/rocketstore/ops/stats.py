"""Request latency around the broker's handlers, and the TPS series of the console's chart.

Theory of operation: message counts and bytes are the broker's own ``BrokerStats`` (recorded by
the send and pull handlers, read by the admin requests); ``ops`` reads them and adds what they
do not hold. ``HandlerLatency.instrument(handlers)`` replaces the SEND (10, 310, 320) and PULL
(11) entries of the handler table with wrappers that time the original handler: one histogram
observation per *request*, nothing added to the send path itself and no per-message work. Pull
latency includes the time a long-polling pull was held waiting for messages; the
``long_polling`` label tells those pulls apart. ``TpsSampler`` samples the ``BrokerStats``
totals once a second into a ring, from which the console draws its live chart.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Awaitable, Callable

from prometheus_client import CollectorRegistry, Histogram

from ..remoting.codes import PULL_FLAG_SUSPEND, RequestCode

Handler = Callable[[Any, Any], Awaitable[Any]]

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0, 30.0)
_PUT_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
              RequestCode.SEND_BATCH_MESSAGE)


class HandlerLatency:
    """Prometheus histograms of the time to answer send and pull requests."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.put_latency = Histogram("rocketstore_put_latency_seconds", "Time to answer a "
                                     "send request (store put and flush included).",
                                     buckets=LATENCY_BUCKETS_S, registry=registry)
        self.get_latency = Histogram("rocketstore_pull_latency_seconds", "Time to answer a "
                                     "pull request; long-polling pulls include their hold.",
                                     ["long_polling"], buckets=LATENCY_BUCKETS_S,
                                     registry=registry)
        self._get_latency = {True: self.get_latency.labels("true"),
                             False: self.get_latency.labels("false")}

    def instrument(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        out = dict(handlers)
        for code in _PUT_CODES:
            if code in out:
                out[code] = self._wrap_put(out[code])
        for code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
            if code in out:
                out[code] = self._wrap_pull(out[code])
        return out

    def _wrap_put(self, handler: Handler) -> Handler:
        observe = self.put_latency.observe

        async def put(conn: Any, cmd: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await handler(conn, cmd)
            finally:
                observe(time.perf_counter() - t0)
        return put

    def _wrap_pull(self, handler: Handler) -> Handler:
        async def pull(conn: Any, cmd: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await handler(conn, cmd)
            finally:
                held = bool(_int(cmd.ext_fields.get("sysFlag")) & PULL_FLAG_SUSPEND)
                self._get_latency[held].observe(time.perf_counter() - t0)
        return pull


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def broker_totals(stats: Any) -> Callable[[], dict[str, int]]:
    """The running totals of a ``BrokerStats``, as ``TpsSampler`` reads them."""
    def totals() -> dict[str, int]:
        return {"put_msgs": stats.put_msgs.total, "get_msgs": stats.get_found.total,
                "put_bytes": stats.put_bytes.total, "get_bytes": stats.get_transferred.total}
    return totals


class TpsSampler:
    """Samples running totals (``put_msgs``, ``get_msgs``, ``put_bytes``, ``get_bytes``) every
    ``interval_s``; keeps ``keep`` samples for charts."""

    def __init__(self, totals: Callable[[], dict[str, int]], interval_s: float = 1.0,
                 keep: int = 600) -> None:
        self.totals = totals
        self.interval_s = interval_s
        self.samples: collections.deque = collections.deque(maxlen=keep)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None
        self.run_once()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="TpsSampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.run_once()

    def run_once(self) -> None:
        try:
            t = self.totals()
        except Exception as exc:  # a remote broker that does not answer: a gap in the chart
            self.last_error = exc
            return
        self.last_error = None
        self.samples.append((time.time(), t["put_msgs"], t["get_msgs"], t["put_bytes"],
                             t["get_bytes"]))

    def last_totals(self) -> dict[str, int] | None:
        if not self.samples:
            return None
        _, put, get, put_b, get_b = self.samples[-1]
        return {"put_msgs": put, "get_msgs": get, "put_bytes": put_b, "get_bytes": get_b}

    def series(self, since: float = 0.0) -> dict[str, list[float]]:
        """Per-interval rates: ``{"t": [...], "put_tps": [...], "get_tps": [...], ...}``."""
        pts = list(self.samples)
        out: dict[str, list[float]] = {"t": [], "put_tps": [], "get_tps": [],
                                       "put_bps": [], "get_bps": []}
        for a, b in zip(pts, pts[1:]):
            dt = b[0] - a[0]
            if dt <= 0 or b[0] <= since:
                continue
            out["t"].append(round(b[0], 3))
            out["put_tps"].append(round((b[1] - a[1]) / dt, 2))
            out["get_tps"].append(round((b[2] - a[2]) / dt, 2))
            out["put_bps"].append(round((b[3] - a[3]) / dt, 1))
            out["get_bps"].append(round((b[4] - a[4]) / dt, 1))
        return out
