"""The ``rocketmq`` Spark data source: a store's CommitLog, one row per message (CONTRACT §5).

    from rocketstore.spark import register
    register(spark)
    df = spark.read.format("rocketmq").load("/path/to/store")
    df = spark.read.format("rocketmq").option("checkCRC", "true").load(root)
    narrow = spark.read.format("rocketmq").schema("topic STRING, store_timestamp TIMESTAMP").load(root)

Theory of operation. ``partitions()`` runs once on the driver: it lists the segments, drops the
ones that pushed filters exclude (by offset range, and by store time using each segment's
first record time, which is monotone in a CommitLog), and cuts segments bigger than
``splitSize`` at record boundaries so a 1 GiB segment keeps every core busy. Partitions are
plain ``SegmentRange`` data. ``read()`` runs on executors: it mmaps its range read-only,
decodes chunks with the shared vectorised decoder, applies the pushed filters as a numpy row
mask and yields Arrow batches of exactly the requested columns (PySpark 4.3 has no column
pruning API, so a narrower user ``.schema(...)`` is how a query avoids building bodies).
It never reads a torn tail (see ``segments``) and raises ``CorruptRecordError`` on real damage.

Pushed filters: ``commitlog_offset`` (=, <, <=, >, >=, IN) and ``topic`` (=, IN, LIKE 'x%')
are applied exactly and not re-checked by Spark; ``store_timestamp`` ranges prune segments
and rows but are also handed back to Spark (timestamp literal conversion is Spark's business).

Options: ``path`` (store root), ``commitlogDir`` (if not ``<root>/commitlog``), ``checkCRC``
(verify body CRCs; a mismatch is corruption), ``splitSize`` (bytes; ``auto``, the default,
aims at three ranges per driver core and walks no boundaries when there are that many segments
already; 0 = one partition per segment), ``windowBytes`` (bytes per decoder call, default
16 MiB), ``messageDelayLevel``.
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Iterable, Iterator

import numpy as np

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, GreaterThan,
                                    GreaterThanOrEqual, In, LessThan, LessThanOrEqual,
                                    StringStartsWith)

from .arrow_columns import ARROW_TYPES, SCHEMA_DDL, arrow_schema, to_batches
from .read_options import ReadOptions, _columns
from .segments import (DEFAULT_WINDOW_BYTES, SegmentRange, auto_split_size, commitlog_dir,
                       first_store_timestamp, list_segments, plan_ranges, read_range, tail_index)

NAME = "rocketmq"


def _ts_ms(v) -> int | None:
    """An instant as epoch ms; None when the literal carries no time zone (not pushed)."""
    if isinstance(v, _dt.datetime) and v.tzinfo is not None:
        return int(v.timestamp() * 1000)
    return None


class RowFilter:
    """The pushed predicates, as bounds usable for pruning and as a numpy row mask."""

    def __init__(self) -> None:
        self.off_lo: int | None = None  # inclusive
        self.off_hi: int | None = None  # exclusive
        self.off_in: set[int] | None = None
        self.topics: set[str] | None = None
        self.prefixes: list[str] = []
        self.ts_lo: int | None = None  # inclusive ms
        self.ts_hi: int | None = None  # inclusive ms

    def _lo(self, v: int) -> None:
        self.off_lo = v if self.off_lo is None else max(self.off_lo, v)

    def _hi(self, v: int) -> None:
        self.off_hi = v if self.off_hi is None else min(self.off_hi, v)

    def push(self, f) -> bool:
        """Take one filter; True if it is applied exactly (Spark need not re-check it)."""
        col = f.attribute[0] if len(f.attribute) == 1 else None
        if col == "commitlog_offset":
            v = getattr(f, "value", None)
            if isinstance(f, In):
                vals = {int(x) for x in f.value if x is not None}
                self.off_in = vals if self.off_in is None else self.off_in & vals
            elif not isinstance(v, int):
                return False
            elif isinstance(f, EqualTo):
                self._lo(v), self._hi(v + 1)
            elif isinstance(f, GreaterThan):
                self._lo(v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self._lo(v)
            elif isinstance(f, LessThan):
                self._hi(v)
            elif isinstance(f, LessThanOrEqual):
                self._hi(v + 1)
            else:
                return False
            return True
        if col == "topic":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                vals = {f.value}
            elif isinstance(f, In) and all(isinstance(x, str) for x in f.value):
                vals = set(f.value)
            elif isinstance(f, StringStartsWith) and isinstance(f.value, str):
                self.prefixes.append(f.value)
                return True
            else:
                return False
            self.topics = vals if self.topics is None else self.topics & vals
            return True
        if col == "store_timestamp":
            ms = _ts_ms(getattr(f, "value", None))
            if ms is None:
                return False
            if isinstance(f, (GreaterThan, GreaterThanOrEqual)):
                self.ts_lo = ms if self.ts_lo is None else max(self.ts_lo, ms)
            elif isinstance(f, (LessThan, LessThanOrEqual)):
                self.ts_hi = ms if self.ts_hi is None else min(self.ts_hi, ms)
            elif isinstance(f, EqualTo):
                self.ts_lo = ms if self.ts_lo is None else max(self.ts_lo, ms)
                self.ts_hi = ms if self.ts_hi is None else min(self.ts_hi, ms)
            return False  # Spark re-checks timestamps
        return False

    @property
    def active(self) -> bool:
        return any(x is not None for x in (self.off_lo, self.off_hi, self.off_in, self.topics,
                                           self.ts_lo, self.ts_hi)) or bool(self.prefixes)

    def offset_bounds(self) -> tuple[int | None, int | None]:
        lo, hi = self.off_lo, self.off_hi
        if self.off_in is not None:
            if not self.off_in:
                return 0, 0
            lo = min(self.off_in) if lo is None else max(lo, min(self.off_in))
            hi = max(self.off_in) + 1 if hi is None else min(hi, max(self.off_in) + 1)
        return lo, hi

    def mask(self, rec) -> np.ndarray | None:
        if not self.active:
            return None
        m = np.ones(len(rec), dtype=bool)
        off = rec.commitlog_offset
        if self.off_lo is not None:
            m &= off >= self.off_lo
        if self.off_hi is not None:
            m &= off < self.off_hi
        if self.off_in is not None:
            m &= np.isin(off, np.fromiter(self.off_in, dtype=np.int64, count=len(self.off_in)))
        ts = rec.store_timestamp
        if self.ts_lo is not None:
            m &= ts >= self.ts_lo - 1  # sub-ms literals: let Spark decide the edge
        if self.ts_hi is not None:
            m &= ts <= self.ts_hi + 1
        if self.topics is not None or self.prefixes:
            allowed = self.topics
            pre = tuple(self.prefixes)
            uniq = set(rec.topic)
            keep = {t for t in uniq if (allowed is None or t in allowed) and all(t.startswith(p) for p in pre)}
            if len(keep) != len(uniq):
                m &= np.fromiter((t in keep for t in rec.topic), dtype=bool, count=len(rec))
        return m


def prune_by_time(segs, ranges: list[SegmentRange], ts_lo, ts_hi) -> list[SegmentRange]:
    """Drop ranges of segments whose records all lie outside ``[ts_lo, ts_hi]``.

    A segment's records are stored between its first record's time and the next segment's
    first record's time. If those first times are not monotone (clock steps), nothing is pruned.
    """
    if ts_lo is None and ts_hi is None:
        return ranges
    last = tail_index(segs)
    firsts = [first_store_timestamp(s) for s in segs[:last + 1]]
    known = [t for t in firsts if t is not None]
    if len(known) != len(firsts) or any(a > b for a, b in zip(known, known[1:])):
        return ranges
    lo_of = {s.base: firsts[i] for i, s in enumerate(segs[:last + 1])}
    hi_of = {s.base: (firsts[i + 1] if i < last else None) for i, s in enumerate(segs[:last + 1])}
    out = []
    for r in ranges:
        lo, hi = lo_of.get(r.base), hi_of.get(r.base)
        if lo is None and r.base not in lo_of:
            continue  # pre-allocated empty segment
        if ts_hi is not None and lo is not None and lo > ts_hi + 1:
            continue
        if ts_lo is not None and hi is not None and hi < ts_lo - 1:
            continue
        out.append(r)
    return out


class PlainCommitLogReader(DataSourceReader):
    """The reader without filter pushdown (``.option("pushdown", "false")``), for sessions that
    keep ``spark.sql.python.filterPushdown.enabled`` off (Spark refuses a reader that implements
    ``pushFilters`` there); Spark then filters the rows itself."""

    def __init__(self, options: dict, schema) -> None:
        self.o = ReadOptions(options)
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)
        self.filter = RowFilter()
        if self.o.topics:  # the topic option: as a pushed topic IN (...)
            self.filter.topics = set(self.o.topics)

    def partitions(self) -> list[SegmentRange]:
        segs = list_segments(self.o.cl_dir)
        lo, hi = self.filter.offset_bounds()
        split = self.o.split_size
        if split is None:  # auto: the driver's cores stand in for the cluster's parallelism
            split = auto_split_size(segs, os.cpu_count() or 2)
        ranges = plan_ranges(segs, lo, hi, split or None)
        ranges = prune_by_time(segs, ranges, self.filter.ts_lo, self.filter.ts_hi)
        # Spark needs at least one partition; an empty range reads nothing
        return ranges or [SegmentRange("", 0, 0, 0)]

    def read(self, partition: SegmentRange) -> Iterator:
        if partition.end <= partition.start:
            return
        for buf, rec in read_range(partition, check_crc=self.o.check_crc,
                                   window_bytes=self.o.window_bytes,
                                   delay_levels_ms=self.o.delay_levels):
            yield from to_batches(rec, buf, self.columns, self.schema, self.filter.mask(rec))


class CommitLogReader(PlainCommitLogReader):
    def pushFilters(self, filters) -> Iterable:
        for f in filters:
            if not self.filter.push(f):
                yield f


class CommitLogDataSource(DataSource):
    """``spark.read.format("rocketmq").load(store_root)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def _network(self) -> bool:
        """No path but a name server: the network source and sink (``network_source``)."""
        return not self.options.get("path") and bool(self.options.get("namesrv"))

    def reader(self, schema) -> DataSourceReader:
        if self._network():
            from .network_source import NetworkReader
            return NetworkReader(self.options, schema)
        from .tier_options import is_tier_path
        if is_tier_path(self.options.get("path")):  # a tier's base directory or s3://bucket/prefix
            from .tier_source import PlainTierReader, TierReader
            plain = str(self.options.get("pushdown", "true")).lower() == "false"
            return (PlainTierReader if plain else TierReader)(self.options, schema)
        if str(self.options.get("pushdown", "true")).lower() == "false":
            return PlainCommitLogReader(self.options, schema)
        return CommitLogReader(self.options, schema)

    def streamReader(self, schema):
        if self._network():
            from .network_source import NetworkStreamReader
            return NetworkStreamReader(self.options, schema)
        from .tier_options import is_tier_path
        if is_tier_path(self.options.get("path")):  # follow a growing tier (tier_stream)
            from .tier_stream import TierStreamReader
            return TierStreamReader(self.options, schema)
        from .stream import CommitLogStreamReader
        return CommitLogStreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("the rocketmq sink sends new messages; a topic cannot be "
                             "overwritten: use .mode(\"append\")")
        from .network_sink import RocketMQWriter
        return RocketMQWriter(self.options, schema)

    def streamWriter(self, schema, overwrite: bool):
        from .network_sink import RocketMQStreamWriter
        return RocketMQStreamWriter(self.options, schema)


