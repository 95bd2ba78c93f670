"""Replaying a captured gRPC signature: the 5.x clients sign only ``x-mq-date-time``, so a call
recorded once (metadata and all) would pass for ever. With ``aclEnable=true`` the broker refuses a
signed call whose date is more than ``aclSignatureWindowSeconds`` (default 15 minutes) from its
clock, and says why. Raw gRPC calls over a real socket, signed here by the documented formula."""
from __future__ import annotations

import hashlib
import hmac
import time

import grpc
import pytest

from rocketstore.proxy.protocol import pb, services
from tests.broker.test_acl import ACL_YML

from .conftest import start_grpc_server, write_conf


def _signed_at(at: float, ak: str = "RocketMQ", sk: str = "12345678") -> list[tuple[str, str]]:
    dt = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
    sig = hmac.new(sk.encode(), dt.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-date-time", dt), ("x-mq-client-id", "replayer"),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={ak}, "
                              f"SignedHeaders=x-mq-date-time, Signature={sig}")]


def _route(endpoint: str, meta) -> object:
    with grpc.insecure_channel(endpoint) as channel:
        stub = services.MessagingServiceStub(channel)
        return stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="topicB")),
                               metadata=meta, timeout=10)


def _refused(endpoint: str, meta) -> str:
    with pytest.raises(grpc.RpcError) as e:
        _route(endpoint, meta)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    return e.value.details()


def _server(tmp_path, **keys):
    store = tmp_path / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    conf = write_conf(tmp_path / "broker.conf", aclEnable="true", **keys)
    return start_grpc_server(str(store), {"topicB": 2}, "--config", conf)


def test_replayed_signature_is_refused_after_the_window(tmp_path):
    srv = _server(tmp_path)
    try:
        now = time.time()
        assert _route(srv.grpc, _signed_at(now)).status.code == pb.OK
        assert _route(srv.grpc, _signed_at(now - 14 * 60)).status.code == pb.OK  # within 15 min
        old = _refused(srv.grpc, _signed_at(now - 16 * 60))  # captured 16 minutes ago
        assert "old" in old and "within 900 s" in old and "aclSignatureWindowSeconds" in old, old
        ahead = _refused(srv.grpc, _signed_at(now + 16 * 60))
        assert "ahead of the broker's clock" in ahead, ahead
        meta = [m for m in _signed_at(now) if m[0] != "x-mq-date-time"]
        assert "x-mq-date-time is missing" in _refused(srv.grpc, meta)
        bad = [(k, "yesterday" if k == "x-mq-date-time" else v) for k, v in _signed_at(now)]
        assert "is not yyyyMMddTHHmmssZ" in _refused(srv.grpc, bad)
    finally:
        assert srv.stop() == 0, srv.log()


def test_window_is_configurable(tmp_path):
    srv = _server(tmp_path, aclSignatureWindowSeconds=60)
    try:
        now = time.time()
        assert _route(srv.grpc, _signed_at(now - 30)).status.code == pb.OK
        assert "within 60 s" in _refused(srv.grpc, _signed_at(now - 5 * 60))
    finally:
        assert srv.stop() == 0, srv.log()
