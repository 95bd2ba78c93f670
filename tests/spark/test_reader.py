"""The ``rocketmq`` batch data source against what the store itself answers."""
from __future__ import annotations

import json
import os
import struct

import pytest

from rocketstore import MessageStore
from rocketstore.format.hashing import java_hash
from rocketstore.format.message import SCHEDULE_TOPIC, encode_message, Message, parse_host, parse_message_id
from rocketstore.spark.arrow_columns import SCHEMA_DDL
from rocketstore.spark.commitlog_source import CommitLogReader

from .spark_stores import (FIXTURE, append_raw, build_store, config, copy_fixture, segment_paths,
                           v2_record)

pytestmark = pytest.mark.spark


def rows(df) -> list[dict]:
    """Rows as dicts, timestamps as epoch ms (through Arrow, so no time-zone guessing)."""
    out = []
    for r in df.toArrow().to_pylist():
        for k in ("born_timestamp", "store_timestamp"):
            if k in r and r[k] is not None:
                r[k] = round(r[k].timestamp() * 1000)
        if "properties" in r and r["properties"] is not None:
            r["properties"] = dict(r["properties"])
        out.append(r)
    return out


def assert_same(row: dict, m) -> None:
    assert row["topic"] == m.topic
    assert row["queue_id"] == m.queue_id
    assert row["queue_offset"] == m.queue_offset
    assert row["commitlog_offset"] == m.commitlog_offset
    assert row["store_size"] == m.store_size
    assert row["body_crc"] == m.body_crc
    assert row["flag"] == m.flag
    assert row["sys_flag"] == m.sys_flag
    assert row["born_timestamp"] == m.born_timestamp
    assert row["born_host"] == m.born_host
    assert row["store_timestamp"] == m.store_timestamp
    assert row["store_host"] == m.store_host
    assert row["reconsume_times"] == m.reconsume_times
    assert row["prepared_transaction_offset"] == m.prepared_transaction_offset
    assert row["tags"] == m.tags
    assert row["keys"] == m.keys
    assert row["uniq_key"] == m.uniq_key
    assert row["properties"] == m.properties
    assert row["body"] == m.body
    assert row["msg_id"] == m.msg_id
    if m.topic != SCHEDULE_TOPIC:
        assert row["tags_code"] == m.tags_code


def test_reader_equals_look_message_by_offset_with_v2_and_torn_tail(spark, tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=400)
    assert len(segment_paths(root)) >= 3
    expected = dict(built["expected"])
    # a v2 (RocketMQ 5.x) record appended at the end, then read back through the store itself
    end = built["max_offset"]
    rec = v2_record("V2Topic", b"v2-body", end, 0, 1_795_000_000_123, {"KEYS": "v2key"})
    append_raw(root, end, rec)
    with MessageStore(built["cfg"]) as store:
        m = store.look_message_by_offset(end)
        assert m is not None and m.topic == "V2Topic"
        expected[end] = m
        new_end = store.get_max_phy_offset()
    assert new_end == end + len(rec)
    # a torn last record: only the first 60 bytes of a whole record made it to disk
    torn = encode_message(Message(topic="Torn", body=b"t" * 50), {}, born_timestamp=1,
                          born_host="1.2.3.4:5", store_host="1.2.3.4:5", max_body_size=1024).data
    append_raw(root, new_end, bytes(torn[:60]))

    got = rows(spark.read.format("rocketmq").load(str(root)))
    assert [r["commitlog_offset"] for r in got] == sorted(expected)
    for r in got:
        assert_same(r, expected[r["commitlog_offset"]])
    kinds = {(m.sys_flag & 0xC) for m in expected.values()}
    assert kinds == {0, 0x4, 0x8, 0xC}
    assert any(r["born_host"].startswith("[2001:db8::7]") for r in got)
    assert any(r["body"] == b"" for r in got)


def test_ipv6_store_host_and_msg_ids(spark, tmp_path):
    built = build_store(tmp_path / "v6", n=60, store_host="[::1]:10911")
    got = rows(spark.read.format("rocketmq").load(str(tmp_path / "v6")))
    assert len(got) == 60
    for r in got:
        assert_same(r, built["expected"][r["commitlog_offset"]])
        assert len(r["msg_id"]) == 56 and parse_message_id(r["msg_id"])[1] == r["commitlog_offset"]


def test_four_mib_bodies(spark, tmp_path):
    cfg = config(tmp_path / "big", mapped_file_size_commitlog=16 << 20, max_message_size=4 << 20)
    bodies = [os.urandom(4 << 20), b"", os.urandom(1 << 20), os.urandom(4 << 20)]
    with MessageStore(cfg) as store:
        offs = [store.put_message(Message(topic="Big", body=b, keys=["k"])).wrote_offset for b in bodies]
        assert store.wait_dispatched(10)
        expected = {o: store.look_message_by_offset(o) for o in offs}
    got = rows(spark.read.format("rocketmq").load(cfg.store_path_root_dir))
    assert [r["body"] for r in got] == bodies
    for r in got:
        assert_same(r, expected[r["commitlog_offset"]])


