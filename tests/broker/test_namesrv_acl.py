"""The name server's opt-in ACL (``namesrvAclEnable=true``): attacks on the write codes over a
real socket with our client. Without it (RocketMQ 4.x's name server) anyone wipes a broker's
write permission and writes the KV config; with it they need an admin account's signature.
Reads stay open. Values with newlines reach the log escaped, on either setting."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rocketstore.client import AdminClient, Producer
from rocketstore.errors import BrokerError
from rocketstore.remoting.codes import RequestCode

from .conftest import free_port, start_server
from .test_acl import ADMIN, DENIED, USER, write_acl_home

FORGED = "2026-01-01 00:00:00,000 ERROR rocketstore.broker: forged line"


def _server(tmp_path, namesrv_acl: bool):
    store, conf = write_acl_home(tmp_path)
    if namesrv_acl:
        with open(conf, "a") as fh:
            fh.write("namesrvAclEnable=true\n")
    return start_server(store, "--config", conf)


def _wipe(srv, credentials=None) -> dict:
    with AdminClient(namesrv=srv.namesrv, credentials=credentials) as a:
        return a.wipe_write_perm("broker-a")


def test_without_namesrv_acl_anyone_wipes_write_perm(tmp_path):
    """Today's behaviour, kept when the option is off: the attack works (RocketMQ 4.x's too)."""
    srv = _server(tmp_path, namesrv_acl=False)
    try:
        with AdminClient(broker=srv.broker, credentials=ADMIN) as a:
            a.create_topic("NsTopic", 2, 2)
        [wiped] = _wipe(srv).values()  # unsigned, and it wiped
        assert wiped >= 1
        with AdminClient(namesrv=srv.namesrv) as a:  # a newline in a value: one log line
            a.put_kv_config("ns1", "k1", "v\n" + FORGED)
        lines = srv.log().splitlines()
        assert not any(ln.startswith(FORGED) for ln in lines)
        assert any("v\\n" + FORGED in ln for ln in lines)
    finally:
        assert srv.stop() == 0, srv.log()


def test_namesrv_acl_refuses_unsigned_and_normal_accounts(tmp_path):
    srv = _server(tmp_path, namesrv_acl=True)
    try:
        with AdminClient(broker=srv.broker, credentials=ADMIN) as a:
            a.create_topic("NsTopic", 2, 2)
        with pytest.raises(BrokerError) as e:
            _wipe(srv)
        assert e.value.code == 1 and e.value.remark.startswith(
            DENIED + "No accessKey is configured")
        with pytest.raises(BrokerError) as e:
            _wipe(srv, USER)
        assert e.value.remark.startswith(
            DENIED + "Need admin permission for request code=205, but accessKey=RocketMQ is not")
        for code, fields in ((RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k",
                                                          "value": "v"}),
                             (RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}),
                             (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
                             (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "NsTopic"}),
                             (RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a",
                              "brokerAddr": srv.broker, "clusterName": "DefaultCluster",
                              "brokerId": "0"}),
                             (RequestCode.UPDATE_NAMESRV_CONFIG, {})):
            with AdminClient(namesrv=srv.namesrv, credentials=USER) as a:
                with pytest.raises(BrokerError) as e:
                    a.call(srv.namesrv, code, fields, b"orderMessageEnable=true\n")
                assert f"request code={code}" in e.value.remark, (code, e.value.remark)
        # reads stay open, and clients still produce (routes come unsigned from this client)
        with Producer("PGN", srv.namesrv, credentials=USER) as p:
            assert p.send("topicB", b"after", queue_id=0).status == "SEND_OK"
        with AdminClient(namesrv=srv.namesrv) as a:
            assert a.get_kv_config("ns", "k") is None
        # the admin account does what it must
        [wiped] = _wipe(srv, ADMIN).values()
        assert wiped >= 1
        with AdminClient(namesrv=srv.namesrv, credentials=ADMIN) as a:
            assert list(a.add_write_perm("broker-a").values()) == [wiped]
            a.put_kv_config("ns", "k", "v")
            assert a.get_kv_config("ns", "k") == "v"
    finally:
        assert srv.stop() == 0, srv.log()


def test_standalone_namesrv_acl_file(tmp_path):
    store, _ = write_acl_home(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketstore.cli", "namesrv", "--port", str(port), "--json",
         "--kv-config-path", str(tmp_path / "kv.json"),
         "--acl-file", os.path.join(store, "conf", "plain_acl.yml")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert '"ready"' in proc.stdout.readline()
        addr = f"127.0.0.1:{port}"
        with AdminClient(namesrv=addr, credentials=USER) as a:
            with pytest.raises(BrokerError) as e:
                a.put_kv_config("ns", "k", "v")
            assert "request code=100" in e.value.remark
        with AdminClient(namesrv=addr, credentials=ADMIN) as a:
            a.put_kv_config("ns", "k", "v")
            assert a.get_kv_config("ns", "k") == "v"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
