"""RocketMQ 4.9.7's own broker opens a store rocketstore wrote with ConsumeQueue-ext units and
SQL92 bitmaps, and answers tag and SQL92 pulls from it (tags come from our ext units)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.state.filters import ConsumerFilterRegistry

pytestmark = pytest.mark.interop

SETTINGS = {"enablePropertyFilter": "true", "enableCalcFilterBitMap": "true",
            "enableConsumeQueueExt": "true", "mappedFileSizeCommitLog": "131072",
            "mappedFileSizeConsumeQueue": "6000", "mappedFileSizeConsumeQueueExt": "4096",
            "maxHashSlotNum": "100", "maxIndexNum": "400"}
SQL = "n > 40 AND color = 'red'"


def write_store(root: str) -> tuple[list[str], list[str]]:
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=131072,
                      mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400,
                      enable_consume_queue_ext=True, mapped_file_size_consume_queue_ext=4096)
    reg = ConsumerFilterRegistry(os.path.join(root, "config"))
    reg.register("Ours", "G_sql", SQL, "SQL92", 1)
    time.sleep(0.01)
    tagged, selected = [], []
    with MessageStore(cfg) as store:
        store.set_filter_bitmap_source(reg.bitmaps)
        for i in range(80):
            color = "red" if i % 3 == 0 else "blue"
            tag = "TagA" if i % 4 == 0 else "TagB"
            store.put_message(Message(topic="Ours", body=b"o%d" % i, tags=tag, queue_id=i % 2,
                                      properties={"n": str(i), "color": color}))
            if tag == "TagA":
                tagged.append(f"o{i}")
            if i > 40 and color == "red":
                selected.append(f"o{i}")
        assert store.wait_dispatched(5)
    reg.persist()
    with open(os.path.join(root, "config", "topics.json"), "w") as fh:
        json.dump({"topicConfigTable": {"Ours": {
            "topicName": "Ours", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}},
            "dataVersion": {"counter": 1, "timestamp": int(time.time() * 1000)}}, fh)
    return sorted(tagged), sorted(selected)


def test_java_broker_serves_a_store_we_wrote(tmp_path):
    from tests.cluster.java_rocketmq import rocketmq_home, start_java_broker, start_java_namesrv

    home = rocketmq_home()
    classes = tmp_path / "classes"
    classes.mkdir()
    java = Path(__file__).with_name("java")
    subprocess.run(["timeout", "180", os.path.join(home, "javac-rmq"), "-d", str(classes),
                    str(java / "ReadStoreClient.java"), str(java / "BrokerVersions.java")],
                   check=True, capture_output=True)
    tagged, selected = write_store(str(tmp_path / "broker" / "store"))
    ns = start_java_namesrv(home, str(tmp_path / "ns"))
    broker = None
    try:
        broker = start_java_broker(home, str(tmp_path / "broker"), ns.addr, "broker-j", extra=SETTINGS)
        env = dict(os.environ, CP_EXTRA=str(classes), TOOLS_HEAP="256m", HOME=str(tmp_path))
        r = subprocess.run(["timeout", "240", os.path.join(home, "java-run"), "ReadStoreClient",
                            ns.addr, "Ours", "TagA", SQL], capture_output=True, text=True, env=env)
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and "DONE" in lines, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(ln[4:] for ln in lines if ln.startswith("TAG ")) == tagged
    assert sorted(ln[4:] for ln in lines if ln.startswith("SQL ")) == selected
