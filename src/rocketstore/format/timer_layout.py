"""RocketMQ 5's timer store files: the timerlog unit, the timerwheel slot, the timer checkpoint.

All big-endian, as RocketMQ 5.3 writes them (``store/timer/``: ``TimerLog``, ``Slot``,
``TimerWheel``, ``TimerCheckpoint``).

timerlog unit (52 bytes, ``<root>/timerlog/<20-digit offset>`` mapped files)::

    off size field
      0    4 size            always 52 (a blank filler at a file's end carries the bytes left)
      4    8 prevPos         timerlog offset of the previous unit of the same slot, -1 = none
     12    4 magic           1 = default, | 2 = roll (re-enqueue later), | 4 = delete (cancel)
     16    8 enqueueTime     the wheel's write time (ms) when the unit was appended
     24    4 delayTime       deliver slot time - enqueueTime (ms)
     28    8 offsetPy        CommitLog offset of the message on rmq_sys_wheel_timer
     36    4 sizePy          its size
     40    4 topicHash       Java String.hashCode of its REAL_TOPIC (metrics)
     44    8 reserved        0

A file whose next unit would not fit with a 16-byte blank after it ends with a blank:
``size`` = bytes left, ``prevPos`` 0, ``magic`` = ``BLANK_MAGIC_CODE``.

timerwheel slot (32 bytes; ``<root>/timerwheel`` holds ``2 * 7 * 86400`` of them, a slot per
``timerPrecisionMs``, index ``time / precision % slots``)::

    off size field
      0    8 time / precisionMs   identifies which turn of the wheel the slot holds
      8    8 firstPos             timerlog offset of the slot's first unit
     16    8 lastPos              ... of its last unit (the head of the prevPos chain)
     24    4 num                  units in the slot (delete units count -1)
     28    4 magic                unused (0)

timer checkpoint (``<root>/config/timercheck``, 4096 bytes, RocketMQ's 56 + ours)::

    off size field
      0    8 lastReadTimeMs            the first slot not yet wholly delivered
      8    8 lastTimerLogFlushPos      timerlog offset known flushed
     16    8 lastTimerQueueOffset      rmq_sys_wheel_timer queue 0 offset enqueued up to
     24    8 masterTimerQueueOffset    same, as a master (we are one)
     32   24 dataVersion               stateVersion, timestamp, counter
     64    8 cursorSlotMs              (ours) the slot the dequeue is delivering
     72    8 cursorUnitPos             (ours) last timerlog unit of that slot delivered, -1 none
     80    8 cursorCommitLogOffset     (ours) CommitLog end after that delivery

RocketMQ reads only the first 56 bytes; the cursor lets a restart resume inside a slot so
that a crash delivers nothing twice (see ``store/timer/service.py``).
"""
from __future__ import annotations

import struct

from ..config import round_timer_precision

TIMER_TOPIC = "rmq_sys_wheel_timer"

# message properties (RocketMQ 5 ``MessageConst``)
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC)

UNIT_SIZE = 52
UNIT = struct.Struct(
    ">"
    "i"  # size
    "q"  # prevPos
    "i"  # magic
    "q"  # enqueueTime (the wheel's write time)
    "i"  # delayTime, relative to enqueueTime
    "q"  # offsetPy
    "i"  # sizePy
    "i"  # hash code of the real topic
    "q"  # reserved
)
assert UNIT.size == UNIT_SIZE
UNIT_BODY = struct.Struct(">" + UNIT.format[2:])  # the unit without its size field
UNIT_PRE_SIZE_FOR_MSG = 28  # where offsetPy starts
MIN_BLANK_LEN = 4 + 8 + 4
BLANK = struct.Struct(">iqi")


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


BLANK_MAGIC_CODE = _int32(0xBBCCDDEE ^ (1880681586 + 8))  # Java: 0xBBCCDDEE ^ 1880681586 + 8

MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2


def is_magic_ok(magic: int) -> bool:
    return (magic | 0xF) == 0xF


SLOT_SIZE = 32
SLOT = struct.Struct(
    ">"
    "q"  # time / precisionMs
    "q"  # firstPos
    "q"  # lastPos
    "i"  # num
    "i"  # magic
)
assert SLOT.size == SLOT_SIZE

TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS  # the file holds 2 * SLOTS_TOTAL slots
TIMER_BLANK_SLOTS = 60
PRECISION_CANDIDATES = (100, 200, 500, 1000)


def wheel_file_size(slots_total: int = SLOTS_TOTAL) -> int:
    return slots_total * 2 * SLOT_SIZE


TIMER_CHECKPOINT_SIZE = 4096
TIMER_CHECKPOINT = struct.Struct(
    ">"
    "q"  # lastReadTimeMs
    "q"  # lastTimerLogFlushPos
    "q"  # lastTimerQueueOffset
    "q"  # masterTimerQueueOffset
    "q"  # dataVersion.stateVersion
    "q"  # dataVersion.timestamp
    "q"  # dataVersion.counter
)
CURSOR_SLOT_OFF = 64
CURSOR_POS_OFF = 72
CURSOR_CL_OFF = 80
I64 = struct.Struct(">q")


round_precision = round_timer_precision  # RocketMQ's rounding, kept with the config


def roll_window_slots(configured: int) -> int:
    """``TimerMessageStore``'s timerRollWindowSlots: the configured value unless below 2 or
    above the wheel's slots less the 60 blank ones."""
    if configured > SLOTS_TOTAL - TIMER_BLANK_SLOTS or configured < 2:
        return SLOTS_TOTAL - TIMER_BLANK_SLOTS
    return configured


def build_delete_key(real_topic: str, uniq_key: str) -> str:
    """``TimerMessageStore.buildDeleteKey``: what ``TIMER_DEL_UNIQKEY`` holds to cancel."""
    return f"{real_topic}+{uniq_key}"
