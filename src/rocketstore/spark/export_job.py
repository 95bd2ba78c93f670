"""Export a store's messages to Parquet, partitioned by topic and date, exactly once.

Theory of operation. Every export is a Structured Streaming query over the ``rocketmq``
streaming source into Spark's file sink, with its checkpoint in ``<out>/_checkpoint`` (or
``checkpoint=``). Without ``follow`` the trigger is ``availableNow``: everything confirmed at
the start is exported in limited micro-batches and the query stops; with ``follow`` it polls
every ``interval`` until interrupted. Why streaming even for a one-off export:

* the source's offsets are CommitLog positions journaled *before* each batch runs, and the
  file sink commits each batch's files to ``<out>/_spark_metadata`` *after* they are written;
  a batch interrupted by a crash is replayed with the same offsets on the next run, and files
  of the interrupted attempt are never listed by readers that go through the metadata log
  (``spark.read.parquet(out)``), so no row is lost or duplicated;
* running the same export again only appends what was stored since (incremental).

Rows carry the contract's columns; ``topic`` and ``date`` (UTC day of ``store_timestamp``,
``yyyy-MM-dd``) become the directory partitions ``topic=<t>/date=<d>``. Read back with
``spark.read.parquet(out)`` (partition type inference off, so topic names stay strings).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import RocketStoreError
from .session import get_session

CHECKPOINT_DIR = "_checkpoint"


class ExportError(RocketStoreError):
    """The export query failed (the message names the store problem, e.g. data loss)."""


@dataclass
class ExportResult:
    out: str
    checkpoint: str
    start_offset: int | None = None
    end_offset: int | None = None
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0
    progress: list = field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        return {"out": self.out, "checkpoint": self.checkpoint, "start_offset": self.start_offset,
                "end_offset": self.end_offset, "rows": self.rows, "batches": self.batches,
                "seconds": round(self.seconds, 3)}


def _phy(offset_json) -> int | None:
    if offset_json is None:
        return None
    if isinstance(offset_json, str):
        offset_json = json.loads(offset_json)
    if not isinstance(offset_json, dict) or "phy" not in offset_json:
        return None
    return int(offset_json["phy"])


def checkpointed_offset(checkpoint: str) -> int | None:
    """The CommitLog offset a previous run's checkpoint has committed up to (None if none)."""
    commits = os.path.join(checkpoint, "commits")
    offsets = os.path.join(checkpoint, "offsets")
    if not os.path.isdir(commits):
        return None
    done = sorted((int(n) for n in os.listdir(commits) if n.isdigit()), reverse=True)
    for batch in done:
        path = os.path.join(offsets, str(batch))
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except FileNotFoundError:
            continue
        for line in reversed(lines):
            if line.startswith("{") and '"phy"' in line:
                return _phy(line)
    return None


def _absolute_uri(path: str) -> str:
    """A local path made absolute; a URI (``s3a://…``, ``hdfs://…``) is left alone."""
    return path if "://" in path else os.path.abspath(path)


def plan(root: str, out: str, checkpoint: str | None = None) -> tuple[int, int]:
    """(offset this export starts from, confirmed offset it will reach without ``follow``)."""
    from .segments import confirmed_offset, list_segments
    ck = checkpoint or os.path.join(out, CHECKPOINT_DIR)
    segs = list_segments(os.path.join(root, "commitlog"))
    start = checkpointed_offset(ck)
    if start is None:
        start = segs[0].base if segs else 0
    return start, confirmed_offset(segs)[0]


def export_query(spark, root: str, out: str, *, checkpoint: str | None = None,
                 follow: bool = False, interval: str = "1 second",
                 options: dict | None = None):
    """Start the export streaming query; returns (query, checkpoint dir)."""
    from pyspark.sql import functions as F

    from .commitlog_source import register
    register(spark)
    checkpoint = checkpoint or os.path.join(out, CHECKPOINT_DIR)
    reader = spark.readStream.format("rocketmq")
    for k, v in (options or {}).items():
        if v is not None:
            reader = reader.option(k, str(v))
    df = reader.load(root)
    day = F.floor(F.unix_millis("store_timestamp") / F.lit(86_400_000)).cast("int")
    df = df.withColumn("date", F.date_format(F.date_from_unix_date(day), "yyyy-MM-dd"))
    w = (df.writeStream.format("parquet").partitionBy("topic", "date")
         .option("checkpointLocation", checkpoint).option("path", out)
         .queryName(f"rocketstore-export-{abs(hash((root, out))) % 10**8}"))
    w = w.trigger(processingTime=interval) if follow else w.trigger(availableNow=True)
    return w.start(), checkpoint


