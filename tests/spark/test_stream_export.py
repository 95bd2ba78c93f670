"""Streaming source and Parquet export: batches, limits, crash + replay, truncation."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rocketstore import Message, MessageStore
from rocketstore.spark.export_job import ExportError, checkpointed_offset, export
from rocketstore.spark.segments import confirmed_offset, list_segments

from .spark_stores import append_raw, build_store, segment_paths

pytestmark = pytest.mark.spark


def exported(spark, out) -> list[tuple[int, str, str]]:
    """(commitlog_offset, topic, date) of every exported row, through the sink's metadata log."""
    df = spark.read.parquet(str(out))
    return sorted((r.commitlog_offset, r.topic, r.date)
                  for r in df.select("commitlog_offset", "topic", "date").collect())


def test_available_now_in_limited_batches_then_incremental(spark, tmp_path):
    root, out = tmp_path / "s", tmp_path / "out"
    built = build_store(root, n=300)
    nseg = len(segment_paths(root))
    assert nseg >= 3
    res = export(str(root), str(out), spark=spark, max_files_per_trigger=1)
    assert res.rows == 300 and res.batches == nseg
    got = exported(spark, out)
    assert [o for o, _, _ in got] == sorted(built["offsets"])
    by_off = {m.commitlog_offset: m for m in built["expected"].values()}
    for off, topic, date in got:
        m = by_off[off]
        assert topic == m.topic
        assert date == time.strftime("%Y-%m-%d", time.gmtime(m.store_timestamp / 1000))
    assert os.path.isdir(out / "topic=TopicA") and os.path.isdir(out / "topic=日志主题")
    # all columns survive the round trip
    cols = set(spark.read.parquet(str(out)).columns)
    assert {"topic", "body", "keys", "properties", "msg_id", "store_timestamp", "date"} <= cols

    # nothing new: a repeated export adds nothing
    again = export(str(root), str(out), spark=spark)
    assert again.rows == 0 and len(exported(spark, out)) == 300
    # new messages: only they are appended
    with MessageStore(built["cfg"]) as store:
        more = [store.put_message(Message("TopicA", b"late %d" % i, keys=["late"])).wrote_offset
                for i in range(25)]
    res = export(str(root), str(out), spark=spark, max_records_per_trigger=10)
    assert res.rows == 25 and res.batches == 3
    assert [o for o, _, _ in exported(spark, out)] == sorted(built["offsets"] + more)


