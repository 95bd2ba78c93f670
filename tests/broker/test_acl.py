"""Plain ACL on ``rocketstore serve`` (``aclEnable=true``), driven over real sockets by our client.

Expected remarks are RocketMQ 4.9.7's texts, as its broker answers them (checked against the
Java broker in ``test_acl_java.py``); signatures are computed here from the documented formula
and one value computed by RocketMQ's own ``AclClientRPCHook``.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from rocketstore.client import AdminClient, Producer, PullConsumer, SessionCredentials
from rocketstore.errors import BrokerError
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.signing import sign_request

from .conftest import SMALL_STORE, free_port, metric, start_server

ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    admin: true
  - accessKey: localuser
    secretKey: whatever-secret
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""
USER = SessionCredentials("RocketMQ", "12345678")
ADMIN = SessionCredentials("rocketmq2", "12345678")
DENIED = "org.apache.rocketmq.acl.common.AclException: "


def write_acl_home(root, text: str = ACL_YML) -> tuple[str, str]:
    store = os.path.join(str(root), "store")
    os.makedirs(os.path.join(store, "conf"))
    with open(os.path.join(store, "conf", "plain_acl.yml"), "w") as fh:
        fh.write(text)
    conf = os.path.join(str(root), "broker.conf")
    with open(conf, "w") as fh:
        fh.write("aclEnable=true\naclFileWatchInterval=200\n")
    return store, conf


@pytest.fixture(scope="module", params=["2", "1"], ids=["workers", "one-process"])
def acl_server(request, tmp_path_factory):
    """An ACL broker with worker processes (every frame checked at the writer) and in one
    process (plain sends checked, then taken by the fast path): every test runs on both."""
    store, conf = write_acl_home(tmp_path_factory.mktemp("acl"))
    mport = free_port()
    srv = start_server(store, "--config", conf, "--workers", request.param, "--metrics-port",
                       str(mport))
    srv.workers, srv.metrics_port = int(request.param), mport
    yield srv
    assert srv.stop() == 0, srv.log()


def remark_of(excinfo) -> str:
    err = excinfo.value
    assert isinstance(err, BrokerError), err
    assert err.code == 1  # SYSTEM_ERROR, as RocketMQ 4.9.7 answers a refused request
    return err.remark


def test_signature_matches_rocketmq():
    """The value RocketMQ's AclClientRPCHook gives for this request (computed with its jar)."""
    cmd = RemotingCommand.request(11, {"topic": "topicB", "consumerGroup": "groupB",
                                       "queueId": "3", "zeta": "\u00e9\u4e2d", "Zeta": "Z"},
                                  "body-\u00fc".encode())
    sign_request(cmd, "RocketMQ", "12345678")
    assert cmd.ext_fields["Signature"] == "nE97ceg3rESFrwXdQwZwvGpebFI="
    # and the formula: values in key order (AccessKey included), then the body
    f = cmd.ext_fields
    content = "".join(f[k] for k in sorted(f) if k != "Signature").encode() + cmd.body
    assert f["Signature"] == base64.b64encode(
        hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()


def test_allowed_send_and_pull(acl_server):
    with Producer("PG", acl_server.namesrv, credentials=USER) as p:
        r = p.send("topicB", b"hello acl", queue_id=0)
    assert r.status == "SEND_OK"
    with PullConsumer("groupB", acl_server.namesrv, credentials=USER) as c:
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = c.pull("topicB", 0, 0, 32).messages
    assert [m.body for m in got] == [b"hello acl"]


def _fast_sends(srv) -> float:
    """``rocketstore_fast_sends_total`` of ``srv`` (0 before the first)."""
    return metric(srv.metrics_port, "rocketstore_fast_sends_total") or 0.0


def test_one_process_fast_path_takes_only_what_the_check_allows(acl_server):
    """With ACL on, a one-process broker's fast path takes a signed, permitted send; a refused
    one (no permission, bad signature, unsigned) is answered by the send processor, as above."""
    before = _fast_sends(acl_server)
    with Producer("PG", acl_server.namesrv, credentials=USER) as p:
        assert p.send("topicB", b"fast with acl", queue_id=0).status == "SEND_OK"
        with pytest.raises(BrokerError):
            p.send("topicA", b"x", queue_id=0)
    with Producer("PG", acl_server.namesrv) as p:
        with pytest.raises(BrokerError):
            p.send("topicB", b"x", queue_id=0)
    taken = _fast_sends(acl_server) - before
    assert taken == (1 if acl_server.workers == 1 else 0)  # workers forward every frame


def test_denied_by_permission(acl_server):
    with Producer("PG", acl_server.namesrv, credentials=USER) as p:
        with pytest.raises(BrokerError) as e:
            p.send("topicA", b"x", queue_id=0)  # topicA=DENY
        assert remark_of(e) == (DENIED + "No default permission for topic:topicA, org.apache."
                                "rocketmq.acl.plain.PlainPermissionManager.checkPerm("
                                "PlainPermissionManager.java:610)")
        with pytest.raises(BrokerError) as e:
            p.send("topicZ", b"x", queue_id=0)  # not listed: defaultTopicPerm DENY
        assert "No default permission for topic:topicZ" in remark_of(e)
    from rocketstore.client.admin import AdminClient
    with AdminClient(namesrv=acl_server.namesrv, credentials=ADMIN) as admin:
        admin.create_topic("topicC", 4, 4)  # the topic exists (a lookup creates none)
    with PullConsumer("groupA", acl_server.namesrv, credentials=USER) as c:
        with pytest.raises(BrokerError) as e:
            c.pull("topicC", 0, 0, 32)  # topicC=SUB, but groupA=DENY
        assert "No default permission for group:groupA" in remark_of(e)


def test_bad_signature_unknown_key_and_unsigned(acl_server):
    wrong = SessionCredentials("RocketMQ", "not-the-secret")
    with Producer("PG", acl_server.namesrv, credentials=wrong) as p:
        with pytest.raises(BrokerError) as e:
            p.send("topicB", b"x", queue_id=0)
        assert remark_of(e).startswith(DENIED + "Check signature failed for accessKey=RocketMQ")
    with Producer("PG", acl_server.namesrv,
                  credentials=SessionCredentials("nobody99", "12345678")) as p:
        with pytest.raises(BrokerError) as e:
            p.send("topicB", b"x", queue_id=0)
        assert remark_of(e).startswith(DENIED + "No acl config for nobody99")
    with Producer("PG", acl_server.namesrv) as p:
        with pytest.raises(BrokerError) as e:
            p.send("topicB", b"x", queue_id=0)
        assert remark_of(e).startswith(DENIED + "No accessKey is configured")


def test_account_white_address_skips_the_checks(acl_server):
    """An account whose whiteRemoteAddress matches passes without signature or permission
    checks (RocketMQ 4.9.7's rule): a wrong secret and a DENY default still send."""
    creds = SessionCredentials("localuser", "not-its-secret")
    with Producer("PG", acl_server.namesrv, credentials=creds) as p:
        assert p.send("topicW", b"w", queue_id=0).status == "SEND_OK"


def test_admin_only_codes(acl_server):
    with AdminClient(broker=acl_server.broker, credentials=USER) as a:
        with pytest.raises(BrokerError) as e:
            a.create_topic("NewTopic1")
        assert remark_of(e).startswith(DENIED + "Need admin permission for request code=17, "
                                       "but accessKey=RocketMQ is not")
    with AdminClient(broker=acl_server.broker, credentials=ADMIN) as a:
        a.create_topic("NewTopic1")
        assert "NewTopic1" in a.topic_configs(acl_server.broker)


def test_global_white_list_and_acl_admin_codes(acl_server):
    path = os.path.join(acl_server.store, "conf", "plain_acl.yml")
    b = acl_server.broker
    with AdminClient(broker=b, credentials=ADMIN) as a:
        before = a.acl_version(b)
        a.update_acl_config(b, "newuser1", "secret123", topic_perms=["topicN=PUB"],
                            default_group_perm="SUB")
        after = a.acl_version(b)
        assert after["version"]["counter"] == before["version"]["counter"] + 1
        assert after["allAclFileVersion"][path]["counter"] == after["version"]["counter"]
        data = yaml.safe_load(open(path))
        assert data["accounts"][-1] == {"accessKey": "newuser1", "secretKey": "secret123",
                                        "admin": False, "defaultGroupPerm": "SUB",
                                        "topicPerms": ["topicN=PUB"]}
        cfg = a.acl_config(b)
        assert cfg["globalWhiteAddrs"] == ["10.10.103.*"]
        assert [c["accessKey"] for c in cfg["plainAccessConfigs"]] == [
            "RocketMQ", "rocketmq2", "localuser", "newuser1"]
        with Producer("PGN", acl_server.namesrv,
                      credentials=SessionCredentials("newuser1", "secret123")) as p:
            assert p.send("topicN", b"n", queue_id=0).status == "SEND_OK"
            a.delete_acl_config(b, "newuser1")
            with pytest.raises(BrokerError) as e:
                p.send("topicN", b"n", queue_id=0)
            assert remark_of(e).startswith(DENIED + "No acl config for newuser1")
        with pytest.raises(BrokerError) as e:
            a.delete_acl_config(b, "newuser1")
        assert e.value.code == 210
        with pytest.raises(BrokerError) as e:  # keys must be longer than 6 characters
            a.update_acl_config(b, "short", "secret123")
        assert e.value.code == 209 and "cannot be null and length should longer than 6" \
            in e.value.remark
        with pytest.raises(BrokerError) as e:  # a malformed rule is refused, nothing written
            a.update_global_white_addrs(b, ["300.1.1.1"])
        assert e.value.code == 211
        assert yaml.safe_load(open(path))["globalWhiteRemoteAddresses"] == ["10.10.103.*"]
        with Producer("PG", acl_server.namesrv) as p:  # unsigned: refused, then white-listed
            with pytest.raises(BrokerError):
                p.send("topicA", b"x", queue_id=0)
            a.update_global_white_addrs(b, ["127.0.0.*"])
            assert p.send("topicA", b"x", queue_id=0).status == "SEND_OK"
            a.update_global_white_addrs(b, ["10.10.103.*"])
            with pytest.raises(BrokerError):
                p.send("topicA", b"x", queue_id=0)


def test_file_edits_are_picked_up(acl_server):
    path = os.path.join(acl_server.store, "conf", "plain_acl.yml")
    creds = SessionCredentials("edited01", "secret-edited")
    with Producer("PGE", acl_server.namesrv, credentials=creds) as p:
        with pytest.raises(BrokerError):
            p.send("topicE", b"e", queue_id=0)
        data = yaml.safe_load(open(path))
        data["accounts"].append({"accessKey": "edited01", "secretKey": "secret-edited",
                                 "topicPerms": ["topicE=PUB"]})
        with open(path, "w") as fh:
            yaml.safe_dump(data, fh, sort_keys=False)
        deadline = time.monotonic() + 20
        while True:
            try:
                assert p.send("topicE", b"e", queue_id=0).status == "SEND_OK"
                break
            except BrokerError:
                assert time.monotonic() < deadline, "the edited file was not reloaded"
                time.sleep(0.2)
        with open(path, "a") as fh:  # a broken file: reported, the last good one stays
            fh.write("accounts: [\n")
        deadline = time.monotonic() + 20
        while "ACL files not reloaded" not in acl_server.log():
            assert time.monotonic() < deadline, "the broken file was not reported"
            time.sleep(0.2)
        assert p.send("topicE", b"e", queue_id=0).status == "SEND_OK"
        data["accounts"].pop()
        with open(path, "w") as fh:
            yaml.safe_dump(data, fh, sort_keys=False)


def test_bad_file_refuses_to_start_and_acl_off_answers(tmp_path):
    store, conf = write_acl_home(tmp_path, "accounts:\n  - accessKey: ab\n    secretKey: cd\n")
    proc = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "serve", "--store", store, "--port",
         str(free_port()), "--namesrv-port", str(free_port()), "--config", conf, *SMALL_STORE],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "ACL configuration" in proc.stderr and "accessKey=ab" in proc.stderr
    srv = start_server(os.path.join(str(tmp_path), "plain"))
    try:
        with AdminClient(broker=srv.broker) as a:
            with pytest.raises(BrokerError) as e:
                a.update_acl_config(srv.broker, "newuser1", "secret123")
            assert e.value.code == 209 and "aclEnable" in e.value.remark
    finally:
        assert srv.stop() == 0


