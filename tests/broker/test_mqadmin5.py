"""RocketMQ 5.3.3's own ``mqadmin`` against a Java 5.3.3 broker and against ``rocketstore serve``:
the everyday commands of round 2 plus 5.x's (``getBrokerConfig``, ``updateBrokerConfig``,
``queryMsgByUniqueKey``, ``consumerProgress`` of a POP group, ``setConsumeMode`` PULL/POP,
``cleanUnusedTopic``).

Both brokers are filled the same way (``test_mqadmin.fill``: a topic, ten keyed messages, a
producer and a consumer group online, committed offsets; plus a POP group that popped four
messages and acked two). Every command runs on both through ``java/AdminBatch.java`` (RocketMQ's
``MQAdminStartup.main0``, many commands in one JVM: one JVM per broker instead of one per
command), in the same order (read-only commands, then each change and a command that reads it
back). Each row of ``COMMANDS`` says how ours must match Java's output: ``same`` (identical once
addresses, ids, times and numbers are masked), ``header`` (the same first line, for listings
whose rows hold each broker's own system topics and groups), ``keys`` (every ``key:``/``key=``
Java prints, ours prints), or a documented difference in ``DIFFERENCES`` (README's table).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import referee

from . import admin_wire as w
from .conftest import start_server
from .test_mqadmin import TOPIC, fill, shape

pytestmark = [referee.skip_unless(referee.V5), pytest.mark.interop]

POP_GROUP = "OpsPopCG"
NEW_TOPIC = "OpsNewTopic"

# getBrokerConfig: keys both print (ours prints the ~100 it reads, Java every field of its config
# classes, ~400); the first six hold the same values on both brokers here
BROKER_KEYS = ["brokerName", "brokerClusterName", "flushDiskType", "autoCreateTopicEnable",
               "recallMessageEnable", "litePullMessageEnable", "listenPort", "fileReservedTime",
               "deleteWhen", "storePathRootDir", "mappedFileSizeCommitLog", "maxMessageSize",
               "brokerIP1", "namesrvAddr", "timerWheelEnable", "longPollingEnable",
               "messageDelayLevel", "storeReplyMessageEnable"]
SAME_VALUE = BROKER_KEYS[:6]

# name -> (mqadmin arguments, how ours must match Java's output); run in this order
COMMANDS: dict[str, tuple[str, str]] = {
    "topicList": ("topicList -n {ns}", f"contains:^{TOPIC}$"),
    "topicListCluster": ("topicList -n {ns} -c DefaultCluster", "header"),
    "topicStatus": ("topicStatus -n {ns} -t " + TOPIC, "same"),
    "topicRoute": ("topicRoute -n {ns} -t " + TOPIC, "same"),
    "brokerStatus": ("brokerStatus -n {ns} -b {broker}", "keys"),
    "clusterList": ("clusterList -n {ns}", "same"),
    "queryMsgById": ("queryMsgById -n {ns} -t " + TOPIC + " -i {offset_msg_id}", "fields"),
    "queryMsgByKey": ("queryMsgByKey -n {ns} -t " + TOPIC + " -k key3", "same"),
    "queryMsgByUniqueKey": ("queryMsgByUniqueKey -n {ns} -t " + TOPIC + " -i {msg_id}", "fields"),
    "queryMsgByOffset": ("queryMsgByOffset -n {ns} -t " + TOPIC + " -b broker-a -i 0 -o 1",
                         "fields"),
    "consumerProgressGroup": ("consumerProgress -n {ns} -g OpsCG", "same"),
    "consumerProgressPop": ("consumerProgress -n {ns} -g " + POP_GROUP, "same"),
    "consumerProgress": ("consumerProgress -n {ns}", "header"),
    "consumerConnection": ("consumerConnection -n {ns} -g OpsCG", "same"),
    "producerConnection": ("producerConnection -n {ns} -g OpsPG -t " + TOPIC, "same"),
    "getBrokerConfig": ("getBrokerConfig -n {ns} -b {broker}", "config:" + ",".join(BROKER_KEYS)),
    "queryCq": ("queryCq -n {ns} -t " + TOPIC + " -q 0 -i 1 -c 3 -b {broker} -g OpsCG", "cq"),
    "getNamesrvConfig": ("getNamesrvConfig -n {ns}", "config:kvConfigPath,listenPort,orderMessageEnable"),
    # changes, each followed by what reads it back
    "updateBrokerConfig": ("updateBrokerConfig -n {ns} -b {broker} -k fileReservedTime -v 73",
                           "same"),
    "getBrokerConfigAfter": ("getBrokerConfig -n {ns} -b {broker}",
                             r"contains:fileReservedTime\s*=\s*73\b"),
    "updateTopic": ("updateTopic -n {ns} -b {broker} -t " + NEW_TOPIC + " -r 2 -w 2", "same"),
    "topicRouteNew": ("topicRoute -n {ns} -t " + NEW_TOPIC, "same"),
    "updateSubGroup": ("updateSubGroup -n {ns} -b {broker} -g OpsNewCG -r 3", "same"),
    "setConsumeModePop": ("setConsumeMode -n {ns} -b {broker} -t " + TOPIC
                          + " -g OpsModeCG -m POP -q 8", "same"),
    "setConsumeModePull": ("setConsumeMode -n {ns} -b {broker} -t " + TOPIC
                           + " -g OpsModeCG -m PULL", "same"),
    "resetOffsetByTime": ("resetOffsetByTime -n {ns} -g OpsCG -t " + TOPIC + " -s 0", "same"),
    "wipeWritePerm": ("wipeWritePerm -n {ns} -b broker-a", "same"),
    "addWritePerm": ("addWritePerm -n {ns} -b broker-a", "same"),
    "updateKvConfig": ("updateKvConfig -n {ns} -s ORDER_TOPIC_CONFIG -k " + NEW_TOPIC
                       + " -v broker-a:2", "same"),
    "deleteKvConfig": ("deleteKvConfig -n {ns} -s ORDER_TOPIC_CONFIG -k " + NEW_TOPIC, "same"),
    "updateOrderConfPut": ("updateOrderConf -n {ns} -t " + NEW_TOPIC + " -v broker-a:2 -m put",
                           "same"),
    "updateOrderConfGet": ("updateOrderConf -n {ns} -t " + NEW_TOPIC + " -m get", "same"),
    "updateOrderConfDelete": ("updateOrderConf -n {ns} -t " + NEW_TOPIC + " -m delete", "same"),
    "updateNamesrvConfig": ("updateNamesrvConfig -n {ns} -k orderMessageEnable -v true", "same"),
    "deleteSubGroup": ("deleteSubGroup -n {ns} -b {broker} -g OpsNewCG", "same"),
    "deleteTopic": ("deleteTopic -n {ns} -c DefaultCluster -t " + NEW_TOPIC, "same"),
    "cleanUnusedTopic": ("cleanUnusedTopic -n {ns} -b {broker}", "same"),
    "topicListAfter": ("topicList -n {ns}", "lacks:" + NEW_TOPIC),
}
# documented differences (README): what ours prints less than Java's
DIFFERENCES = {
    "getBrokerConfig": "ours prints the keys it reads (about 100), Java every field of its "
                       "BrokerConfig, MessageStoreConfig and Netty configs (about 400)",
    "getNamesrvConfig": "ours prints kvConfigPath, orderMessageEnable and listenPort, Java every "
                        "field of its NamesrvConfig and Netty configs (about 40)",
}


def _pop_some(broker: str) -> w.HeldClient:
    """The POP group (online, as a 5.x push consumer in POP mode: its heartbeat makes its retry
    topic) pops four messages and acks two."""
    held = w.HeldClient(broker, "127.0.0.1@pop", consumer_groups=[w.consumer_data(POP_GROUP, TOPIC)])
    assert held.heartbeat().code == 0
    r = w.call(broker, 200050, {"consumerGroup": POP_GROUP, "topic": TOPIC, "queueId": 0,
                                "maxMsgNums": 4, "invisibleTime": 300000, "pollTime": 0,
                                "bornTime": int(time.time() * 1000), "initMode": 1,
                                "expType": "TAG", "exp": "*", "order": "false"})
    assert r.code == 0, r.remark
    fields = r.ext_fields
    start = int(fields["startOffsetInfo"].split()[2])
    for off in (start, start + 1):
        extra = " ".join(str(v) for v in (start, fields["popTime"], fields["invisibleTime"],
                                          fields["reviveQid"], 0, "broker-a", 0, off))
        a = w.call(broker, 200051, {"consumerGroup": POP_GROUP, "topic": TOPIC, "queueId": 0,
                                    "extraInfo": extra, "offset": off})
        assert a.code == 0, a.remark
    return held


def run_batch(home: str, classes: str, tmp, name: str, values: dict) -> dict[str, str]:
    lines = ["\t".join([k, *args.format(**values).split()]) for k, (args, _) in COMMANDS.items()]
    script = tmp / f"{name}.cmds"
    script.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, CP_EXTRA=classes, TOOLS_HEAP="192m", HOME=str(tmp))
    r = subprocess.run(["timeout", "300", os.path.join(home, "java-run"), "AdminBatch",
                        str(script)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out, cur, last = {}, None, ""
    for ln in r.stdout.splitlines():
        if ln.startswith("=== "):
            cur = None if ln.startswith("=== end") else ln[4:]
            if cur is None:
                print(name, last, ln[8:])
            last = ln[4:] if cur else last
            if cur:
                out[cur] = []
        elif cur is not None and ln.strip() and not re.match(r"^(OpenJDK|SLF4J|log4j|WARNING)", ln):
            out[cur].append(ln)
    return {k: "\n".join(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    from tests.cluster.java_rocketmq import start_java_broker, start_java_namesrv

    home = referee.home(referee.V5)
    base = tmp_path_factory.mktemp("mqadmin5")
    classes = base / "classes"
    src = os.path.join(os.path.dirname(__file__), "java", "AdminBatch.java")
    r = subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes), src],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    got: dict[str, dict[str, str]] = {}
    ns = start_java_namesrv(home, str(base / "ns"))
    broker = srv = None
    clients = []
    try:
        broker = start_java_broker(home, str(base / "jbroker"), ns.addr, "broker-a")
        srv = start_server(str(base / "ours"))
        values = {}
        for name, namesrv, addr in (("java", ns.addr, broker.addr),
                                    ("ours", srv.namesrv, srv.broker)):
            t = fill(name, namesrv, addr)
            clients += [t.held, _pop_some(addr)]
            values[name] = {"ns": namesrv, "broker": addr, "msg_id": t.sent[0].msg_id,
                            "offset_msg_id": t.sent[0].offset_msg_id}
        with ThreadPoolExecutor(2) as pool:  # the two batches side by side
            futures = {name: pool.submit(run_batch, home, str(classes), base, name, v)
                       for name, v in values.items()}
            got = {name: f.result() for name, f in futures.items()}
    finally:
        for c in clients:
            c.close()
        if broker is not None:
            broker.stop()
        ns.stop()
        if srv is not None:
            assert srv.stop() == 0, srv.log()
    for k in COMMANDS:
        print(f"===== {k}\n--- java\n{got['java'].get(k)}\n--- ours\n{got['ours'].get(k)}")
    return got


def failed(out: str) -> bool:
    out = re.sub(r"MessageTrack \[.*?\]", "", out, flags=re.S)  # a group's track may fail alone
    return "Exception" in out or "command failed" in out or "not supported" in out


def keys(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^\s*([A-Za-z_][\w.]*)\s*[:=]", text, re.M)}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_mqadmin5_ours_answers_as_java(outputs, name):
    java, ours = outputs["java"].get(name, ""), outputs["ours"].get(name, "")
    how = COMMANDS[name][1]
    assert not failed(java), f"control failed: {java}"
    assert not failed(ours), ours
    if how == "same":
        assert shape(ours) == shape(java)
    elif how == "header":
        assert shape(ours)[:1] == shape(java)[:1]
    elif how == "keys":
        assert keys(java) <= keys(ours), sorted(keys(java) - keys(ours))
    elif how == "fields":
        fields = lambda s: [ln.split(":")[0] for ln in  # noqa: E731
                            re.sub(r"MessageTrack \[.*", "", s, flags=re.S).splitlines()
                            if re.match(r"^[A-Z][\w ]+:", ln)]
        assert fields(ours) == fields(java)
    elif how == "cq":
        masked = lambda s: [ln for ln in shape(s) if "tagsCode" not in ln]  # noqa: E731
        assert masked(ours) == masked(java)
    elif how.startswith("config:"):  # a documented difference: the keys named, both print
        conf = lambda s: dict(m.groups() for m in re.finditer(  # noqa: E731
            r"^(\w+)\s*=[ \t]*(.*)$", s, re.M))
        j, o = conf(java), conf(ours)
        want = how[7:].split(",")
        assert set(want) <= set(j) and set(want) <= set(o), sorted(set(want) - set(o))
        if name == "getBrokerConfig":
            assert {k: o[k] for k in SAME_VALUE} == {k: j[k] for k in SAME_VALUE}
    elif how.startswith("contains:"):
        assert re.search(how[9:], ours, re.M) and re.search(how[9:], java, re.M), how
    elif how.startswith("lacks:"):
        assert how[6:] not in ours and how[6:] not in java