class CommitLogAliasDataSource(CommitLogDataSource):
    """The same source under the name used in the research notes."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq_commitlog"


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def _can_import_rocketstore(python: str) -> bool:
    import subprocess
    try:
        return subprocess.run([python, "-c", "import rocketstore, pyarrow, numpy"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _use_this_python(spark) -> None:
    """Make the session's Python workers able to import rocketstore.

    PySpark's workers run ``PYSPARK_PYTHON`` (default ``python3`` from PATH), fixed when the
    SparkContext started. From a virtualenv that is not activated that interpreter lacks
    rocketstore, and every read fails in the workers with ``ModuleNotFoundError``. On a local
    master the workers run on this machine: when their interpreter cannot import rocketstore,
    this one (``sys.executable``) is used instead. On a cluster the executors' interpreter is
    not ours to check; a clear error says what to install if it is missing."""
    import sys
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: the server's Python runs the source
        return
    master = sc.master or ""
    current = getattr(sc, "pythonExec", None) or "python3"
    if not master.startswith("local") or current == sys.executable:
        return
    if not _can_import_rocketstore(current):
        sc.pythonExec = sys.executable
        os.environ["PYSPARK_PYTHON"] = sys.executable


def register(spark) -> None:
    """Register the ``rocketmq`` (and ``rocketmq_commitlog``) data source with a session and turn
    on Python filter pushdown there: Spark refuses a reader implementing ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is false (its default in PySpark 4.3)."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    _use_this_python(spark)  # before registering: the source's workers take it from here
    if not _registered(spark, CommitLogDataSource.name()):  # found as pyspark_rocketmq: the same
        spark.dataSource.register(CommitLogDataSource)      # class, and replacing it warns
    spark.dataSource.register(CommitLogAliasDataSource)
    _quiet_stream_stop(spark)


def _registered(spark, name: str) -> bool:
    """Whether the session already has data source ``name`` (statically registered through
    ``pyspark_rocketmq`` or by an earlier ``register``); False where it cannot be asked."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager()
                    .dataSourceExists(name))
    except Exception:  # noqa: BLE001 - Spark Connect, or an API that moved: just register
        return False


def _quiet_stream_stop(spark) -> None:
    """Stopping a streaming query makes Spark's DAGScheduler warn "Failed to cancel job group
    ... Cannot find active jobs for it" on every normal stop: that logger goes to ERROR, unless
    ``ROCKETSTORE_SPARK_LOG`` asks for Spark's chatter."""
    if os.environ.get("ROCKETSTORE_SPARK_LOG", "").lower() in ("info", "debug", "trace", "all"):
        return
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.scheduler.DAGScheduler", jvm.org.apache.logging.log4j.Level.ERROR)
    except Exception:  # noqa: BLE001 - no JVM here (Spark Connect) or another logging backend
        pass


assert set(ARROW_TYPES) >= {"topic", "body", "msg_id"}