def test_cli_commands_sign_with_keys_from_the_environment(acl_server):
    cli = [sys.executable, "-m", "rocketstore.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    keyed = dict(env, ROCKETMQ_ACCESS_KEY="RocketMQ", ROCKETMQ_SECRET_KEY="12345678")
    send = [*cli, "send", "--namesrv", acl_server.namesrv, "--topic", "topicB", "--queue", "1",
            "from-cli"]
    refused = subprocess.run(send, capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode != 0 and "No accessKey is configured" in refused.stderr
    # said for a person: no Java exception or source line, and what to set
    assert refused.returncode == 1 and refused.stderr.startswith("error: "), refused.stderr
    assert ".java:" not in refused.stderr and "AclException" not in refused.stderr, refused.stderr
    assert "set ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY" in refused.stderr, refused.stderr
    denied = subprocess.run([*cli, "send", "--namesrv", acl_server.namesrv, "--topic", "topicA",
                             "x"], capture_output=True, text=True, env=keyed, timeout=60)
    assert denied.returncode == 1 and "access key 'RocketMQ'" in denied.stderr, denied.stderr
    assert ".java:" not in denied.stderr
    ok = subprocess.run(send, capture_output=True, text=True, env=keyed, timeout=60)
    assert ok.returncode == 0, ok.stderr
    admin = dict(env, ROCKETMQ_ACCESS_KEY="rocketmq2", ROCKETMQ_SECRET_KEY="12345678")
    topics = subprocess.run([*cli, "topics", "--broker", acl_server.broker, "--json"],
                            capture_output=True, text=True, env=admin, timeout=60)
    assert topics.returncode == 0 and "topicB" in topics.stdout, topics.stderr


def test_acl_cli(acl_server):
    import json

    cli = [sys.executable, "-m", "rocketstore.cli", "acl"]
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")},
               ROCKETMQ_ACCESS_KEY="rocketmq2", ROCKETMQ_SECRET_KEY="12345678")
    b = ["--broker", acl_server.broker]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], capture_output=True, text=True, env=env,
                              timeout=60)
    r = run("update", *b, "--access-key", "cliuser1", "--secret-key", "cli-secret1",
            "--topic-perm", "topicCli=PUB", "--default-group-perm", "SUB")
    assert r.returncode == 0, r.stderr
    [listing] = json.loads(run("list", *b, "--json").stdout)
    acct = next(a for a in listing["plainAccessConfigs"] if a["accessKey"] == "cliuser1")
    assert acct == {"accessKey": "cliuser1", "admin": False, "defaultGroupPerm": "SUB",
                    "secretKey": "***", "topicPerms": ["topicCli=PUB"]}
    path = os.path.join(acl_server.store, "conf", "plain_acl.yml")
    assert listing["versions"][path]["counter"] >= 1
    with Producer("PGC", acl_server.namesrv,
                  credentials=SessionCredentials("cliuser1", "cli-secret1")) as p:
        assert p.send("topicCli", b"c", queue_id=0).status == "SEND_OK"
    assert run("delete", *b, "--access-key", "cliuser1").returncode == 0
    again = run("delete", *b, "--access-key", "cliuser1")
    assert again.returncode != 0 and "deleted failed" in again.stderr


