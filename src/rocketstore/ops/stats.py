"""Request statistics: put/get counts, bytes and latency, measured around the broker's handlers.

Theory of operation: ``RequestStats.instrument(handlers)`` replaces the SEND (10, 310, 320) and
PULL (11) entries of the broker's handler table with wrappers that time the original handler
and, once it answered, count the request: one counter increment and one histogram observation
per *request*, with the batch size taken from the response (the comma-joined ``msgId`` of a
send, ``nextBeginOffset - queueOffset`` of a pull) — no per-message Python work, nothing added
to the send path itself. The handlers run on the event loop, so the plain running totals the
TPS sampler reads need no lock.

``messages_out`` counts the queue units a successful pull moved past: the messages delivered,
unless a tag filter skipped some (the store reads past them in the same request). Pull latency
includes the time a long-polling pull was held waiting for messages; the ``long_polling`` label
tells those apart.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..remoting.codes import PULL_FLAG_SUSPEND, RequestCode, ResponseCode

Handler = Callable[[Any, Any], Awaitable[Any]]

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                     2.5, 5.0, 10.0, 30.0)
_PUT_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
              RequestCode.SEND_BATCH_MESSAGE)
# a send that stored its message(s): RocketMQ answers the flush/slave timeouts with the result
_PUT_STORED = {int(ResponseCode.SUCCESS), int(ResponseCode.FLUSH_DISK_TIMEOUT),
               int(ResponseCode.FLUSH_SLAVE_TIMEOUT), int(ResponseCode.SLAVE_NOT_AVAILABLE)}


class RequestStats:
    """Prometheus counters and histograms of puts and pulls, plus running totals."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages_in = Counter("rocketmq_messages_in", "Messages stored by send requests.",
                                   ["topic"], registry=registry)
        self.throughput_in = Counter("rocketmq_throughput_in", "Message body bytes received "
                                     "by send requests (a batch counts its encoded body).",
                                     ["topic"], registry=registry)
        self.messages_out = Counter("rocketmq_messages_out", "Messages delivered by pull "
                                    "requests (queue units read past).",
                                    ["topic", "consumer_group"], registry=registry)
        self.throughput_out = Counter("rocketmq_throughput_out", "Record bytes delivered by "
                                      "pull requests.", ["topic", "consumer_group"],
                                      registry=registry)
        self.requests = Counter("rocketstore_requests", "Send and pull requests answered.",
                                ["request", "result"], registry=registry)
        self.put_latency = Histogram("rocketstore_put_latency_seconds", "Time to answer a "
                                     "send request (store put and flush included).",
                                     buckets=LATENCY_BUCKETS_S, registry=registry)
        self.get_latency = Histogram("rocketstore_pull_latency_seconds", "Time to answer a "
                                     "pull request; long-polling pulls include their hold.",
                                     ["long_polling"], buckets=LATENCY_BUCKETS_S,
                                     registry=registry)
        self._get_latency = {True: self.get_latency.labels("true"),
                             False: self.get_latency.labels("false")}
        # running totals for the TPS sampler (written on the event loop only)
        self.put_msgs = 0
        self.get_msgs = 0
        self.put_bytes = 0
        self.get_bytes = 0

    # -- instrumentation ------------------------------------------------------------------------
    def instrument(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        out = dict(handlers)
        for code in _PUT_CODES:
            if code in out:
                out[code] = self._wrap_put(out[code])
        if RequestCode.PULL_MESSAGE in out:
            out[RequestCode.PULL_MESSAGE] = self._wrap_pull(out[RequestCode.PULL_MESSAGE])
        return out

    def _wrap_put(self, handler: Handler) -> Handler:
        async def put(conn: Any, cmd: Any) -> Any:
            t0 = time.perf_counter()
            resp = await handler(conn, cmd)
            self.put_latency.observe(time.perf_counter() - t0)
            self.observe_put(cmd, resp)
            return resp
        return put

    def _wrap_pull(self, handler: Handler) -> Handler:
        async def pull(conn: Any, cmd: Any) -> Any:
            t0 = time.perf_counter()
            resp = await handler(conn, cmd)
            held = bool(_int(cmd.ext_fields.get("sysFlag")) & PULL_FLAG_SUSPEND)
            self._get_latency[held].observe(time.perf_counter() - t0)
            self.observe_pull(cmd, resp)
            return resp
        return pull

    def observe_put(self, cmd: Any, resp: Any) -> None:
        if resp is None or resp.code not in _PUT_STORED:
            self.requests.labels("send", "error").inc()
            return
        self.requests.labels("send", "ok").inc()
        f = cmd.ext_fields
        topic = f.get("topic") or f.get("b") or ""
        n = resp.ext_fields.get("msgId", "").count(",") + 1
        size = len(cmd.body or b"")
        self.messages_in.labels(topic).inc(n)
        self.throughput_in.labels(topic).inc(size)
        self.put_msgs += n
        self.put_bytes += size

    def observe_pull(self, cmd: Any, resp: Any) -> None:
        if resp is None or resp.code != ResponseCode.SUCCESS:
            self.requests.labels("pull", "empty" if resp is not None else "error").inc()
            return
        self.requests.labels("pull", "found").inc()
        f = cmd.ext_fields
        n = max(0, _int(resp.ext_fields.get("nextBeginOffset")) - _int(f.get("queueOffset")))
        size = len(resp.body or b"")
        labels = (f.get("topic", ""), f.get("consumerGroup", ""))
        self.messages_out.labels(*labels).inc(n)
        self.throughput_out.labels(*labels).inc(size)
        self.get_msgs += n
        self.get_bytes += size


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


class TpsSampler:
    """Samples the running totals once a second; keeps the last ``keep`` samples for charts."""

    def __init__(self, stats: RequestStats, interval_s: float = 1.0, keep: int = 600) -> None:
        self.stats = stats
        self.interval_s = interval_s
        self.samples: collections.deque = collections.deque(maxlen=keep)  # (t, put, get, put_b, get_b)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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
        s = self.stats
        self.samples.append((time.time(), s.put_msgs, s.get_msgs, s.put_bytes, s.get_bytes))

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

    def totals(self) -> dict[str, int]:
        s = self.stats
        return {"put_msgs": s.put_msgs, "get_msgs": s.get_msgs, "put_bytes": s.put_bytes,
                "get_bytes": s.get_bytes}
