"""Delay levels: messages with a ``DELAY`` property wait in ``SCHEDULE_TOPIC_XXXX``.

Theory of operation (RocketMQ's ``ScheduleMessageService``): the store rewrites a message
whose ``DELAY`` level is > 0 when it is put — topic ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``,
the real topic and queue kept in ``REAL_TOPIC`` / ``REAL_QID``; the ConsumeQueue unit's tagsCode
becomes the deliver time. ``ScheduleMessageService`` is an asyncio task that, for
each level, reads its schedule queue from the delivered offset (``delayOffset.json``), and puts
every message whose ``store_timestamp + delay`` has passed back to its real topic and queue
without ``DELAY``; the first message not yet due stops that level until the next tick. A
message is therefore never delivered before its delay, and, because offsets are persisted only
after the re-put, a crash can deliver a message twice but never lose it (as in RocketMQ). The
offset moves past a message only once the store took its re-put (PUT_OK, or FLUSH_DISK_TIMEOUT:
the record is in the CommitLog and a second put would deliver it twice); any other status (disk
full, store not writeable) stops that level, which tries the same message again after
``RETRY_PAUSE_S``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Sequence

from ...format.message import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID,
                               PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC, Message, MessageExt)

log = logging.getLogger(__name__)
RETRY_PAUSE_S = 1.0  # after a failed re-put (RocketMQ waits DELAY_FOR_A_PERIOD, 10 s)


def restore_from_schedule(m: MessageExt) -> Message:
    """The message to put back on its real topic when its delay is over."""
    props = dict(m.properties)
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    topic = props.get(PROPERTY_REAL_TOPIC, m.topic)
    qid = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
    return Message(topic=topic, body=m.body, properties=props, queue_id=qid, flag=m.flag,
                   sys_flag=m.sys_flag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                   reconsume_times=m.reconsume_times,
                   prepared_transaction_offset=m.prepared_transaction_offset)


class ScheduleMessageService:
    """``store``: the open ``MessageStore``; ``offsets``: the ``DelayOffsetStore``;
    ``levels_ms``: the delay of each level; ``put``: a blocking put of one message
    (``Puts.put_blocking``); ``run``: runs a blocking call on the store executor."""

    def __init__(self, store: Any, offsets: Any, levels_ms: Sequence[int],
                 put: Callable[[Message], Any], run: Callable[..., Awaitable[Any]] | None = None,
                 interval_s: float = 0.1) -> None:
        self.store = store
        self.offsets = offsets
        self.levels = levels_ms
        self.put = put
        self.run = run
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._retry_at: dict[int, float] = {}  # level -> when to try a failed re-put again

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="schedule")

    async def stop(self) -> None:
        """Let the current pass finish (it may be putting on an executor thread), then stop."""
        self._stopping = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
                pass
        self.offsets.persist()

    async def _run(self) -> None:
        assert self.run is not None
        while not self._stopping:
            try:
                await self.run(self.run_once)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep delivering other levels; the error is logged
                if not self._stopping:
                    log.exception("schedule service tick failed")
            await asyncio.sleep(self.interval_s)

    def run_once(self, now_ms: int | None = None) -> int:
        """Deliver every due message of every level (blocking; runs on an executor thread).
        Returns how many were delivered."""
        store, offsets = self.store, self.offsets
        delivered = 0
        for level, delay in enumerate(self.levels, start=1):
            if self._stopping:
                break
            if time.monotonic() < self._retry_at.get(level, 0.0):
                continue
            qid = level - 1
            offset = offsets.get(level)
            max_off = store.get_max_offset_in_queue(SCHEDULE_TOPIC, qid)
            if offset >= max_off:
                continue
            offset = max(offset, store.get_min_offset_in_queue(SCHEDULE_TOPIC, qid))
            while offset < max_off:
                g = store.get_message("SCHEDULE", SCHEDULE_TOPIC, qid, offset, 32, None)
                msgs = g.messages or []
                if not msgs:
                    if g.next_begin_offset > offset:
                        offset = g.next_begin_offset
                        offsets.set(level, offset)
                        continue
                    break
                now = int(time.time() * 1000) if now_ms is None else now_ms
                due_stop = False
                for m in msgs:
                    if self._stopping or m.store_timestamp + delay > now:
                        due_stop = True
                        break
                    r = self.put(restore_from_schedule(m))
                    if not r.status.ok:  # not stored: keep the offset, retry after a pause
                        self._retry_at[level] = time.monotonic() + RETRY_PAUSE_S
                        log.warning("delay level %d: re-put of %s failed (%s %s); retrying in "
                                    "%.0f s", level, m.msg_id, r.status.name, r.error or "",
                                    RETRY_PAUSE_S)
                        due_stop = True
                        break
                    delivered += 1
                    offset = m.queue_offset + 1
                    offsets.set(level, offset)
                if due_stop:
                    break
        return delivered
