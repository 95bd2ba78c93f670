"""Queries while the reput thread writes (and rolls files): every answer is a correct, ordered,
duplicate-free subset, and complete once dispatch has caught up."""
from __future__ import annotations

import threading

from .index_helpers import MiniLog, make_service

T0 = 1_700_000_000_000


def test_queries_during_dispatch_and_rolls(tmp_path):
    log = MiniLog()
    bounds = [0]
    model = []
    for b in range(120):
        for i in range(5):
            n = b * 5 + i
            keys = [f"k{n % 7}", "hot"] + (["Aa"] if n % 2 else ["BB"])
            off = log.append("AaTopic" if n % 3 else "BBTopic", keys, uniq=f"U{n}", ts=T0 + n * 37)
            model.append((off, "AaTopic" if n % 3 else "BBTopic", keys, f"U{n}"))
        bounds.append(len(log.buf))
    svc = make_service(tmp_path, slots=5, num=23)  # many rolls
    errors: list[BaseException] = []
    done = threading.Event()

    def writer():
        try:
            for a, b in zip(bounds, bounds[1:]):
                svc.dispatch(log.records(a, b))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader(topic, key):
        try:
            while not done.is_set():
                got = svc.query_message(topic, key, 64, 0, None, log.read).messages
                offs = [m.commitlog_offset for m in got]
                assert offs == sorted(set(offs), reverse=True)
                assert all(m.topic == topic and (key in m.keys or m.uniq_key == key) for m in got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=a) for a in
        [("AaTopic", "Aa"), ("BBTopic", "BB"), ("AaTopic", "hot"), ("BBTopic", "k3")]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for topic, key in [("AaTopic", "Aa"), ("BBTopic", "BB"), ("AaTopic", "BB"), ("BBTopic", "k3"),
                       ("AaTopic", "U598")]:
        exp = [o for o, t, ks, u in reversed(model) if t == topic and (key in ks or u == key)][:64]
        got = svc.query_message(topic, key, 64, 0, None, log.read).messages
        assert [m.commitlog_offset for m in got] == exp
    assert len(svc.files) > 100
    svc.shutdown()