@pytest.mark.parametrize("rule,yes,no", [
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2", ""]),
    ("::1", ["::1", "0000:0000:0000:0000:0000:0000:0000:0001"], ["::2"]),
    ("127.0.0.1,127.0.0.2,127.0.0.3", ["127.0.0.1", "127.0.0.3"], ["127.0.0.4", "127.0.0.0"]),
    ("127.0.0.{1,2,3}", ["127.0.0.2"], ["127.0.0.4"]),
    ("192.100-150.*.*", ["192.130.0.2"], ["192.151.0.2", "193.130.0.2"]),
    ("192.168.1.1-100", ["192.168.1.100"], ["192.168.1.101", "192.168.2.1"]),
    ("1050::0005:0600:300c:{1,2,3}", ["1050:0000:0000:0000:0005:0600:300c:3"],
     ["1050:0000:0000:0000:0005:0600:300c:4"]),
    ("*", ["10.1.2.3", "::1"], []), ("", [], ["127.0.0.1"]),
])
def test_white_address_rules(rule, yes, no):
    """Cases of RocketMQ's own RemoteAddressStrategyTest."""
    from rocketstore.broker.acl.address import parse_address_rule

    r = parse_address_rule(rule)
    assert all(r.match(ip) for ip in yes) and not any(r.match(ip) for ip in no)


