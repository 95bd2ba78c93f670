"""``PopState`` on its own: the revive records it writes rebuild the same open checkpoints."""
from __future__ import annotations

from rocketstore.proxy.pop import ACK_TAG, CK_TAG, PopState, ReceiptHandle


class RecordLog:
    """The revive queue as a list: write returns the record's queue offset."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, bytes]] = []
        self.committed = -1

    def write(self, tags: str, body: bytes) -> int:
        self.records.append((len(self.records), tags, body))
        return len(self.records) - 1

    def commit(self, offset: int) -> None:
        self.committed = offset


def _state(log: RecordLog, now: list[int], done: list | None = None) -> PopState:
    return PopState("broker-a", log.write, log.commit, clock=lambda: now[0],
                    on_fifo_done=(done.append if done is not None else lambda ck: None))


def test_replay_rebuilds_open_checkpoints_and_forgets_acked():
    log, now = RecordLog(), [1_000]
    a = _state(log, now)
    ck1 = a.checkpoint("G", "T", 0, 1_000, 5_000, [(0, 100), (1, 200), (2, 300)])
    ck2 = a.checkpoint("G", "T", 1, 1_000, 5_000, [(7, 900)])
    a.ack(ck1, 1)
    a.ack(ck2, 7)  # ck2 fully acked: gone
    h = a.change_invisible(ck1, 2, 60_000)  # offset 2 moves to a new checkpoint
    assert [t for _, t, _ in log.records] == [CK_TAG, CK_TAG, ACK_TAG, ACK_TAG, CK_TAG, ACK_TAG]

    b = _state(log, now)
    assert b.replay(log.records) == 2
    now[0] = 6_000  # ck1 expired: only offset 0 is due; offset 2 is invisible until 61 s
    assert [(ck.queue_id, o, c) for ck, o, c in b.due()] == [(0, 0, 100)]
    rh = ReceiptHandle.decode(h.encode())
    assert rh.offset == 2 and rh.deadline == 1_000 + 60_000
    assert b.find("G", "T", rh) is not None
    assert b.commit_revive_offset() == 0  # ck1's record is still needed
    ck = b.find("G", "T", rh)
    b.ack(ck, 2)
    b.ack(b.due()[0][0], 0)
    assert b.open_checkpoints() == 0
    assert b.commit_revive_offset() == len(log.records)  # everything resolved


def test_fifo_batches_lock_supersede_and_finish():
    log, now, done = RecordLog(), [1_000], []
    a = _state(log, now, done)
    ck = a.checkpoint("G", "T", 0, 1_000, 2_000, [(0, 10), (1, 20)], fifo=True, end=2)
    assert a.fifo_checkpoint("G", "T", 0) is ck and a.due(10_000) == []  # never revived
    a.ack(ck, 0)
    now[0] = 5_000  # expired: the next receive delivers offset 1 again as attempt 2
    again = a.checkpoint("G", "T", 0, 5_000, 2_000, [(1, 20)], fifo=True, attempt=2, end=2,
                         acked=ck.acked)
    assert a.fifo_checkpoint("G", "T", 0) is again and a.open_checkpoints() == 1

    b = _state(log, now, [])
    assert b.replay(log.records) == 1
    replayed = b.fifo_checkpoint("G", "T", 0)
    assert (replayed.attempt, replayed.end, sorted(replayed.pending), replayed.acked) == \
        (2, 2, [1], {0})
    a.ack(again, 1)
    assert [(c.group, c.end) for c in done] == [("G", 2)]  # the offset may move to 2
    assert a.fifo_checkpoint("G", "T", 0) is None
