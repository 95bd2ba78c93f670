"""Statuses and results of the store API (RocketMQ's names and meanings)."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..format.message import MessageExt


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"  # RocketMQ 5's timer answers
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"  # controller mode (RocketMQ 5)

    @property
    def ok(self) -> bool:
        return self in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class PutMessageResult:
    status: PutStatus
    msg_id: str | None = None
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    store_timestamp: int = 0
    msg_num: int = 0
    msg_ids: list[str] = field(default_factory=list)
    error: str | None = None  # why, for MESSAGE_ILLEGAL and friends
    # SYNC_FLUSH put with ``defer_sync``: the CommitLog offset the caller must see durable
    # before it may acknowledge (0: nothing to wait for; see ``FlushService.add_listener``)
    sync_offset: int = 0
    # SYNC_MASTER with a deferred replica wait (``PutPath.defer_replica_wait``): the caller
    # still has to wait for a slave to hold this offset (``HAService.submit_wait``)
    replica_wait_offset: int | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


@dataclass
class GetMessageResult:
    status: GetStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    messages: list[MessageExt] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=list)  # the raw stored records
    # RocketMQ's suggestPullingFromSlave: the pull lags the CommitLog end by more than the
    # page-cache share of RAM (accessMessageInMemoryMaxRatio)
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.buffers)
