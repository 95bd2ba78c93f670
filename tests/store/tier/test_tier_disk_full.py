"""A full local disk with a tier: past diskMaxUsedSpaceRatio the CommitLog segments already in
the tier are deleted at once (whatever their age), sends go on and the tier serves what left the
disk; a segment holding a record not yet in the tier is never deleted."""
from __future__ import annotations

from rocketstore.store.message_store import MessageStore

from .test_tier_store import put, store_cfg
from .tierutil import local_records, mask_phys


def segments(store) -> list[tuple[int, int]]:
    return [(mf.file_from_offset, mf.file_from_offset + mf.file_size)
            for mf in store.commitlog.queue.files]


def test_disk_full_deletes_what_the_tier_holds_first_and_nothing_else(tmp_path):
    with MessageStore(store_cfg(tmp_path)) as s:
        s.clean_service.stop()  # rounds are run by the test, with the usage it says
        put(s, 300, queues=2)
        expected = {q: local_records(s, "TierT", q) for q in (0, 1)}
        assert s.tier.wait_caught_up(30)
        s.tier.stop()  # from here nothing more reaches the tier
        in_tier_below = s.commitlog.max_offset()  # every record below it is in the tier
        put(s, 120, start=300, queues=2)
        before = segments(s)
        assert len(before) > 4

        # under diskMaxUsedSpaceRatio (75 %): nothing young is deleted
        s.clean_service.disk_usage = lambda path: 0.50
        assert s.clean_service.run_once() == 0
        assert segments(s) == before

        # past it (80 %, below the forcible 85 %): the segments wholly in the tier go now
        s.clean_service.disk_usage = lambda path: 0.80
        deleted = s.clean_service.run_once()
        kept = segments(s)
        assert deleted == sum(1 for lo, hi in before[:-1] if hi <= in_tier_below) > 0
        assert kept == [seg for seg in before if seg[1] > in_tier_below or seg == before[-1]]
        assert kept[0][0] <= in_tier_below  # the segment with the first record not in the tier
        assert s.commitlog.min_offset() > 0  # the oldest records left the local disk
        put(s, 10, start=420, queues=2)  # sends go on

        # even at 95 % (not writeable, clean at once) nothing past the tier's reach goes
        s.clean_service.disk_usage = lambda path: 0.95
        s.clean_service.run_once()
        assert segments(s)[0][0] <= in_tier_below

        # every message is still served from offset 0: the tier for what left the disk
        for q in (0, 1):
            got = []
            offset = 0
            while True:
                r = s.get_message("G", "TierT", q, offset, 64)
                if not r.messages:
                    break
                got += [bytes(m) for m in r.buffers]
                offset = r.next_begin_offset
            assert offset >= len(expected[q])
            want = [mask_phys(rec) for _, rec, _ in expected[q]]
            assert [mask_phys(b) for b in got[:len(want)]] == want