def export(root: str, out: str, *, follow: bool = False, spark=None, master: str | None = None,
           checkpoint: str | None = None, interval: str = "1 second",
           max_files_per_trigger: int | None = None, max_records_per_trigger: int | None = None,
           check_crc: bool = False, on_progress: Callable[[int, int], None] | None = None,
           should_stop: Callable[[], bool] | None = None,
           tier_opts: dict | None = None) -> ExportResult:
    """Export ``root`` to Parquet under ``out`` (see module doc).

    ``root`` may be a tier instead of a store (a posix tier's base, ``s3://bucket/prefix``):
    the tier stream (``tier_stream``) reads it, ``tier_opts`` carry its ``objectStore*``
    options (as the tier source takes them). ``on_progress(done_bytes, total_bytes)`` is
    called as batches of a store complete; ``should_stop`` ends a ``follow`` run cleanly
    (Ctrl-C does too).
    """
    from .tier_options import TIER_NAMES, is_tier_path, tier_options
    tier = is_tier_path(root)
    # absolute on the driver: executors of a cluster run in other directories
    root, out = (root if "://" in root else os.path.abspath(root)), _absolute_uri(out)
    checkpoint = _absolute_uri(checkpoint) if checkpoint else checkpoint
    if tier:
        given = {k: v for k, v in (tier_opts or {}).items() if k != "path"}
        tier_options(given, tuple(n for n in TIER_NAMES if n not in ("path", "pushdown")),
                     "export of a tier")
        if max_files_per_trigger is not None:
            raise ValueError("max_files_per_trigger is for a store; a tier takes "
                             "max_records_per_trigger (per queue)")
        opts = {**given, "maxRecordsPerTrigger": max_records_per_trigger}
        first = target = 0
    else:
        if not os.path.isdir(os.path.join(root, "commitlog")):
            raise FileNotFoundError(f"{root}: not a store (no commitlog directory)")
        first, target = plan(root, out, checkpoint)
        opts = {"maxFilesPerTrigger": max_files_per_trigger,
                "maxRecordsPerTrigger": max_records_per_trigger,
                "checkCRC": "true" if check_crc else None}
    spark = spark or get_session(master)
    t0 = time.monotonic()
    q, ck = export_query(spark, root, out, checkpoint=checkpoint, follow=follow,
                         interval=interval, options=opts)
    res = ExportResult(out=out, checkpoint=ck)
    seen = set()
    try:
        while True:
            try:
                done = q.awaitTermination(0.25 if on_progress else 1.0)
            except Exception as exc:  # StreamingQueryException: the query died
                raise ExportError(f"export failed: {_short(exc)}") from exc
            for p in q.recentProgress:
                if p["batchId"] in seen or not p.get("sources"):
                    continue
                seen.add(p["batchId"])
                src = p["sources"][0]
                start, end = _phy(src.get("startOffset")), _phy(src.get("endOffset"))
                if res.start_offset is None:
                    res.start_offset = start if start is not None else first
                if end is not None:
                    res.end_offset = end
                res.rows += int(p.get("numInputRows") or 0)
                if int(p.get("numInputRows") or 0):
                    res.batches += 1
                if on_progress and end is not None:
                    on_progress(end - first, max(target - first, end - first))
            if done:
                break
            if follow and should_stop and should_stop():
                q.stop()
                break
    except KeyboardInterrupt:
        q.stop()
    finally:
        if q.isActive:
            q.stop()
    exc = q.exception()
    if exc is not None:
        raise ExportError(f"export failed: {_short(exc)}") from exc
    res.seconds = time.monotonic() - t0
    return res


def _short(exc) -> str:
    from .session import short_error
    return short_error(exc)
