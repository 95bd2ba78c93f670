"""Attacks on a broker with ``aclEnable=true``, each as an attacker on this machine would run it
(a normal account of ``plain_acl.yml``, our client over real sockets): each one succeeded on
RocketMQ 4.9.7's rules and is refused here (README "Security").
"""
from __future__ import annotations

import os

import pytest
import yaml

from rocketstore.client import AdminClient, SessionCredentials
from rocketstore.errors import BrokerError

from .conftest import start_server
from .test_acl import ACL_YML, ADMIN, DENIED, USER, write_acl_home

NEED_ADMIN = DENIED + "Need admin permission for request code={code}, but accessKey={ak} is not"


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory):
    store, conf = write_acl_home(tmp_path_factory.mktemp("acl-attacks"))
    srv = start_server(store, "--config", conf)
    yield srv
    assert srv.stop() == 0, srv.log()


def _file(srv) -> str:
    return os.path.join(srv.store, "conf", "plain_acl.yml")


def test_normal_account_cannot_make_itself_admin(acl_server):
    b, path = acl_server.broker, _file(acl_server)
    before = open(path).read()
    with AdminClient(broker=b, credentials=USER) as a:
        with pytest.raises(BrokerError) as e:  # code 50 with admin=true, signed by itself
            a.update_acl_config(b, "RocketMQ", "12345678", admin=True)
        assert e.value.code == 1
        assert e.value.remark.startswith(NEED_ADMIN.format(code=50, ak="RocketMQ"))
        for call, code in ((lambda: a.delete_acl_config(b, "rocketmq2"), 51),
                           (lambda: a.acl_version(b), 52),
                           (lambda: a.update_global_white_addrs(b, ["127.0.0.*"]), 53),
                           (lambda: a.acl_config(b), 54)):
            with pytest.raises(BrokerError) as e:
                call()
            assert e.value.remark.startswith(NEED_ADMIN.format(code=code, ak="RocketMQ"))
        with pytest.raises(BrokerError) as e:  # and so it still cannot create a topic
            a.create_topic("EscalatedTopic")
        assert "request code=17" in e.value.remark
    assert open(path).read() == before


def test_no_answer_carries_another_accounts_secret(acl_server):
    b = acl_server.broker
    expected = yaml.safe_load(ACL_YML)["accounts"]
    with AdminClient(broker=b, credentials=ADMIN) as a:
        cfg = a.acl_config(b)
    got = {c["accessKey"]: c.get("secretKey") for c in cfg["plainAccessConfigs"]}
    # the admin's own key is its own; every other account's is masked
    assert got == {acc["accessKey"]: ("12345678" if acc["accessKey"] == "rocketmq2" else "***")
                   for acc in expected}


def test_white_listed_address_does_not_reach_acl_codes(tmp_path):
    """A globally white-listed address passes every check in RocketMQ 4.9.7, the ACL codes
    included: anyone on 127.0.0.1 could add an admin account. Here it needs an admin account;
    an account white-listed by address still needs ``admin: true`` for admin codes."""
    text = ACL_YML.replace("  - 10.10.103.*", "  - 127.0.0.1")
    store, conf = write_acl_home(tmp_path, text)
    srv = start_server(store, "--config", conf)
    try:
        b = srv.broker
        with AdminClient(broker=b) as a:  # unsigned
            a.create_topic("WhiteTopic")  # an ordinary admin code: the white list still works
            with pytest.raises(BrokerError) as e:
                a.update_acl_config(b, "intruder1", "secret123", admin=True)
            assert "No accessKey is configured" in e.value.remark
        local = SessionCredentials("localuser", "not-its-secret")  # whiteRemoteAddress 127.0.0.1
        with AdminClient(broker=b, credentials=local) as a:
            with pytest.raises(BrokerError) as e:
                a.update_acl_config(b, "intruder1", "secret123", admin=True)
            assert e.value.remark.startswith(NEED_ADMIN.format(code=50, ak="localuser"))
        with AdminClient(broker=b, credentials=ADMIN) as a:
            a.update_acl_config(b, "newadmin1", "secret123", admin=True)
        assert "intruder1" not in open(os.path.join(store, "conf", "plain_acl.yml")).read()
    finally:
        assert srv.stop() == 0, srv.log()
