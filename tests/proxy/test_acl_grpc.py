"""The plain ACL on the gRPC endpoint: RocketMQ's 5.x Python client (PyPI
``rocketmq-python-client``) signing with ``Credentials(ak, sk)`` against ``serve --grpc-port``
with ``aclEnable=true`` and ``tests/broker/test_acl.py``'s accounts."""
from __future__ import annotations

import hashlib
import hmac
import os
import time

import grpc
import pytest

from rocketstore.proxy.protocol import pb, services
from tests.broker.test_acl import ACL_YML

from .conftest import client_python, run_client, run_script, start_grpc_server, write_conf


def test_grpc_client_signs_and_is_checked(tmp_path, monkeypatch):
    py = client_python()
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    conf = write_conf(tmp_path / "broker.conf", aclEnable="true")
    srv = start_grpc_server(str(store), {"topicB": 2, "topicA": 2}, "--config", conf)
    try:
        monkeypatch.setenv("RMQ_ACCESS_KEY", "RocketMQ")
        monkeypatch.setenv("RMQ_SECRET_KEY", "12345678")
        sent, denied, got = run_script(py, tmp_path, ("produce", srv.grpc, "topicB", 2, "normal"),
                                       ("bad", srv.grpc, "topicA"),
                                       ("receive", srv.grpc, "topicB", "groupB", 2, 30, "ack"))
        assert len(sent) == 2
        assert "sent" not in denied["unknown_topic"]
        assert "topic:topicA" in denied["unknown_topic"] or \
            "PERMISSION_DENIED" in denied["unknown_topic"], denied
        assert sorted(m["body"] for m in got) == ["normal-body-0", "normal-body-1"]
        monkeypatch.setenv("RMQ_SECRET_KEY", "not-the-secret")
        wrong = run_client(py, tmp_path, "bad", srv.grpc, "topicB")
        assert "sent" not in wrong["unknown_topic"], wrong
        _direct_calls(srv.grpc)
    finally:
        assert srv.stop() == 0, srv.log()
    assert os.path.exists(store / "conf" / "plain_acl.yml")


def _signed(ak: str, sk: str) -> list[tuple[str, str]]:
    """The 5.x clients' metadata: hex HmacSHA1 of the date-time, keyed by the secret."""
    dt = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    sig = hmac.new(sk.encode(), dt.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-date-time", dt), ("x-mq-client-id", "acl-test"),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                              f"SignedHeaders=x-mq-date-time, Signature={sig}")]


def _direct_calls(endpoint: str) -> None:
    """What the server answers, status and text, without a client library between."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = services.MessagingServiceStub(channel)

        def route(topic: str, meta) -> object:
            return stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)),
                                   metadata=meta, timeout=10)
        assert route("topicB", _signed("RocketMQ", "12345678")).status.code == pb.OK
        for topic, meta, text in (
                ("topicA", _signed("RocketMQ", "12345678"), "No default permission for topic:topicA"),
                ("topicB", _signed("RocketMQ", "wrong-secret"), "Check signature failed"),
                ("topicB", [("x-mq-client-id", "acl-test")], "No accessKey is configured")):
            with pytest.raises(grpc.RpcError) as e:
                route(topic, meta)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert text in e.value.details()
