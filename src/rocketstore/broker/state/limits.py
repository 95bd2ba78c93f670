"""What a request may set: group names and the ranges of the live broker settings.

Group names follow RocketMQ's own rule for topics and groups (``Validators.checkGroup``: 1..255
characters of ``[%|a-zA-Z0-9_-]``). RocketMQ's client checks it; its broker does not, so a raw
request could put ``../x``, a NUL, a newline or 300 characters into ``subscriptionGroup.json``
and ``consumerOffset.json``. Here the broker refuses such a name wherever one arrives (heartbeat,
subscription-group admin codes, offset commits, gRPC) with a message that says why.

``UPDATE_BROKER_CONFIG`` values are checked against ``LIVE_RANGES`` (RocketMQ checks none: it
took ``maxMessageSize=1099511627776``); a value out of range refuses the whole request.
"""
from __future__ import annotations

import re

GROUP_MAX_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH
_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")

MIB = 1024 * 1024
HOUR_MS = 3_600_000

# Java name -> (lowest, highest) a live update may set; every LIVE integer key has an entry
LIVE_RANGES: dict[str, tuple[int, int]] = {
    "fileReservedTime": (1, 24 * 365 * 10),  # hours
    "diskMaxUsedSpaceRatio": (10, 95),  # percent (the store clamps to this, as RocketMQ)
    "diskSpaceWarningLevelRatio": (35, 90),
    "diskSpaceCleanForciblyRatio": (10, 90),
    "deleteFileBatchMax": (1, 1000),
    "flushIntervalCommitLog": (1, 60_000),  # ms
    "flushCommitLogLeastPages": (0, 1 << 16),
    "flushCommitLogThoroughInterval": (0, 24 * HOUR_MS),
    "flushIntervalConsumeQueue": (1, 60_000),
    "flushConsumeQueueLeastPages": (0, 1 << 16),
    "flushConsumeQueueThoroughInterval": (0, 24 * HOUR_MS),
    "syncFlushTimeout": (1, 600_000),
    "maxMessageSize": (1, 64 * MIB),  # and never over one CommitLog file (check_live_value)
    "maxTransferBytesOnMessageInMemory": (1, 1024 * MIB),
    "maxTransferCountOnMessageInMemory": (1, 65_536),
    "maxTransferBytesOnMessageInDisk": (1, 1024 * MIB),
    "maxTransferCountOnMessageInDisk": (1, 65_536),
    "accessMessageInMemoryMaxRatio": (0, 100),
    "defaultQueryMaxNum": (1, 65_536),
    "defaultTopicQueueNums": (1, 1024),
    "shortPollingTimeMills": (1, HOUR_MS),
    "flushConsumerOffsetInterval": (100, HOUR_MS),
}


def validate_group(group: object) -> str:
    """``group`` when it is a legal group name, else ``ValueError`` saying why."""
    if not isinstance(group, str) or not group:
        raise ValueError("the consumer/producer group name is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise ValueError(f"illegal group name {group[:40]!r}...: longer than "
                         f"{GROUP_MAX_LENGTH} characters ({len(group)})")
    if not _NAME_RE.match(group):
        raise ValueError(f"illegal group name {group!r}: want 1..{GROUP_MAX_LENGTH} chars of "
                         "[%|a-zA-Z0-9_-]")
    return group


def check_live_value(key: str, value: object, store_config: object = None) -> None:
    """``ValueError`` when an ``UPDATE_BROKER_CONFIG`` value is out of its range."""
    if isinstance(value, bool) or not isinstance(value, int):
        return
    lo, hi = LIVE_RANGES.get(key, (0, (1 << 31) - 1))  # a Java int at least
    if key == "maxMessageSize" and store_config is not None:
        hi = min(hi, int(getattr(store_config, "mapped_file_size_commitlog", hi)))
    if not lo <= value <= hi:
        raise ValueError(f"{key}={value} is out of range: want {lo}..{hi}")


__all__ = ["GROUP_MAX_LENGTH", "LIVE_RANGES", "validate_group", "check_live_value"]