def test_rocketmq_written_store(spark, tmp_path):
    manifest = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    root = copy_fixture(tmp_path / "rmq")
    got = {r["commitlog_offset"]: r for r in rows(spark.read.format("rocketmq").load(str(root)))}
    assert len(got) == len(manifest["messages"]) == 600
    for m in manifest["messages"]:
        off = parse_message_id(m["msgId"])[1]
        r = got[off]
        assert r["msg_id"] == m["msgId"]
        assert r["topic"] == m["storedTopic"] and r["queue_id"] == m["storedQueueId"]
        assert r["sys_flag"] == m["sysFlag"] and r["body"].hex() == m["bodyHex"]
        assert r["store_timestamp"] == m["storeTimestamp"]
        assert r["born_timestamp"] == m["bornTimestamp"]
        assert parse_host(r["born_host"]) == parse_host(m["bornHost"])
        assert parse_host(r["store_host"]) == parse_host(m["storeHost"])
        assert r["uniq_key"] == m["uniqKey"] and r["tags"] == m["tags"]
        assert r["keys"] == (m["keys"] or [])
        assert r["properties"] == m["properties"]
        if m["expectedInConsumeQueue"]:
            assert r["queue_offset"] == m["logicsOffset"]
        if m["tags"] and r["topic"] != SCHEDULE_TOPIC:
            assert r["tags_code"] == java_hash(m["tags"])
    # the unclean copy (abort file, pre-allocated all-zero last segment) reads the same rows
    unclean = tmp_path / "rmq-unclean"
    import shutil
    shutil.copytree(FIXTURE / "store-unclean", unclean)
    n = spark.read.format("rocketmq").load(str(unclean)).count()
    assert n == 600


def test_pushdown_prunes_and_filters_exactly(spark, tmp_path):
    root = tmp_path / "p"
    built = build_store(root, n=400)
    segs = segment_paths(root)
    seg_size = os.path.getsize(segs[0])
    all_rows = rows(spark.read.format("rocketmq").schema(
        "topic STRING, commitlog_offset BIGINT, store_timestamp TIMESTAMP").load(str(root)))
    assert len(all_rows) == 400
    lo = seg_size + 10
    df = spark.read.format("rocketmq").load(str(root))
    q = df.where(f"commitlog_offset >= {lo} AND topic = 'TopicB'")
    want = [r["commitlog_offset"] for r in all_rows if r["commitlog_offset"] >= lo and r["topic"] == "TopicB"]
    assert [r["commitlog_offset"] for r in rows(q)] == want
    # IN on offsets and on topics
    pick = [all_rows[5]["commitlog_offset"], all_rows[250]["commitlog_offset"]]
    got = rows(df.where(f"commitlog_offset IN ({pick[0]}, {pick[1]})"))
    assert [r["commitlog_offset"] for r in got] == pick
    assert df.where("topic IN ('TopicA', '日志主题')").count() == sum(r["topic"] in ("TopicA", "日志主题") for r in all_rows)
    assert df.where("topic LIKE 'Topic%'").count() == sum(r["topic"].startswith("Topic") for r in all_rows)
    # timestamps: same answer as Spark's own filtering of the full scan
    mid = sorted(r["store_timestamp"] for r in all_rows)[200]
    n_ts = df.where(f"store_timestamp >= timestamp_millis({mid})").count()
    assert n_ts == sum(r["store_timestamp"] >= mid for r in all_rows)

    # segment pruning, seen on the reader itself (the same object Spark plans with)
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan
    from pyspark.sql.types import _parse_datatype_string  # noqa: F401
    schema = spark.read.format("rocketmq").load(str(root)).schema
    reader = CommitLogReader({"path": str(root)}, schema)
    full = len(reader.partitions())
    reader = CommitLogReader({"path": str(root)}, schema)
    left = list(reader.pushFilters([GreaterThanOrEqual(("commitlog_offset",), 2 * seg_size),
                                    LessThan(("commitlog_offset",), 3 * seg_size)]))
    assert left == []
    parts = reader.partitions()
    assert full == len(segs) and len(parts) == 1 and parts[0].base == 2 * seg_size
    assert built["max_offset"] > 3 * seg_size


def test_split_ranges_and_column_subset(spark, tmp_path):
    root = tmp_path / "split"
    build_store(root, n=250)
    whole = rows(spark.read.format("rocketmq").schema("commitlog_offset BIGINT, topic STRING").load(str(root)))
    df = (spark.read.format("rocketmq").option("splitSize", 4096)
          .schema("commitlog_offset BIGINT, topic STRING").load(str(root)))
    assert df.rdd.getNumPartitions() > len(segment_paths(root))
    assert rows(df) == whole
    with pytest.raises(Exception, match="unknown rocketmq column"):
        spark.read.format("rocketmq").schema("nope STRING").load(str(root)).count()


