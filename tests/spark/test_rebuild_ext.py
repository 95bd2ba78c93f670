"""Rebuild reproduces ConsumeQueue-ext files (with SQL92 bitmaps) byte for byte, local and Spark."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from rocketstore import Message, MessageStore
from rocketstore.broker.state.filters import ConsumerFilterRegistry
from rocketstore.spark.rebuild_job import rebuild
from rocketstore.store.verify import verify_store

from ..conftest import small_config
from .test_rebuild import tree

pytestmark = pytest.mark.spark


def build_ext_store(root):
    cfg = small_config(root, enable_consume_queue_ext=True, mapped_file_size_consume_queue_ext=2048)
    reg = ConsumerFilterRegistry(os.path.join(root, "config"))
    reg.register("T", "g1", "a > 50", "SQL92", 1)
    reg.register("T", "g2", "color = 'red' OR a < 3", "SQL92", 1)
    reg.register("U", "g3", "a IS NOT NULL", "SQL92", 1)
    time.sleep(0.01)  # messages are stored after the groups were born
    with MessageStore(cfg) as store:
        store.set_filter_bitmap_source(reg.bitmaps)
        for i in range(300):
            props = {"a": str(i)} if i % 7 else {"color": "red" if i % 2 else "blue"}
            store.put_message(Message(topic="T" if i % 3 else "U", body=b"b%d" % i, tags="t%d" % (i % 4),
                                      properties=props, queue_id=i % 2))
        store.put_message(Message(topic="V", body=b"no filters here", queue_id=0))
        assert store.wait_dispatched(5)
    reg.persist()
    return cfg


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_rebuild_reproduces_ext_files(engine, spark, tmp_path):
    root = tmp_path / "s"
    cfg = build_ext_store(root)
    ext_before, cq_before = tree(root / "consumequeue_ext"), tree(root / "consumequeue")
    assert any(len(v) and k.startswith("T") for k, v in ext_before.items())
    assert len([k for k in ext_before if k.startswith(os.path.join("T", "0"))]) > 1  # rolled over
    shutil.rmtree(root / "consumequeue_ext")
    shutil.rmtree(root / "consumequeue")
    rebuild(str(root), engine=engine, cfg=cfg, spark=spark if engine == "spark" else None)
    assert tree(root / "consumequeue_ext") == ext_before
    assert tree(root / "consumequeue") == cq_before
    report = verify_store(str(root))
    assert report.ok, report
