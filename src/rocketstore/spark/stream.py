"""The ``rocketmq`` streaming source: the CommitLog as an append-only stream of messages.

    q = (spark.readStream.format("rocketmq").option("maxFilesPerTrigger", 1).load(root)
         .writeStream.format("parquet").option("checkpointLocation", ck)
         .trigger(availableNow=True).start(out))

Theory of operation. The Spark offset is ``{"phy": N}``, a CommitLog physical offset, and it is
always a *record boundary*: the start of a record, a segment start, or the end of the last whole
record. Structured Streaming journals ``(start, end)`` of every micro-batch before running it
and replays the same pair after a crash, so the source must give the same rows for the same
pair: it does, because CommitLog bytes below a confirmed offset never change.

The *confirmed offset* is how far data may be read. For a store not open in this process it is
the end of the last whole record of the newest segment holding data; the last record must also
pass its body CRC, so a record another process is still copying in is not handed out. The tail
scan resumes where the previous call stopped (state lives on the driver-side reader object,
which Spark keeps for the whole query), so polling a 1 GiB segment costs only the new bytes.

Admission control: ``maxFilesPerTrigger`` (segments), ``maxRecordsPerTrigger``,
``maxBytesPerTrigger`` — the first given becomes Spark's default read limit and all given ones
are applied. ``Trigger.AvailableNow`` pins the confirmed offset once
(``prepareForTriggerAvailableNow``) and then runs as many limited batches as needed.

Loud failures: a checkpointed start above the confirmed offset means the CommitLog was
truncated below data already delivered; a start that is no longer a record boundary means it
was rewritten; a start below the oldest segment means retention deleted undelivered data.
Each raises ``DataLossError`` unless ``failOnDataLoss`` is false (then the query waits for
the log to grow past the start, or skips to the oldest segment).

Options besides the batch ones: ``startingOffset`` (``earliest`` | ``latest`` | a number).
"""
from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxBytes, ReadMaxFiles,
                                              ReadMaxRows, SupportsTriggerAvailableNow)

from ..errors import RocketStoreError
from ..format.batch import scan_boundaries
from .arrow_columns import arrow_schema, to_batches
from .read_options import ReadOptions, _bool, _columns
from .segments import (MappedSegment, Segment, SegmentRange, confirmed_offset, list_segments,
                       read_range, record_at, split_points)


class DataLossError(RocketStoreError):
    """The CommitLog lost or rewrote data a streaming query had already delivered."""