@pytest.mark.crash
def test_crash_between_batches_exports_every_message_once(spark, tmp_path):
    root, out = tmp_path / "s", tmp_path / "out"
    built = build_store(root, n=160)  # four batches of 40: killed at the third, two left
    ck = out / "_checkpoint"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, ROCKETSTORE_SPARK_LOG="error")
    cmd = [sys.executable, "-m", "rocketstore.cli", "export", "--store", str(root), "--out", str(out),
           "--master", "local[1]", "--max-records-per-trigger", "40"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        # kill -9 as soon as batch 2 is planned (offsets/2 written): its files may be half written
        while not os.path.exists(ck / "offsets" / "2"):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "export subprocess made no progress"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    committed = checkpointed_offset(str(ck))
    assert committed is not None and committed < built["max_offset"]
    res = export(str(root), str(out), spark=spark, max_records_per_trigger=40)
    assert res.start_offset is not None and res.start_offset >= committed
    got = [o for o, _, _ in exported(spark, out)]
    assert got == sorted(built["offsets"])  # each message exactly once


def test_truncated_store_fails_loudly(spark, tmp_path):
    root, out = tmp_path / "s", tmp_path / "out"
    build_store(root, n=120)
    export(str(root), str(out), spark=spark)
    segs = list_segments(str(root / "commitlog"))
    end, _ = confirmed_offset(segs)
    # the store loses its last bytes (e.g. an unflushed tail after an OS crash)
    last = segs[-1]
    with open(last.path, "r+b") as fh:
        fh.seek(end - 300 - last.base)
        fh.write(bytes(300))
    with pytest.raises(ExportError, match="DataLossError: .*truncated"):
        export(str(root), str(out), spark=spark)


def test_confirmed_offset_skips_a_record_still_being_copied(tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=50)
    segs = list_segments(str(root / "commitlog"))
    end, _ = confirmed_offset(segs)
    assert end == built["max_offset"]
    # the next record is visible with its header but its body bytes are not all there yet
    from rocketstore.format.message import encode_message, patch_record
    enc = encode_message(Message(topic="T", body=b"payload!" * 8), {}, born_timestamp=1,
                         born_host="1.2.3.4:5", store_host="1.2.3.4:5", max_body_size=1024)
    rec = bytearray(enc.data)
    patch_record(rec, 0, enc.store_ts_pos, 0, end, 123)
    half = bytearray(rec)
    half[90:100] = bytes(10)
    append_raw(root, end, bytes(half))
    assert confirmed_offset(segs)[0] == end
    append_raw(root, end, bytes(rec))
    assert confirmed_offset(segs)[0] == end + len(rec)


def test_stream_limits_and_starting_offset(spark, tmp_path):
    root = tmp_path / "s"
    built = build_store(root, n=90)
    offs = sorted(built["offsets"])
    seen = []

    def collect(df, batch_id):
        seen.append([r.commitlog_offset for r in df.select("commitlog_offset").collect()])

    q = (spark.readStream.format("rocketmq").option("maxRecordsPerTrigger", 25)
         .option("startingOffset", str(offs[10])).load(str(root))
         .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    sizes = [len(b) for b in seen if b]
    assert sizes and max(sizes) <= 25 and sum(sizes) == 80
    assert [o for b in seen for o in b] == offs[10:]
    with pytest.raises(Exception, match="not a record boundary"):
        spark.readStream.format("rocketmq").option("startingOffset", str(offs[10] + 3)) \
            .load(str(root)).writeStream.format("noop") \
            .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True) \
            .start().awaitTermination(60)


def test_follow_exports_messages_written_while_running(spark, tmp_path):
    import threading
    root, out = tmp_path / "s", tmp_path / "out"
    built = build_store(root, n=40)
    stop = threading.Event()
    box: dict = {}

    def run():
        try:
            box["res"] = export(str(root), str(out), spark=spark, follow=True,
                                interval="200 milliseconds", should_stop=stop.is_set)
        except BaseException as exc:  # surfaced below
            box["err"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    offsets = list(built["offsets"])
    with MessageStore(built["cfg"]) as store:  # the store stays open and keeps growing
        for i in range(60):
            offsets.append(store.put_message(Message("Live", b"x" * (i % 300), keys=[f"l{i}"])).wrote_offset)
            if i % 20 == 19:
                time.sleep(0.5)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if len(exported(spark, out)) >= 100:
                    break
            except Exception:  # no committed batch yet: nothing to infer a schema from
                pass
            time.sleep(0.5)
    stop.set()
    t.join(120)
    assert "err" not in box, box.get("err")
    assert [o for o, _, _ in exported(spark, out)] == sorted(offsets)


def test_segments_deleted_before_being_read_fail_loudly(spark, tmp_path):
    root, out = tmp_path / "s", tmp_path / "out"
    built = build_store(root, n=60)
    export(str(root), str(out), spark=spark)
    done = checkpointed_offset(str(out / "_checkpoint"))
    with MessageStore(built["cfg"]) as store:
        for i in range(300):
            store.put_message(Message("More", b"m" * 200, keys=[f"m{i}"]))
    segs = list_segments(str(root / "commitlog"))
    doomed = [s for s in segs if s.base <= done]
    assert doomed and len(doomed) < len(segs)
    for s in doomed:  # retention deleted segments the export had not finished
        os.unlink(s.path)
    with pytest.raises(ExportError, match="deleted before this query read them"):
        export(str(root), str(out), spark=spark)