@pytest.mark.parametrize("rule", ["256.0.0.1", "::1ggg", "127.0.0.1,2,3}", "192.168.1.1-300"])
def test_bad_white_address_rules(rule):
    from rocketstore.broker.acl.address import AclError, parse_address_rule

    with pytest.raises(AclError, match="examine|format"):
        parse_address_rule(rule)


def test_push_consumer_with_credentials_and_a_retry(acl_server):
    """Heartbeat, rebalance, long-polling pulls, a send-back to %RETRY%groupB and its
    redelivery, offset commits: all signed, all allowed for groupB on topicC (SUB)."""
    import threading

    from rocketstore.client import PushConsumer

    with Producer("PGA", acl_server.namesrv, credentials=ADMIN) as p:
        p.send("topicC", b"retry-me", queue_id=0)
    seen, done = [], threading.Event()

    def listener(m):
        seen.append((m.body, m.reconsume_times))
        if len(seen) >= 2:
            done.set()
        return m.reconsume_times > 0  # fail the first delivery

    pc = PushConsumer("groupB", acl_server.namesrv, {"topicC": "*"}, listener,
                      consume_from="first", retry_delay_level=1, long_poll_ms=2000,
                      rebalance_interval_s=1.0, credentials=USER)
    pc.start()
    try:
        assert done.wait(40), seen
    finally:
        pc.shutdown()
    assert seen[:2] == [(b"retry-me", 0), (b"retry-me", 1)]


