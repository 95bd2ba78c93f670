"""Plain ACL against RocketMQ 4.9.7's own Java producer / pull consumer (``AclClientRPCHook``) and
``mqadmin`` (``updateAclConfig``, ``deleteAccessConfig``, ``clusterAclConfigVersion``,
``getAccessConfigSubCommand``), each run against ``rocketstore serve`` and against RocketMQ's
Java broker with ``aclEnable=true`` as the control: the answers must be the same.

Needs the Java build (``ROCKETMQ_HOME``); skipped with a reason otherwise. RocketMQ's broker and
``mqadmin`` read ``$ROCKETMQ_HOME/conf/plain_acl.yml`` and ``conf/tools.yml``, so the test builds
its own home (the wrappers copied, the jars shared) instead of touching the build's.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import referee

from .conftest import start_server
from .test_acl import ACL_YML

HOME = os.environ.get("ROCKETMQ_HOME", "")
pytestmark = referee.skip_unless(referee.V4)

TOOLS_YML = "accessKey: rocketmq2\nsecretKey: 12345678\n"


def make_home(root: Path, tools_yml: str = TOOLS_YML, name: str = "rmq-home") -> Path:
    """A RocketMQ home of our own: wrappers copied (they locate the jars through ``classpath``),
    ``conf/plain_acl.yml`` and ``conf/tools.yml`` written here."""
    home = root / name
    (home / "conf").mkdir(parents=True)
    for tool in ("namesrv", "broker", "mqadmin", "java-run", "javac-rmq"):
        shutil.copy2(os.path.join(HOME, tool), home / tool)
    os.symlink(os.path.join(HOME, "classpath"), home / "classpath")
    for name in os.listdir(os.path.join(HOME, "conf")):
        if name.startswith("logback"):
            shutil.copy2(os.path.join(HOME, "conf", name), home / "conf" / name)
    (home / "conf" / "plain_acl.yml").write_text(ACL_YML)
    (home / "conf" / "tools.yml").write_text(tools_yml)
    return home


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """(ours, java) broker addresses, name servers, ACL files and the shared home."""
    from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv

    root = tmp_path_factory.mktemp("acl-java")
    home = make_home(root)
    store = root / "store"
    (store / "conf").mkdir(parents=True)
    (store / "conf" / "plain_acl.yml").write_text(ACL_YML)
    conf = root / "broker.conf"
    conf.write_text("aclEnable=true\nnamesrvAclEnable=true\n")
    classes = root / "classes"
    jobs = ThreadPoolExecutor(3)
    javac = jobs.submit(subprocess.run, [
        "timeout", "180", str(home / "javac-rmq"), "-d", str(classes),
        str(Path(__file__).with_name("java") / "AclClient.java")], capture_output=True)
    ours = start_server(str(store), "--config", str(conf))
    ns = broker = None
    try:
        ns = start_java_namesrv(str(home), str(root / "ns"))
        broker = start_java_broker(str(home), str(root / "jbroker"), ns.addr, "broker-a",
                                   extra={"aclEnable": "true"})
        assert javac.result().returncode == 0, javac.result().stderr
        yield {"home": home, "classes": classes, "root": root,
               "ours": (ours.broker, ours.namesrv, store / "conf" / "plain_acl.yml"),
               "java": (broker.addr, ns.addr, home / "conf" / "plain_acl.yml")}
    finally:
        if broker is not None:
            broker.stop()
        if ns is not None:
            ns.stop()
        jobs.shutdown()
        assert ours.stop() == 0, ours.log()


def run_java_client(b, which: str) -> list[str]:
    _, namesrv, _ = b[which]
    env = dict(os.environ, CP_EXTRA=str(b["classes"]), TOOLS_HEAP="256m",
               HOME=str(b["root"]))
    r = subprocess.run(["timeout", "240", str(b["home"] / "java-run"), "AclClient", namesrv],
                       capture_output=True, text=True, env=env)
    lines = [ln for ln in r.stdout.splitlines()
             if ln.split(" ")[0] in ("SEND", "PULL", "PUSH", "DONE")]
    assert r.returncode == 0 and "DONE" in lines, r.stdout[-3000:] + r.stderr[-3000:]
    return lines


def test_java_clients_with_acl_hook_same_answers(brokers):
    with ThreadPoolExecutor(2) as ex:
        ours, java = ex.map(lambda w: run_java_client(brokers, w), ("ours", "java"))
    assert ours == java
    denied = ("ERR 1 org.apache.rocketmq.acl.common.AclException: No default permission for "
              "topic:topicA, org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm("
              "PlainPermissionManager.java:610)")
    assert ours[:2] == ["SEND allowed SEND_OK", "SEND denied " + denied]
    assert ours[3].startswith("SEND badSignature ERR 1 org.apache.rocketmq.acl.common."
                              "AclException: Check signature failed for accessKey=RocketMQ")
    assert "PULL allowed [from-admin, hello]" in ours
    assert "PUSH allowed [from-admin, hello]" in ours  # heartbeat, rebalance, long polling
    assert any(ln.startswith("PULL groupDenied ERR 1 ") and "group:groupA" in ln for ln in ours)


def mqadmin(b, *args: str, home: Path | None = None) -> str:
    env = dict(os.environ, TOOLS_HEAP="128m", HOME=str(b["root"]))
    env.pop("ROCKETMQ_HOME", None)
    r = subprocess.run(["timeout", "120", str((home or b["home"]) / "mqadmin"), *args],
                       capture_output=True, text=True, env=env)
    return r.stdout + r.stderr


def _normalise(text: str, addr: str, path: Path) -> list[str]:
    text = text.replace(addr, "ADDR").replace(str(path), "FILE")
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "TIME", text)
    text = re.sub(r"PlainAccessConfig@[0-9a-f]+", "PlainAccessConfig@X", text)
    # RocketMQ prints every account's secret key; ours only the asking admin's (README Security,
    # checked in the test below)
    text = re.sub(r"(secretKey\s*: )\S*$", r"\1SECRET", text, flags=re.M)
    return [ln.rstrip() for ln in text.splitlines()
            if ln.strip() and not re.match(r"^(OpenJDK|SLF4J|log4j|WARNING|\s+at |\s+\.\.\.)",
                                           ln)]


def test_mqadmin_acl_commands_same_answers(brokers):
    steps = [("updateAclConfig", "-a", "newuser1", "-s", "secret123", "-t",
              "topicX=PUB,topicY=SUB", "-u", "SUB"),
             ("updateAclConfig", "-a", "short", "-s", "secret123"),
             ("clusterAclConfigVersion",),
             ("getAccessConfigSubCommand",),
             ("updateAclConfig", "-a", "newuser1", "-s", "secret456", "-m", "true"),
             ("deleteAccessConfig", "-a", "newuser1"),
             ("deleteAccessConfig", "-a", "newuser1"),
             ("updateGlobalWhiteAddr", "-g", "10.10.1.*,10.10.2.*"),
             ("clusterAclConfigVersion",)]

    def run(which: str) -> list[list[str]]:
        addr, _, path = brokers[which]
        return [_normalise(mqadmin(brokers, step[0], "-b", addr, *step[1:]), addr, path)
                for step in steps]
    with ThreadPoolExecutor(2) as ex:
        ours, java = ex.map(run, ("ours", "java"))
    assert ours == java
    assert any("success" in ln for ln in ours[0])
    assert any("CODE: 209" in ln for ln in ours[1])
    assert any("newuser1" in ln for ln in ours[3])
    assert any("CODE: 210" in ln for ln in ours[6])
    assert any("FILE" in ln and " 4 " in f" {ln} " for ln in ours[8]), ours[8]  # 2 updates,
    # a delete and a white-list change bumped the counter
    # and the files the two brokers wrote are the same, timestamps aside
    files = [re.sub(r"timestamp: \d+", "timestamp: T", brokers[w][2].read_text())
             for w in ("ours", "java")]
    assert files[0] == files[1]
    assert "10.10.2.*" in files[0] and "newuser1" not in files[0]


def test_mqadmin_with_a_normal_accounts_keys_cannot_manage_the_acl(brokers):
    """mqadmin signing with a normal account's keys (``tools.yml``: RocketMQ): RocketMQ 4.9.7's
    broker lets it make itself admin and prints every secret key; ours refuses both, and the
    admin keys' mqadmin (test above) keeps working."""
    home = make_home(brokers["root"], "accessKey: RocketMQ\nsecretKey: 12345678\n", "user-home")
    addr, _, path = brokers["ours"]
    before = path.read_text()
    out = mqadmin(brokers, "updateAclConfig", "-b", addr, "-a", "RocketMQ", "-s", "12345678",
                  "-m", "true", home=home)
    assert "Need admin permission for request code=50, but accessKey=RocketMQ is not" in out, out
    out = mqadmin(brokers, "getAccessConfigSubCommand", "-b", addr, home=home)
    assert "Need admin permission for request code=54" in out and "rocketmq2" not in out, out
    assert path.read_text() == before
    # the admin's mqadmin sees its own key, every other one masked
    out = mqadmin(brokers, "getAccessConfigSubCommand", "-b", addr)
    keys = re.findall(r"^\s*(accessKey|secretKey)\s*: (\S*)$", out, flags=re.M)
    pairs = dict(zip([v for k, v in keys if k == "accessKey"],
                     [v for k, v in keys if k == "secretKey"]))
    assert pairs["rocketmq2"] == "12345678" and pairs["RocketMQ"] == "***", out
    assert "whatever-secret" not in out
    # the control: RocketMQ's own broker hands every secret key to the same command
    out = mqadmin(brokers, "getAccessConfigSubCommand", "-b", brokers["java"][0], home=home)
    assert "rocketmq2" in out and "whatever-secret" in out, out


