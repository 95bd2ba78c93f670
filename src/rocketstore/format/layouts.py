"""Small fixed layouts: segment names, ConsumeQueue unit, checkpoint.

ConsumeQueue unit (20 bytes, big-endian)::

    off size field
      0    8 commitlog physical offset
      8    4 message size (TOTALSIZE)
     12    8 tagsCode (Java hash of TAGS, or deliver time on SCHEDULE_TOPIC_XXXX)

A unit ``(0, 0x7FFFFFFF, 0)`` is the pre-blank filler of a queue that starts above 0; an all-zero
unit is unwritten space.

Checkpoint (4096 bytes, RocketMQ's ``StoreCheckpoint``)::

    off size field
      0    8 physicMsgTimestamp   store time of the last flushed CommitLog message
      8    8 logicsMsgTimestamp   store time of the last ConsumeQueue unit written
     16    8 indexMsgTimestamp    end time of the last full, flushed index file
     24    8 masterFlushedOffset  (5.x, written as 0)
     32    8 confirmPhyOffset     (5.x, written as 0)
"""
from __future__ import annotations

import struct

CQ_UNIT_SIZE = 20
CQ_UNIT = struct.Struct(
    ">"
    "q"  # physical offset
    "i"  # size
    "q"  # tagsCode
)
assert CQ_UNIT.size == CQ_UNIT_SIZE
CQ_FILLER = CQ_UNIT.pack(0, 0x7FFFFFFF, 0)
CQ_DTYPE = [("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]

CHECKPOINT_SIZE = 4096
CHECKPOINT = struct.Struct(
    ">"
    "q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
    "q"  # masterFlushedOffset
    "q"  # confirmPhyOffset
)

SEGMENT_NAME_DIGITS = 20


def offset_to_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded start offset.

    >>> offset_to_name(1073741824)
    '00000000001073741824'
    """
    return f"{offset:020d}"


def name_to_offset(name: str) -> int | None:
    """Start offset of a segment name, or None if the name is not 20 digits."""
    if len(name) != SEGMENT_NAME_DIGITS or not name.isdigit():
        return None
    return int(name)