def test_pop_codes_need_what_pull_needs(acl_server):
    """RocketMQ's remoting ACL (4.9.7 and 5.3.3) names no resource for the POP codes, so a
    consumer without SUB on a topic could pop it over remoting. Ours checks the topic and the
    group's retry resource on POP, ACK, PEEK, CHANGE_INVISIBLE, NOTIFICATION, POLLING_INFO and
    each entry of a BATCH_ACK, as for PULL."""
    from rocketstore.remoting.codes import RequestCode, ResponseCode

    from .admin_wire import call
    with AdminClient(namesrv=acl_server.namesrv, credentials=ADMIN) as admin:
        for t in ("topicA", "topicB"):
            admin.create_topic(t, 2, 2)
    creds = (USER.access_key, USER.secret_key)
    now = int(time.time() * 1000)

    def pop(topic, group, code=RequestCode.POP_MESSAGE):
        return call(acl_server.broker, code,
                    {"consumerGroup": group, "topic": topic, "queueId": 0, "maxMsgNums": 1,
                     "invisibleTime": 20_000, "pollTime": 0, "bornTime": now, "initMode": 1,
                     "expType": "TAG", "exp": "*", "order": "false", "offset": 0,
                     "extraInfo": "0 1 20000 0 0 b 0 0", "attemptId": "x"}, credentials=creds)

    for code in (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.PEEK_MESSAGE,
                 RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.NOTIFICATION,
                 RequestCode.POLLING_INFO):
        r = pop("topicA", "groupB", code)  # topicA=DENY
        assert r.code == ResponseCode.SYSTEM_ERROR, (code, r.code, r.remark)  # an AclException
        assert "No default permission for topic:topicA" in r.remark, r.remark
        r = pop("topicB", "groupA", code)  # groupA=DENY
        assert r.code == ResponseCode.SYSTEM_ERROR, (code, r.code, r.remark)  # an AclException
        assert "No default permission for group:groupA" in r.remark, r.remark
    r = pop("topicB", "groupB")  # both allowed: the POP itself answers (nothing to pop)
    assert "AclException" not in (r.remark or ""), r.remark
    r = pop("topicB", "groupB", RequestCode.POLLING_INFO)
    assert r.code == ResponseCode.SUCCESS, r.remark
    unsigned = call(acl_server.broker, RequestCode.POP_MESSAGE,
                    {"consumerGroup": "groupB", "topic": "topicB", "queueId": 0, "maxMsgNums": 1,
                     "invisibleTime": 20_000, "pollTime": 0, "bornTime": now, "initMode": 1})
    assert "No accessKey is configured" in unsigned.remark, unsigned.remark
    body = json.dumps({"acks": [{"c": "groupB", "t": "topicB", "r": "0", "so": 0, "q": 0,
                                 "rq": 0, "pt": now, "it": 20_000, "b": "AQ=="},
                                {"c": "groupB", "t": "topicA", "r": "0", "so": 0, "q": 0,
                                 "rq": 0, "pt": now, "it": 20_000, "b": "AQ=="}]}).encode()
    r = call(acl_server.broker, RequestCode.BATCH_ACK_MESSAGE, {}, body, credentials=creds)
    assert r.code == ResponseCode.SYSTEM_ERROR and "topic:topicA" in r.remark, r.remark
