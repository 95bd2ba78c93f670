"""The ``rocketmq`` streaming source over a tier: follows a growing tier, no broker involved.

    q = (spark.readStream.format("rocketmq").load("s3://bucket/prefix")   # or a posix tier dir
         .writeStream.format("parquet").option("checkpointLocation", ck).start(out))

Theory of operation. The Spark offset is ``{"<cluster dir>/<broker>/<topic>/<queueId>": next
queue offset}``, one entry per queue of the tier. A queue's end is what its flat CONSUME_QUEUE
holds in whole units: the tier writes a queue's records to the flat COMMIT_LOG before their
units (``store.tier.flat``), so every unit below that end points at a whole record, and flat
files below it never change — a replayed ``(start, end)`` gives the same rows. A queue that
appears later starts at its first held offset. One partition per queue with new units; each
reads its units, then the records' bytes in one run, decoded with the file source's decoder
into the same columns.

Options: the tier source's (``objectStoreEndpoint``, ...), ``topic`` (one or a comma list),
``startingOffsets`` (``earliest``, default, or ``latest``) and ``maxRecordsPerTrigger`` (at most
that many messages per queue in one micro-batch). Offsets a retention pass deleted before the query read them raise unless
``failOnDataLoss`` is false (then the query skips to the first offset held).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from ..errors import CorruptRecordError, RocketStoreError
from ..format.batch import STOP_CORRUPT, decode_records
from ..store.tier.flat import FlatQueue
from .arrow_columns import arrow_schema, to_batches
from .read_options import _bool, _columns
from .tier_options import TIER_NAMES, open_tier_backend, tier_options
from .tier_source import list_tier_segments

STREAM_NAMES = TIER_NAMES + ("topic", "startingOffsets", "maxRecordsPerTrigger", "failOnDataLoss")
_BIG = 1 << 62  # reading only: a queue's segment size limits writes, not reads
READ_UNITS = 4096


class TierDataLossError(RocketStoreError):
    """The tier's retention deleted offsets a streaming query had not read yet."""


@dataclass(frozen=True)
class TierQueueRange(InputPartition):
    key: str
    lo: int
    hi: int
    known: bool  # the queue was in the batch's start offset (else it appeared since)


def _split_key(key: str) -> tuple[str, str, str, int]:
    cluster_dir, broker, topic, qid = key.split("/")
    return cluster_dir.split("_", 1)[1], broker, topic, int(qid)


def _open_queue(backend, key: str) -> FlatQueue:
    """The queue's flat files as they are now, read-only (no recovery: nothing is cut)."""
    cluster, broker, topic, qid = _split_key(key)
    fq = FlatQueue(backend, cluster, broker, topic, qid, _BIG, _BIG)
    fq.commitlog.load()
    fq.cq.load()
    fq.refresh_head()
    return fq


class TierStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict, schema) -> None:
        self.opts = tier_options(options, STREAM_NAMES, "rocketmq tier stream")
        topics = str(self.opts.get("topic") or "").strip()
        self.topics = {t.strip() for t in topics.split(",") if t.strip()} or None
        self.starting = str(self.opts.get("startingoffsets") or "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            raise ValueError(f"rocketmq tier stream: startingOffsets must be earliest or latest, "
                             f"not {self.starting!r}")
        per = self.opts.get("maxrecordspertrigger")
        self.max_records = int(per) if per not in (None, "") else None
        if self.max_records is not None and self.max_records <= 0:
            raise ValueError(f"maxRecordsPerTrigger must be positive, not {per!r}")
        self.fail_on_data_loss = _bool(self.opts.get("failondataloss"), True)
        self._pinned: dict | None = None
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)

    # -- offsets ----------------------------------------------------------------------------
    def _bounds(self) -> dict[str, tuple[int, int]]:
        """key -> (first offset held, end) of every queue of the tier now."""
        backend = open_tier_backend(self.opts)
        keys = []
        for seg in list_tier_segments(backend):
            if self.topics is not None and seg.topic not in self.topics:
                continue
            key = "/".join(seg.key.split("/")[:4])
            if key not in keys:
                keys.append(key)
        out = {}
        for key in keys:
            fq = _open_queue(backend, key)
            if fq.max_offset >= 0:
                out[key] = (fq.min_offset, fq.max_offset)
        return out

    def initialOffset(self) -> dict:
        bounds = self._bounds()
        pick = 0 if self.starting == "earliest" else 1
        return {k: b[pick] for k, b in bounds.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        """``availableNow``: the ends now, reached in batches of ``maxRecordsPerTrigger``."""
        self._pinned = {k: hi for k, (lo, hi) in self._bounds().items()}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        end = dict(self._pinned) if self._pinned is not None else \
            {k: hi for k, (lo, hi) in self._bounds().items()}
        if self.max_records is not None and start:
            for k, at in start.items():
                if k in end:
                    end[k] = min(end[k], int(at) + self.max_records)
        for k, at in (start or {}).items():  # a queue the tier no longer lists keeps its place
            end[k] = max(int(at), end.get(k, int(at)))
        return end

    # -- reading ----------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[TierQueueRange]:
        out = []
        for key, hi in sorted(end.items()):
            lo = int(start.get(key, 0))
            if int(hi) > lo:
                out.append(TierQueueRange(key, lo, int(hi), key in start))
        return out

    def read(self, partition: TierQueueRange) -> Iterator:
        fq = _open_queue(open_tier_backend(self.opts), partition.key)
        lo = partition.lo
        held = fq.min_offset
        if lo < held:
            if self.fail_on_data_loss and partition.known:
                raise TierDataLossError(
                    f"tier queue {partition.key}: offsets {lo}..{held} were deleted by retention "
                    f"before this query read them (set failOnDataLoss=false to go on)")
            lo = held
        while lo < partition.hi:
            units = fq.units(lo, min(READ_UNITS, partition.hi - lo))
            if not units:
                break
            start = units[0][0]
            blob = fq.commitlog.read(start, units[-1][0] + units[-1][1] - start)
            rec = decode_records(blob, 0, len(blob), base_offset=start)
            if rec.stop == STOP_CORRUPT or len(rec) != len(units):
                raise CorruptRecordError(start + rec.end, "record",
                                         f"{rec.stop_reason or rec.stop} in tier queue "
                                         f"{partition.key} at queue offset {lo}")
            yield from to_batches(rec, blob, self.columns, self.schema)
            lo += len(units)

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the tier's retention, not the reader, deletes segments."""