def test_check_crc_and_corruption_are_loud(spark, tmp_path):
    root = tmp_path / "c"
    built = build_store(root, n=200)
    # flip one body byte of a record in the first (rolled) segment
    victim = next(m for m in built["expected"].values()
                  if len(m.body) > 10 and m.commitlog_offset < 20000 and not m.sys_flag & 0x30)
    body_pos = victim.commitlog_offset + 88  # IPv4 hosts: the body starts at byte 88
    seg = segment_paths(root)[0]
    with open(seg, "r+b") as fh:
        fh.seek(body_pos)
        b = fh.read(1)
        fh.seek(body_pos)
        fh.write(bytes([b[0] ^ 0xFF]))
    assert spark.read.format("rocketmq").load(str(root)).count() == 200
    with pytest.raises(Exception, match=f"record at offset {victim.commitlog_offset}"):
        spark.read.format("rocketmq").option("checkCRC", "true").load(str(root)).count()
    # a broken magic code inside a rolled segment is corruption, not a tail
    with open(seg, "r+b") as fh:
        fh.seek(victim.commitlog_offset + 4)
        fh.write(struct.pack(">i", 0x01020304))
    with pytest.raises(Exception, match=f"record at offset {victim.commitlog_offset}"):
        spark.read.format("rocketmq").load(str(root)).count()


def test_schema_ddl_is_the_contract():
    names = [c.split(" ")[0] for c in SCHEMA_DDL.replace("MAP<STRING, STRING>", "MAP").split(", ")]
    assert names == ["topic", "queue_id", "queue_offset", "commitlog_offset", "store_size",
                     "body_crc", "flag", "sys_flag", "born_timestamp", "born_host",
                     "store_timestamp", "store_host", "reconsume_times",
                     "prepared_transaction_offset", "tags", "tags_code", "keys", "uniq_key",
                     "properties", "body", "msg_id",
                     # CONTRACT §9 / issue 35: after the §5 columns, in this order
                     "broker_name", "user_properties"]


def test_file_rows_have_no_broker_and_user_properties_lack_rocketmq_names(spark, tmp_path):
    from rocketstore.format.message import SYSTEM_PROPERTY_NAMES
    root = tmp_path / "s"
    built = build_store(root, n=40)
    rows = spark.read.format("rocketmq").load(str(root)).select(
        "commitlog_offset", "broker_name", "user_properties").collect()
    assert len(rows) == 40 and all(r.broker_name is None for r in rows)
    for r in rows:
        want = {k: v for k, v in built["expected"][r.commitlog_offset].properties.items()
                if k not in SYSTEM_PROPERTY_NAMES}
        assert r.user_properties == want


def test_store_time_pruning(spark, tmp_path):
    import datetime as dt
    import time as _time
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan
    root = tmp_path / "t"
    built = build_store(root, n=400)
    _time.sleep(1.2)
    cut_ms = int(_time.time() * 1000)
    with MessageStore(built["cfg"]) as store:
        late = [store.put_message(Message("Late", b"z" * 100, keys=["late"])).wrote_offset for _ in range(150)]
    segs = segment_paths(root)
    df = spark.read.format("rocketmq").load(str(root))
    assert df.where(f"store_timestamp >= timestamp_millis({cut_ms})").count() == 150
    assert df.where(f"store_timestamp < timestamp_millis({cut_ms})").count() == 400
    schema = df.schema
    cut = dt.datetime.fromtimestamp(cut_ms / 1000, tz=dt.timezone.utc)
    reader = CommitLogReader({"path": str(root)}, schema)
    list(reader.pushFilters([GreaterThanOrEqual(("store_timestamp",), cut)]))
    parts = reader.partitions()
    first_late_seg = max(s for s in (int(os.path.basename(p)) for p in segs) if s <= min(late))
    assert parts and min(p.base for p in parts) == first_late_seg
    assert len(parts) < len(segs)
    reader = CommitLogReader({"path": str(root)}, schema)
    list(reader.pushFilters([LessThan(("store_timestamp",), cut)]))
    assert max(p.base for p in reader.partitions()) == first_late_seg


def test_small_decoder_windows_give_the_same_rows(spark, tmp_path):
    root = tmp_path / "w"
    cfg = config(root, mapped_file_size_commitlog=16 << 20, max_message_size=4 << 20)
    bodies = [os.urandom(n) for n in (10, 3 << 20, 0, 700, 4 << 20, 5)]
    with MessageStore(cfg) as store:
        for b in bodies:
            store.put_message(Message(topic="W", body=b))
    base = rows(spark.read.format("rocketmq").schema("commitlog_offset BIGINT, body BINARY").load(str(root)))
    small = rows(spark.read.format("rocketmq").option("windowBytes", 1024)
                 .schema("commitlog_offset BIGINT, body BINARY").load(str(root)))
    assert small == base and [r["body"] for r in base] == bodies
