"""``ProducerManager``: producers keyed by connection, dropped on close, unregister and expiry."""
from __future__ import annotations

from rocketstore.broker.state.producers import ProducerManager


class Conn:
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.closed = False


def test_register_heartbeat_and_views():
    pm = ProducerManager(expired_timeout_ms=1000)
    a, b = Conn("127.0.0.1:1"), Conn("127.0.0.1:2")
    assert pm.register("G", a, "ip@1", language="CPP", version=5, now_ms=0) is True
    assert pm.register("G", a, "ip@1", now_ms=10) is False  # a heartbeat, not a new producer
    assert pm.register("G", b, "ip@2", now_ms=10) is True
    assert pm.register("H", a, "ip@1", now_ms=10) is True
    assert pm.groups() == ["G", "H"]
    assert pm.connections("G") == [a, b]
    chans = pm.channels("G")
    assert [(c.client_id, c.client_addr, c.language, c.version) for c in chans] == \
        [("ip@1", "127.0.0.1:1", "CPP", 5), ("ip@2", "127.0.0.1:2", "JAVA", 0)]
    assert pm.find_connection("ip@2") is b
    assert pm.connections("nobody") == [] and pm.available_connection("nobody") is None
    picked = {id(pm.available_connection("G")) for _ in range(4)}
    assert picked == {id(a), id(b)}  # round robin over the live ones
    b.closed = True
    assert all(pm.available_connection("G") is a for _ in range(3))


def test_close_unregister_expire():
    pm = ProducerManager(expired_timeout_ms=1000)
    a, b = Conn("x:1"), Conn("x:2")
    pm.register("G", a, "c1", now_ms=0)
    pm.register("H", a, "c1", now_ms=0)
    pm.register("G", b, "c2", now_ms=500)
    assert pm.connection_closed(a) == ["G", "H"]
    assert pm.groups() == ["G"] and pm.connections("G") == [b]
    assert pm.unregister("G", "c-unknown") is False
    assert pm.unregister("G", "c2") is True
    assert pm.groups() == []
    pm.register("G", a, "c1", now_ms=0)
    pm.register("G", b, "c2", now_ms=900)
    assert pm.scan_expired(now_ms=1500) == ["G"]  # c1 silent 1500 ms > 1000 ms
    assert pm.connections("G") == [b]
    assert pm.scan_expired(now_ms=1800) == []
