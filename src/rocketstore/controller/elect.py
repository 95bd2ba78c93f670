"""The elect policy: RocketMQ 5's DefaultElectPolicy.

Candidates are first the SyncStateSet, then — only with ``enableElectUncleanMaster`` — every
replica of the group; within a candidate set only alive brokers count. The old master stays if it
is alive and no other broker is designated; a designated broker (mqadmin electMaster) wins if
alive, else nobody does. Otherwise the best ranked wins: highest epoch, then highest max offset,
then lowest ``brokerElectionPriority`` (then lowest id, where RocketMQ's TreeSet order is
arbitrary).
"""
from __future__ import annotations

from typing import Callable, Iterable

#: (broker_id) -> (epoch, max_offset, priority) of an alive broker, None when not alive
Rank = Callable[[int], "tuple[int, int, int] | None"]


def _try(candidates: Iterable[int], rank: Rank, old_master: int | None,
         prefer: int | None) -> int | None:
    live = {b: r for b in candidates if (r := rank(b)) is not None}
    if not live:
        return None
    if old_master in live and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in live else None
    return min(live, key=lambda b: (-live[b][0], -live[b][1], live[b][2], b))


def elect(sync_state_set: Iterable[int], all_replicas: Iterable[int] | None, rank: Rank,
          old_master: int | None, prefer: int | None) -> int | None:
    got = _try(sync_state_set, rank, old_master, prefer)
    if got is None and all_replicas is not None:
        got = _try(all_replicas, rank, old_master, prefer)
    return got
