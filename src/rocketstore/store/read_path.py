"""``get_message``: ConsumeQueue units → filtered CommitLog records, RocketMQ's status table.

| condition                    | status                 | next_begin_offset     |
|------------------------------|------------------------|-----------------------|
| negative queue id / offset   | NO_MATCHED_LOGIC_QUEUE | 0                     |
| no such queue, or empty      | NO_MESSAGE_IN_QUEUE    | 0                     |
| offset < min                 | OFFSET_TOO_SMALL       | min                   |
| offset == max                | OFFSET_OVERFLOW_ONE    | offset                |
| offset > max                 | OFFSET_OVERFLOW_BADLY  | max                   |
| no units readable at offset  | OFFSET_FOUND_NULL      | start of the next file|
| otherwise: scan units        | FOUND / NO_MATCHED_MESSAGE / MESSAGE_WAS_REMOVING |
                                                          offset + units examined

Filtering is two-step: the unit's tagsCode must be one of the subscription's tag hashes, then
the record's exact TAGS must be one of the subscribed tags (hash collisions never leak).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ..config import StoreConfig
from ..errors import CorruptRecordError
from ..format.hashing import java_hash
from ..format.layouts import CQ_UNIT_SIZE
from ..format.message import decode_message
from .commitlog import CommitLog
from . import ext_filter
from .consume_queue import FILLER_SIZE, ConsumeQueue
from .results import GetMessageResult, GetStatus

log = logging.getLogger(__name__)

MAX_FILTER_MESSAGE_COUNT = 16000 // CQ_UNIT_SIZE


@dataclass(frozen=True)
class Subscription:
    tags: frozenset[str] | None  # None: everything

    @classmethod
    def parse(cls, expr: str | None) -> "Subscription":
        if expr is None or expr.strip() in ("", "*"):
            return cls(None)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags or "*" in tags:
            return cls(None)
        return cls(tags)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(java_hash(t) for t in self.tags or ())


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


_TOTAL_MEMORY = _total_memory()


def in_disk(cfg: StoreConfig, physical_offset: int, max_phy: int) -> bool:
    """RocketMQ's ``checkInDiskByCommitOffset``: is the record further behind the CommitLog's
    end than the share of RAM (``access_message_in_memory_max_ratio``) the page cache keeps?"""
    return (max_phy - physical_offset) > _TOTAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100


def get_message(cfg: StoreConfig, commitlog: CommitLog, cq: ConsumeQueue | None, offset: int,
                max_msgs: int, subscription: str | None, decode: bool = True, *,
                ext=None, message_filter=None) -> GetMessageResult:
    """See the module table. ``decode=False`` fills only ``buffers`` (the raw records, what a
    PULL response carries); records are then decoded only when a tag check needs them.

    ``ext`` is the queue's ConsumeQueue-ext stream: a unit whose tags slot holds an ext address
    is filtered by the tagsCode kept there. ``message_filter`` (a SQL92 pull, see
    ``ext_filter``) replaces the tag subscription: units its bitmap rules out are skipped
    without reading the CommitLog, the rest are checked on the record's properties."""
    if cq is None:  # RocketMQ creates the queue in memory here, so the answer is "empty"
        return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    min_off, max_off = cq.min_offset_in_queue(), cq.max_offset_in_queue()
    if max_off == 0:
        return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
    if offset < min_off:
        return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
    if offset == max_off:
        return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
    if offset > max_off:
        return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
    sub = Subscription.parse(None if message_filter is not None else subscription)
    # a PULL without tag or SQL filter decodes nothing, and every unit read is a message (or a
    # removed one), so reading max_msgs units is enough
    raw_only = not decode and sub.tags is None and message_filter is None
    units = cq.read_units(offset, max_msgs if raw_only else max(MAX_FILTER_MESSAGE_COUNT, max_msgs))
    if units is None or len(units) == 0:
        per_file = cq.file_size // CQ_UNIT_SIZE
        return GetMessageResult(GetStatus.OFFSET_FOUND_NULL, offset + per_file - offset % per_file,
                                min_off, max_off)
    if raw_only:
        return _get_raw(cfg, commitlog, units, offset, max_msgs,
                        GetMessageResult(GetStatus.NO_MATCHED_MESSAGE, 0, min_off, max_off))
    codes = sub.codes if sub.tags is not None else None
    tags_raw = units["tags_code"]
    unit_ok = None
    if ext is not None:  # (without ext units there is no tagsCode to resolve, nor a bitmap)
        tags_raw, unit_ok = ext_filter.resolve_units(tags_raw, ext, message_filter)
    if message_filter is not None:
        # the expression on the candidates' properties, in one pass
        unit_ok = ext_filter.prefilter_records(commitlog, units["offset"], units["size"],
                                               unit_ok, message_filter)
    result = GetMessageResult(GetStatus.NO_MATCHED_MESSAGE, 0, min_off, max_off)
    max_phy = commitlog.max_offset()
    memory_limit = _TOTAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100
    buffers, messages = result.buffers, result.messages
    total = 0
    next_phy_file_start = -1
    offs = units["offset"].tolist()
    sizes = units["size"].tolist()
    tags = tags_raw if isinstance(tags_raw, list) else tags_raw.tolist()
    i = 0
    for i in range(len(offs)):
        off_py, size_py = offs[i], sizes[i]
        if off_py < next_phy_file_start or size_py == FILLER_SIZE:
            continue  # (a filler unit stands for a queue offset no record has)
        if buffers:
            in_disk = (max_phy - off_py) > memory_limit
            if len(buffers) >= max_msgs:
                break
            if in_disk:
                if total + size_py > cfg.max_transfer_bytes_on_message_in_disk or \
                        len(buffers) > cfg.max_transfer_count_on_message_in_disk - 1:
                    break
            elif total + size_py > cfg.max_transfer_bytes_on_message_in_memory or \
                    len(buffers) > cfg.max_transfer_count_on_message_in_memory - 1:
                break
        if (codes is not None and tags[i] is not None and tags[i] not in codes) or \
                (unit_ok is not None and unit_ok[i] is False):
            if not buffers:
                result.status = GetStatus.NO_MATCHED_MESSAGE
            continue
        raw = commitlog.read_record(off_py)
        if raw is None or len(raw) != size_py:
            if not buffers:
                result.status = GetStatus.MESSAGE_WAS_REMOVING
            if commitlog.segment_at(off_py) is None:  # the segment was removed: skip the rest of it
                next_phy_file_start = commitlog.roll_next_file(off_py)
            continue  # (one damaged record costs only itself)
        if message_filter is not None and unit_ok[i] is None:
            try:
                hit = ext_filter.record_matches(message_filter, raw)
            except CorruptRecordError:  # damage inside the log: report it unreadable, never raise
                log.error("unreadable record at CommitLog offset %d (queue unit %d)", off_py, offset + i)
                if not buffers:
                    result.status = GetStatus.MESSAGE_WAS_REMOVING
                continue
            if not hit:
                if not buffers:
                    result.status = GetStatus.NO_MATCHED_MESSAGE
                continue
        if not decode and sub.tags is None:
            buffers.append(raw)
            total += size_py
            result.status = GetStatus.FOUND
            continue
        try:
            msg = decode_message(raw, 0)
        except CorruptRecordError:  # damage inside the log: report it unreadable, never raise
            log.error("unreadable record at CommitLog offset %d (queue unit %d)", off_py, offset + i)
            if not buffers:
                result.status = GetStatus.MESSAGE_WAS_REMOVING
            continue
        if sub.tags is not None and msg.tags not in sub.tags:  # type: ignore[union-attr]
            if not buffers:
                result.status = GetStatus.NO_MATCHED_MESSAGE
            continue
        buffers.append(raw)
        if decode:
            messages.append(msg)  # type: ignore[arg-type]
        total += size_py
        result.status = GetStatus.FOUND
    else:
        i = len(offs)
    result.next_begin_offset = offset + i
    if offs:  # RocketMQ's maxPhyOffsetPulling: the last unit looked at
        result.suggest_pulling_from_slave = (max_phy - offs[min(i, len(offs) - 1)]) > memory_limit
    return result


