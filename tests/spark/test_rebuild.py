"""Rebuild of ConsumeQueue and IndexFile: byte identity with the reput, answers, lock, CLI."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from rocketstore import GetStatus, MessageStore, StoreConfig, StoreLockedError
from rocketstore.cli import main
from rocketstore.spark.rebuild_job import rebuild

from .spark_stores import FIXTURE, build_store, copy_fixture, segment_paths

pytestmark = pytest.mark.spark


def tree(path) -> dict[str, bytes]:
    out = {}
    for r, _ds, fs in os.walk(path):
        for n in fs:
            p = os.path.join(r, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = fh.read()
    return out


def index_contents(path) -> list[bytes]:
    """Index files in name (= creation) order; names are times and may differ."""
    return [open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))]


def derived_snapshot(root):
    return tree(os.path.join(root, "consumequeue")), index_contents(os.path.join(root, "index"))


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_rebuild_is_byte_identical_to_reput(engine, spark, tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=700)
    assert len(segment_paths(root)) >= 3
    cq_before, ix_before = derived_snapshot(root)
    assert len(ix_before) >= 2  # rolled index files
    assert {m.sys_flag & 0xC for m in built["expected"].values()} == {0, 0x4, 0x8, 0xC}
    # damage the derived files so that a no-op would fail the comparison
    shutil.rmtree(root / "index")
    some_cq = next(iter(cq_before))
    with open(root / "consumequeue" / some_cq, "r+b") as fh:
        fh.write(b"\xff" * 20)
    res = rebuild(str(root), engine=engine, cfg=built["cfg"], spark=spark if engine == "spark" else None,
                  split_size=8 * 1024)
    assert res.records == 700 and res.index_files == len(ix_before)
    assert res.ranges > res.segments  # segments were split at record boundaries
    cq_after, ix_after = derived_snapshot(root)
    assert cq_after == cq_before
    assert ix_after == ix_before
    assert not os.path.exists(root / ".rebuild-staging")


def test_rebuild_matches_rocketmq_written_files(spark, tmp_path):
    manifest = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    c = manifest["config"]
    root = copy_fixture(tmp_path / "rmq")
    cq_before, ix_before = derived_snapshot(root)
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=c["mappedFileSizeCommitLog"],
                      mapped_file_size_consume_queue=c["mappedFileSizeConsumeQueue"],
                      max_hash_slot_num=c["maxHashSlotNum"], max_index_num=c["maxIndexNum"],
                      message_delay_level=c["messageDelayLevel"])
    res = rebuild(str(root), engine="spark", cfg=cfg, spark=spark)
    assert res.records == 600
    cq_after, ix_after = derived_snapshot(root)
    assert cq_after == cq_before
    assert ix_after == ix_before
    assert len(ix_after) == 12


def test_rebuild_from_nothing_answers_like_the_original(spark, tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=500)
    cfg = built["cfg"]

    def answers():
        out = {}
        with MessageStore(cfg) as store:
            for topic in ("TopicA", "TopicB", "日志主题", "SCHEDULE_TOPIC_XXXX"):
                for q in range(18):
                    g = store.get_message("g", topic, q, 0, 1000)
                    out[("get", topic, q)] = (g.status, g.max_offset, g.min_offset,
                                              [m.commitlog_offset for m in g.messages])
                for key in ("grp-3", "dup", "key-11", "key-499", "nope"):
                    r = store.query_message(topic, key, max_num=64)
                    out[("query", topic, key)] = sorted(m.commitlog_offset for m in r.messages)
            for off in built["offsets"][:50]:
                m = store.look_message_by_offset(off)
                out[("uniq", off)] = sorted(x.commitlog_offset for x in
                                            store.query_message(m.topic, m.uniq_key).messages)
        return out

    before = answers()
    assert any(v[0] is GetStatus.FOUND for k, v in before.items() if k[0] == "get")
    assert before[("query", "TopicA", "dup")]
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    rebuild(str(root), engine="spark", cfg=cfg, spark=spark)
    assert answers() == before


def test_rebuild_refuses_an_open_store(tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=30)
    with MessageStore(built["cfg"]):
        with pytest.raises(StoreLockedError, match="open in another process"):
            rebuild(str(root), engine="local", cfg=built["cfg"])
        r = CliRunner().invoke(main, ["rebuild", "--store", str(root), "--engine", "local"])
        assert r.exit_code != 0 and "open in another process" in r.output
    r = CliRunner().invoke(main, ["rebuild", "--store", str(root), "--engine", "local", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["records"] == 30 and out["engine"] == "local"
    with MessageStore(built["cfg"]) as store:
        assert store.get_max_offset_in_queue("TopicA", 0) > 0


def test_demo_step_rebuilds_and_reports(spark, tmp_path):
    from rocketstore.spark import demo_step
    root = tmp_path / "demo"
    built = build_store(root, n=200)
    lines = []
    out = demo_step(str(root), spark=spark, echo=lines.append)
    per_topic = {r["topic"]: r["messages"] for r in out["messages_per_topic"]}
    want: dict = {}
    for m in built["expected"].values():
        want[m.topic] = want.get(m.topic, 0) + 1
    assert per_topic == want
    counts: dict = {}
    for m in built["expected"].values():
        for k in m.keys:
            counts[k] = counts.get(k, 0) + 1
    want_top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert [(r["key"], r["messages"]) for r in out["top_keys"]] == want_top
    assert out["rebuild"]["records"] == 200
    assert any("messages per topic" in line for line in lines)
    json.dumps(out)  # printable / JSON-ready


def test_rebuild_stops_on_corruption_and_keeps_the_old_files(spark, tmp_path):
    import struct
    from rocketstore.spark.rebuild_job import RebuildError
    root = tmp_path / "s"
    built = build_store(root, n=300)
    before = derived_snapshot(root)
    victim = sorted(built["offsets"])[20]
    with open(segment_paths(root)[0], "r+b") as fh:
        fh.seek(victim + 4)
        fh.write(struct.pack(">i", 0x0BADBEEF))
    with pytest.raises(RebuildError, match=f"CorruptRecordError: record at offset {victim}"):
        rebuild(str(root), engine="spark", cfg=built["cfg"], spark=spark)
    r = CliRunner().invoke(main, ["rebuild", "--store", str(root), "--engine", "local"])
    assert r.exit_code != 0 and f"record at offset {victim}" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert derived_snapshot(root) == before
    assert not os.path.exists(root / ".rebuild-staging")
