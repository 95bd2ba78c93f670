"""``RebalanceLockManager``: which client of a group holds which queue, for orderly consumers.

A lock belongs to a client id and lapses ``LOCK_MAX_LIVE_MS`` (60 s) after its last renewal
(RocketMQ's ``RebalanceLockManager``); LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (``processors.locks``)
change it.
"""
from __future__ import annotations

import time

LOCK_MAX_LIVE_MS = 60_000


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self.max_live_ms = max_live_ms
        self._table: dict[str, dict[tuple[str, str, int], tuple[str, int]]] = {}

    def try_lock(self, group: str, client_id: str, mqs: list[tuple[str, str, int]],
                 now_ms: int | None = None) -> list[tuple[str, str, int]]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        locks = self._table.setdefault(group, {})
        ok = []
        for mq in mqs:
            holder = locks.get(mq)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live_ms:
                locks[mq] = (client_id, now)
                ok.append(mq)
        return ok

    def unlock(self, group: str, client_id: str, mqs: list[tuple[str, str, int]]) -> None:
        locks = self._table.get(group, {})
        for mq in mqs:
            if locks.get(mq, ("",))[0] == client_id:
                del locks[mq]