def _in_limits(cfg: StoreConfig, in_disk: bool, count: int, total: int, size: int) -> bool:
    """RocketMQ's ``isTheBatchFull`` turned around: may one more record of ``size`` go in?"""
    if in_disk:
        return total + size <= cfg.max_transfer_bytes_on_message_in_disk and \
            count <= cfg.max_transfer_count_on_message_in_disk - 1
    return total + size <= cfg.max_transfer_bytes_on_message_in_memory and \
        count <= cfg.max_transfer_count_on_message_in_memory - 1


def _get_raw(cfg: StoreConfig, commitlog: CommitLog, units, offset: int, max_msgs: int,
             result: GetMessageResult) -> GetMessageResult:
    """``get_message`` without a filter and without decoding: the records as zero-copy views of
    the CommitLog segments (what a PULL body is), same statuses and limits as the general loop."""
    offs = units["offset"].tolist()
    sizes = units["size"].tolist()
    views = commitlog.read_record_views(offs, sizes)
    max_phy = commitlog.max_offset()
    memory_limit = _TOTAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100
    buffers = result.buffers
    total = 0
    next_phy_file_start = -1
    i = 0
    for i in range(len(offs)):
        off_py, size_py = offs[i], sizes[i]
        if off_py < next_phy_file_start:
            continue
        if buffers and (len(buffers) >= max_msgs or not _in_limits(
                cfg, (max_phy - off_py) > memory_limit, len(buffers), total, size_py)):
            break
        raw = views[i]
        if raw is None:
            if not buffers:
                result.status = GetStatus.MESSAGE_WAS_REMOVING
            next_phy_file_start = commitlog.roll_next_file(off_py)
            continue
        buffers.append(raw)
        total += size_py
        result.status = GetStatus.FOUND
    else:
        i = len(offs)
    result.next_begin_offset = offset + i
    if offs:  # RocketMQ's maxPhyOffsetPulling: the last unit looked at
        result.suggest_pulling_from_slave = (max_phy - offs[min(i, len(offs) - 1)]) > memory_limit
    return result
