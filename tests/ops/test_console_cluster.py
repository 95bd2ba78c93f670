"""``rocketstore console --namesrv`` over a mixed cluster: one of our brokers and RocketMQ
4.9.7's own Java broker, registered at our name server. The console must show both brokers and
merge each topic's queues, groups and searches across them. Needs the Java build
(``ROCKETMQ_HOME``); skips visibly without it."""
from __future__ import annotations

import json
import urllib.error
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("starlette")
from rocketstore.client import Producer, PullConsumer  # noqa: E402

from ..broker.conftest import free_port  # noqa: E402
from ..cluster.conftest import start_cluster_broker, start_namesrv, wait_for  # noqa: E402
from ..cluster.java_rocketmq import rocketmq_home, start_java_broker  # noqa: E402
from .test_console_cli import get_json  # noqa: E402


@pytest.mark.timeout(300)
def test_console_of_a_cluster_with_a_java_broker(tmp_path, request):
    home = rocketmq_home()
    ns = start_namesrv()
    ours = java = console = None
    try:
        ours = start_cluster_broker(str(tmp_path), ns.addr, "broker-py")
        java = start_java_broker(home, str(tmp_path / "jb"), ns.addr, "broker-java")
        assert wait_for(lambda: len(get_cluster(ns.addr)) == 2, timeout=60)
        for addr in (ours.broker, java.addr):  # the topic on both brokers (mqadmin updateTopic)
            create_topic(ns.addr, addr, "Mixed", 2)
        assert wait_for(lambda: route_brokers(ns.addr, "Mixed") == {"broker-py", "broker-java"},
                        timeout=60)
        t0 = int(time.time() * 1000)
        with Producer("mixed-pg", ns.addr) as p:
            sent = [p.send("Mixed", f"mixed {i}".encode(), keys=[f"mx{i}"]) for i in range(16)]
        t1 = int(time.time() * 1000)
        by_broker: dict[str, int] = {}
        for r in sent:
            name = r.message_queue.broker_name
            by_broker[name] = by_broker.get(name, 0) + 1
        assert set(by_broker) == {"broker-py", "broker-java"}  # the producer spread them
        with PullConsumer("mixed-readers", ns.addr) as c:
            for r in sent[:2]:
                c.commit_offset("Mixed", r.message_queue.queue_id, r.queue_offset + 1,
                                broker_name=r.message_queue.broker_name)
        port = free_port()
        console = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "console",
                                    "--namesrv", ns.addr, "--port", str(port), "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert json.loads(console.stdout.readline() or "{}").get("cluster") == ns.addr
        base = f"http://127.0.0.1:{port}"
        for attempt in range(3):  # a Java broker just started on a loaded machine may answer
            try:                  # its runtime info after the console's call timed out
                o = get_json(base + "/api/overview")
                break
            except urllib.error.HTTPError:
                if attempt == 2:
                    console.terminate()
                    raise AssertionError("overview failed: " + console.communicate(timeout=20)[1][-3000:])
                time.sleep(2)
        assert {b["name"]: b["addr"] for b in o["brokers"]} == {"broker-py": ours.broker,
                                                               "broker-java": java.addr}
        assert {b["name"]: b["put_total"] for b in o["brokers"]} == by_broker
        topic = {t["topic"]: t for t in get_json(base + "/api/topics")}["Mixed"]
        stored: dict[str, int] = {}
        for q in topic["queues"]:
            stored[q["broker_name"]] = stored.get(q["broker_name"], 0) + q["max_offset"]
        assert stored == by_broker and topic["messages"] == 16
        found = get_json(base + "/api/messages?mode=key&topic=Mixed&key=mx7")
        assert [(m["body_preview"], m["msg_id"]) for m in found] == \
            [("mixed 7", sent[7].offset_msg_id)]
        window = get_json(base + f"/api/messages?mode=time&topic=Mixed&begin={t0}&end={t1}&max=100")
        assert sorted(m["body_preview"] for m in window) == sorted(f"mixed {i}" for i in range(16))
        for r in (sent[0], sent[1]):  # one id per broker, each answered by its own broker
            got = get_json(base + f"/api/messages?mode=id&msg_id={r.offset_msg_id}")
            assert [m["store_host"] for m in got] == \
                [ours.broker if r.message_queue.broker_name == "broker-py" else java.addr]
        assert wait_for(lambda: {g["group"]: g for g in get_json(base + "/api/groups")}
                        .get("mixed-readers"), timeout=20)  # the Java broker persists offsets late
        if os.environ.get("ROCKETSTORE_SCREENSHOTS"):
            page = request.getfixturevalue("browser").new_page(viewport={"width": 1360,
                                                                         "height": 900})
            page.goto(base + "/")
            page.wait_for_function(
                "() => +document.getElementById('tps-chart').dataset.points >= 1", timeout=30_000)
            page.screenshot(path=os.path.join(os.environ["ROCKETSTORE_SCREENSHOTS"],
                                              "console-cluster.png"), full_page=True)
            page.close()
    finally:
        if console is not None:
            console.send_signal(signal.SIGTERM)
            console.communicate(timeout=30)
        for b in (java, ours):
            if b is not None:
                b.stop()
        ns.stop()
    assert console.returncode == 0


def create_topic(namesrv: str, addr: str, topic: str, queues: int) -> None:
    from rocketstore.client.admin import AdminClient
    from rocketstore.remoting.codes import RequestCode
    with AdminClient(namesrv=namesrv) as admin:
        admin.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                   {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
                    "writeQueueNums": queues, "perm": 6, "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": 0, "order": "false"})


def route_brokers(namesrv: str, topic: str) -> set:
    try:
        with Producer("route-probe", namesrv) as p:
            return {q.broker_name for q in p.queues(topic)}
    except Exception:  # no route yet
        return set()


def get_cluster(namesrv: str) -> list:
    from rocketstore.client.admin import AdminClient
    with AdminClient(namesrv=namesrv) as admin:
        return admin.brokers()
