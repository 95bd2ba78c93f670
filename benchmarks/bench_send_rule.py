"""The send rule's cost per plain send: ``send_rule.plan_send`` on a SEND_MESSAGE_V2 header with
a 1 KiB body, the topic checks included (as the one-process fast path calls it), and without
them (as a worker process calls it); then a worker's whole per-send step, the link PUT message
of each send of a 32-send read (``workers.put_batch.link_puts``: the pure function, and its
compiled twin when built). In-process, no sockets; best of 5 runs of 20,000 sends.

    PYTHONPATH=src python benchmarks/bench_send_rule.py
"""
from __future__ import annotations

import tempfile
import time
from functools import partial

from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.send_rule import Put, SendRules, plan_send, send_topic
from rocketstore.broker.state.topics import TopicConfigManager
from rocketstore.remoting.codes import RequestCode

N = 20_000


def main() -> None:
    rules = SendRules("C", "127.0.0.1:10911", True, 4 << 20, True)
    with tempfile.TemporaryDirectory() as d:
        lookup = partial(send_topic, TopicConfigManager(d), BrokerConfig())
        h = {"a": "PG", "b": "BenchTopic", "c": "TBW102", "d": "4", "e": "1", "f": "0",
             "g": "1700000000000", "h": "0", "i": "KEYS\x01k1\x02TAGS\x01t\x02WAIT\x01true\x02",
             "j": "0", "k": "false", "m": "false"}
        body = b"x" * 1024
        for name, topics in (("with the topic checks (one process)", lookup),
                             ("without them (a worker process)", None)):
            assert isinstance(plan_send(RequestCode.SEND_MESSAGE_V2, h, body, "127.0.0.1:5000",
                                        rules, topics), Put)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(N):
                    plan_send(RequestCode.SEND_MESSAGE_V2, h, body, "127.0.0.1:5000", rules, topics)
                best = min(best, (time.perf_counter() - t) / N * 1e6)
            print(f"plan_send {name}: {best:.1f} us per send")
        from rocketstore import _native
        from rocketstore.broker.workers import put_batch
        items = [(RequestCode.SEND_MESSAGE_V2, h, body)] * 32
        fns = [("pure", put_batch.link_puts_py)]
        if put_batch.link_puts is not put_batch.link_puts_py:
            fns.append(("compiled", put_batch.link_puts))
        for name, fn in fns:
            assert all(fn(items, "127.0.0.1:5000", rules, 1, 1))
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(N // 32):
                    fn(items, "127.0.0.1:5000", rules, 1, 1)
                best = min(best, (time.perf_counter() - t) / (N // 32 * 32) * 1e6)
            print(f"link_puts ({name}), a read of 32 sends: {best:.1f} us per send")
        print("compiled twins loaded:", _native.active())


if __name__ == "__main__":
    main()