def _opt_int(opts: dict, name: str) -> int | None:
    v = opts.get(name.lower())
    if v is None or str(v).strip() == "":
        return None
    n = int(v)
    if n <= 0:
        raise ValueError(f"{name} must be positive, not {v!r}")
    return n


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict, schema) -> None:
        self.o = ReadOptions(options, streaming=True)
        self.columns = _columns(schema)
        self.schema = arrow_schema(self.columns)
        opts = self.o.opts
        self.max_files = _opt_int(opts, "maxFilesPerTrigger")
        self.max_records = _opt_int(opts, "maxRecordsPerTrigger")
        self.max_bytes = _opt_int(opts, "maxBytesPerTrigger")
        if opts.get("startingoffset") and opts.get("startingoffsets"):
            raise ValueError("give startingOffset or startingOffsets (the same option), not both")
        self.starting = str(opts.get("startingoffset") or opts.get("startingoffsets")
                            or "earliest").strip().lower()
        self.fail_on_data_loss = _bool(opts.get("failondataloss"), True)
        self.target: int | None = None
        self._tail: tuple[int, int] | None = None  # (segment base, verified end) from the last scan

    # -- offsets ----------------------------------------------------------------------------
    def _segments(self) -> list[Segment]:
        return list_segments(self.o.cl_dir)

    def confirmed_offset(self, segs: list[Segment] | None = None) -> int:
        """End of the last whole, CRC-checked record (see module doc)."""
        segs = self._segments() if segs is None else segs
        off, self._tail = confirmed_offset(segs, self._tail)
        return off

    def initialOffset(self) -> dict:
        segs = self._segments()
        if self.starting == "earliest":
            return {"phy": segs[0].base if segs else 0}
        if self.starting == "latest":
            return {"phy": self.confirmed_offset(segs)}
        try:
            off = int(self.starting)
        except ValueError:
            raise ValueError(f"startingOffset must be earliest, latest or an offset, not {self.starting!r}")
        confirmed = self.confirmed_offset(segs)
        if off > confirmed:
            raise ValueError(f"startingOffset {off} is past the end of the CommitLog of "
                             f"{self.o.root} ({confirmed})")
        seg = next((s for s in segs if s.base <= off < s.end), None)
        if seg is not None and not record_at(seg, off):
            raise ValueError(f"startingOffset {off} is not a record boundary of {seg.path}")
        return {"phy": off}

    def getDefaultReadLimit(self):
        if self.max_files:
            return ReadMaxFiles(self.max_files)
        if self.max_records:
            return ReadMaxRows(self.max_records)
        if self.max_bytes:
            return ReadMaxBytes(self.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.confirmed_offset()

    def reportLatestOffset(self) -> dict:
        return {"phy": self.confirmed_offset()}

    def _check_start(self, segs: list[Segment], start: int, confirmed: int) -> int:
        """Validate a (checkpointed) start offset; returns the offset to continue from."""
        def lost(msg: str) -> None:
            if self.fail_on_data_loss:
                raise DataLossError(f"{self.o.cl_dir}: {msg} (set failOnDataLoss=false to go on)")
        if start > confirmed:
            lost(f"CommitLog ends at {confirmed}, below the offset {start} this query already "
                 f"read up to: the store was truncated")
            return start
        if segs and start < segs[0].base:
            lost(f"messages from {start} to {segs[0].base} were deleted before this query read them")
            return segs[0].base
        seg = next((s for s in segs if s.base <= start < s.end), None)
        if seg is not None and not record_at(seg, start):
            lost(f"offset {start} is no longer a record boundary in {seg.path}: the CommitLog "
                 f"was rewritten")
        return start

    def latestOffset(self, start: dict, limit=None) -> dict:
        segs = self._segments()
        live = self.confirmed_offset(segs)
        confirmed = live if self.target is None else min(self.target, live)
        s = self._check_start(segs, int(start["phy"]), live)
        end = confirmed
        limits = [limit] if limit is not None else []
        limits += [ReadMaxFiles(self.max_files)] if self.max_files else []
        limits += [ReadMaxRows(self.max_records)] if self.max_records else []
        limits += [ReadMaxBytes(self.max_bytes)] if self.max_bytes else []
        for lim in limits:
            if isinstance(lim, ReadMaxFiles):
                end = min(end, _files_end(segs, s, lim.max_files))
            elif isinstance(lim, ReadMaxRows):
                end = min(end, _walk_end(segs, s, end, max_records=lim.max_rows))
            elif isinstance(lim, ReadMaxBytes):
                end = min(end, _walk_end(segs, s, end, max_bytes=lim.max_bytes))
        return {"phy": max(end, s)}

    # -- reading ----------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> list[SegmentRange]:
        s, e = int(start["phy"]), int(end["phy"])
        out = []
        for seg in self._segments():
            a, b = max(s, seg.base), min(e, seg.end)
            if a >= b:
                continue
            cuts = [a]
            if self.o.split_size and b - a > self.o.split_size:
                cuts += [c for c in split_points(seg, self.o.split_size) if a < c < b]
            bounds = cuts + [b]
            out += [SegmentRange(seg.path, seg.base, x, y, False) for x, y in zip(bounds, bounds[1:])]
        return out

    def read(self, partition: SegmentRange) -> Iterator:
        for buf, rec in read_range(partition, check_crc=self.o.check_crc,
                                   window_bytes=self.o.window_bytes,
                                   delay_levels_ms=self.o.delay_levels):
            yield from to_batches(rec, buf, self.columns, self.schema, self._topic_mask(rec))

    def _topic_mask(self, rec):
        if not self.o.topics:
            return None
        import numpy as np
        return np.fromiter((t in self.o.topics for t in rec.topic), dtype=bool, count=len(rec))

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the store's retention, not the reader, deletes segments."""


def _files_end(segs: list[Segment], start: int, n: int) -> int:
    idx = next((i for i, s in enumerate(segs) if s.end > start), None)
    if idx is None:
        return start
    return segs[min(idx + n - 1, len(segs) - 1)].end


def _record_ends(segs: list[Segment], start: int, cap: int) -> Iterator[int]:
    """End offset of every whole record from ``start`` on, below ``cap``, across segments."""
    pos = start
    for seg in segs:
        if seg.end <= pos:
            continue
        if pos >= cap:
            return
        with MappedSegment(seg.path) as m:
            positions, stop_pos, stop = scan_boundaries(m.buf, pos - seg.base, min(cap, seg.end) - seg.base)
        for e in positions[1:] + [stop_pos]:
            if seg.base + e > pos:
                yield seg.base + e
        if stop != "blank":
            return
        pos = seg.end


def _walk_end(segs: list[Segment], start: int, cap: int, *, max_records: int | None = None,
              max_bytes: int | None = None) -> int:
    """Record boundary after at most ``max_records`` records / ``max_bytes`` bytes (≥ 1 record)."""
    last = start
    for i, e in enumerate(_record_ends(segs, start, cap)):
        if max_bytes is not None and i > 0 and e - start > max_bytes:
            return last
        last = e
        if max_records is not None and i + 1 >= max_records:
            return last
    return last