def test_mqadmin_write_perm_on_the_name_server_needs_the_admin_keys(brokers):
    """``namesrvAclEnable=true``: mqadmin's name-server writes (wipeWritePerm, updateKvConfig)
    work with tools.yml's admin keys and are refused with a normal account's."""
    home = brokers["root"] / "user-home"
    if not home.exists():
        home = make_home(brokers["root"], "accessKey: RocketMQ\nsecretKey: 12345678\n",
                         "user-home")
    _, ns, _ = brokers["ours"]
    out = mqadmin(brokers, "wipeWritePerm", "-b", "broker-a", "-n", ns, home=home)
    assert "Need admin permission for request code=205" in out, out
    out = mqadmin(brokers, "updateKvConfig", "-s", "ns1", "-k", "k1", "-v", "v1", "-n", ns,
                  home=home)
    assert "Need admin permission for request code=100" in out, out
    out = mqadmin(brokers, "wipeWritePerm", "-b", "broker-a", "-n", ns)
    assert re.search(r"wipe write perm of broker\[broker-a\] in name server\[.*\] OK", out,
                     re.I), out
    out = mqadmin(brokers, "addWritePerm", "-b", "broker-a", "-n", ns)
    assert "OK" in out, out
    out = mqadmin(brokers, "updateKvConfig", "-s", "ns1", "-k", "k1", "-v", "v1", "-n", ns)
    assert "success" in out.lower(), out
