"""A store RocketMQ 4.9.7 wrote with ConsumeQueue-ext units and SQL92 bitmaps: we read it,
filter with its bitmaps exactly as its consumers saw, verify it, and rebuild the same bytes."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from rocketstore import GetStatus, MessageStore, StoreConfig
from rocketstore.broker.state.filters import ConsumerFilterRegistry, ExpressionMessageFilter
from rocketstore.spark.rebuild_job import rebuild
from rocketstore.store.verify import verify_store

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                       "rocketmq-4.9.7-sql92")


def manifest() -> dict:
    with open(os.path.join(FIXTURE, "manifest.json")) as fh:
        return json.load(fh)


def fixture_copy(tmp_path) -> tuple[str, StoreConfig]:
    root = str(tmp_path / "store")
    shutil.copytree(os.path.join(FIXTURE, "store"), root)
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=131072,
                      mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400,
                      enable_consume_queue_ext=True, mapped_file_size_consume_queue_ext=4096)
    return root, cfg


def tree(path) -> dict[str, bytes]:
    out = {}
    for r, _ds, fs in os.walk(path):
        for n in fs:
            with open(os.path.join(r, n), "rb") as fh:
                out[os.path.relpath(os.path.join(r, n), path)] = fh.read()
    return out


def test_sql92_pulls_with_rocketmqs_bitmaps_get_what_its_consumers_got(tmp_path):
    root, cfg = fixture_copy(tmp_path)
    m = manifest()
    reg = ConsumerFilterRegistry(os.path.join(root, "config"))
    reg.load()
    with MessageStore(cfg) as store:
        for group in ("G_hot", "G_red"):
            flt = ExpressionMessageFilter(reg.get("SqlFix", group), reg.bloom)
            assert flt.bloom_valid
            got = []
            for q in range(4):
                off = 0
                while True:
                    g = store.get_message(group, "SqlFix", q, off, 32, message_filter=flt)
                    got += [x.body.decode() for x in g.messages]
                    if g.status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                        break
                    off = g.next_begin_offset
            assert sorted(got) == sorted(m["received"][group])
            assert flt.bitmap_checks > 100  # most units ruled out by RocketMQ's bitmaps alone
        # a tag pull reads the tagsCode from the ext unit, not the address in the unit
        g = store.get_message("t", "SqlFix", 0, 0, 32, "tag1")
        assert g.messages and all(x.tags == "tag1" for x in g.messages)


def test_verify_accepts_the_ext_store(tmp_path):
    root, cfg = fixture_copy(tmp_path)
    report = verify_store(root, cfg)
    assert report.ok, report


def test_rebuild_writes_rocketmqs_ext_and_consume_queue_bytes(tmp_path):
    root, cfg = fixture_copy(tmp_path)
    ext_java, cq_java = tree(os.path.join(root, "consumequeue_ext")), tree(os.path.join(root, "consumequeue"))
    assert len(ext_java) == 4
    shutil.rmtree(os.path.join(root, "consumequeue_ext"))
    shutil.rmtree(os.path.join(root, "consumequeue"))
    rebuild(root, engine="local", cfg=cfg)
    assert tree(os.path.join(root, "consumequeue_ext")) == ext_java
    assert tree(os.path.join(root, "consumequeue")) == cq_java


def test_inspect_lists_ext_streams_and_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from rocketstore.cli import main

    root, _cfg = fixture_copy(tmp_path)
    before = tree(root)
    r = CliRunner().invoke(main, ["inspect", "--store", root, "--json"])
    assert r.exit_code == 0, r.output
    ext = json.loads(r.output)["consumequeue_ext"]
    assert [(e["topic"], e["queue_id"]) for e in ext] == [("SqlFix", q) for q in range(4)]
    assert {e["bitmap_bits"] for e in ext} == {0, 112}  # queue 2 starts with a pre-filter message
    assert tree(root) == before


def test_cli_get_with_sql_selects_like_rocketmqs_consumer(tmp_path):
    from click.testing import CliRunner

    from rocketstore.cli import main

    root, _cfg = fixture_copy(tmp_path)
    m = manifest()
    got = []
    for q in range(4):
        r = CliRunner().invoke(main, ["get", "--store", root, "--topic", "SqlFix", "--queue", str(q),
                                      "--offset", "0", "--max", "200", "--sql", m["groups"]["G_red"],
                                      "--json"])
        assert r.exit_code == 0, r.output
        got += [x["body"] for x in json.loads(r.output)["messages"]]
    assert sorted(got) == sorted(m["received"]["G_red"])
    bad = CliRunner().invoke(main, ["get", "--store", root, "--topic", "SqlFix", "--queue", "0",
                                    "--offset", "0", "--sql", "temp >"])
    assert bad.exit_code != 0 and "Invalid MessageSelector" in bad.output
