"""The ``rocketmq`` source over a tier (RocketMQ 5's tiered store), no broker involved:

    spark.read.format("rocketmq").load("/base/of/a/posix/tier")
    (spark.read.format("rocketmq").option("objectStoreEndpoint", "http://127.0.0.1:9000")
          .option("objectStoreAccessKey", "...").option("objectStoreSecretKey", "...")
          .load("s3://bucket/prefix"))      # else AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... (env)

Same columns as the file source (``arrow_columns``, the same decoder); ``commitlog_offset``
and ``msg_id`` are those the tier stores: a record's offset in its queue's flat COMMIT_LOG.
One partition per COMMIT_LOG segment; ``topic`` and ``queue_id`` filters (=, IN) prune
partitions and are exact. A segment being written may end in a torn record: it is left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

from pyspark.sql.datasource import DataSourceReader, EqualTo, In, InputPartition

from ..errors import CorruptRecordError
from ..format.batch import STOP_CORRUPT, decode_records
from ..store.tier import layout
from .arrow_columns import arrow_schema, to_batches
from .read_options import _columns
from .tier_options import (TIER_NAMES, TIER_OPTIONS, is_tier_path, open_tier_backend,  # noqa: F401
                           tier_options)


@dataclass(frozen=True)
class TierSegment(InputPartition):
    key: str
    base: int
    size: int
    topic: str
    queue_id: int
    tail: bool


def list_tier_segments(backend) -> list[TierSegment]:
    found = []
    for key, size in backend.list(""):
        parts = key.split("/")
        if len(parts) != 6 or parts[4] != layout.COMMIT_LOG:
            continue
        base = layout.parse_file_name(parts[5])
        if base is None or layout.cluster_dir(parts[0].split("_", 1)[-1]) != parts[0]:
            continue
        try:
            qid = int(parts[3])
        except ValueError:
            continue
        found.append((parts[0], parts[1], parts[2], qid, base, key, size))
    found.sort()
    out = []
    for i, (c, b, topic, qid, base, key, size) in enumerate(found):
        last = i + 1 == len(found) or found[i + 1][:4] != (c, b, topic, qid)
        out.append(TierSegment(key, base, size, topic, qid, last))
    return out


class PlainTierReader(DataSourceReader):
    """The tier reader without filter pushdown (sessions with Python filter pushdown off)."""

    def __init__(self, options: dict, schema) -> None:
        self.opts = tier_options(options)
        self.check_crc = str(self.opts.get("checkcrc", "false")).lower() == "true"
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)
        self.topics: set[str] | None = None
        self.queue_ids: set[int] | None = None

    def _narrow(self, current, values):
        values = set(values)
        return values if current is None else current & values

    def partitions(self) -> list[TierSegment]:
        segs = [s for s in list_tier_segments(open_tier_backend(self.opts))
                if (self.topics is None or s.topic in self.topics)
                and (self.queue_ids is None or s.queue_id in self.queue_ids) and s.size > 0]
        return segs or [TierSegment("", 0, 0, "", -1, True)]

    def read(self, partition: TierSegment) -> Iterator:
        if partition.size <= 0:
            return
        buf = open_tier_backend(self.opts).read(partition.key, 0, partition.size)
        rec = decode_records(buf, 0, len(buf), base_offset=partition.base, check_crc=self.check_crc)
        if rec.stop == STOP_CORRUPT or (rec.end < len(buf) and not partition.tail):
            raise CorruptRecordError(partition.base + rec.end, "record",
                                     f"{rec.stop_reason or rec.stop} in tier segment {partition.key}")
        if len(rec):
            yield from to_batches(rec, buf, self.columns, self.schema)


class TierReader(PlainTierReader):
    def pushFilters(self, filters) -> Iterable:
        for f in filters:
            col = f.attribute[0] if len(f.attribute) == 1 else None
            vals = None
            if isinstance(f, EqualTo):
                vals = [f.value]
            elif isinstance(f, In):
                vals = list(f.value)
            if col == "topic" and vals is not None and all(isinstance(v, str) for v in vals):
                self.topics = self._narrow(self.topics, vals)
            elif col == "queue_id" and vals is not None and all(isinstance(v, int) for v in vals):
                self.queue_ids = self._narrow(self.queue_ids, vals)
            else:
                yield f
