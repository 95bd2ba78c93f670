"""``plan_recovery`` and ``reput_start``: recovery's decisions as pure functions, no disk."""
from rocketstore.config import StoreConfig
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.recovery import SegmentInfo, plan_recovery, reput_start

SEG = 1000
CFG = StoreConfig(store_path_root_dir="/nonexistent")


class Ckpt:
    def __init__(self, physic, logics):
        self.physic_msg_timestamp, self.logics_msg_timestamp = physic, logics

    min_timestamp = StoreCheckpoint.min_timestamp


def segs(*first_ts):
    return [SegmentInfo(i * SEG, ts) for i, ts in enumerate(first_ts)]


def test_normal_recovery_scans_the_last_three_segments():
    p = plan_recovery(segs(1, 2, 3, 4, 5), Ckpt(0, 0), CFG, last_exit_ok=True)
    assert (p.normal, p.start_index, p.start_offset, p.redispatch_from) == (True, 2, 2 * SEG, None)
    assert plan_recovery(segs(1), Ckpt(0, 0), CFG, last_exit_ok=True).start_index == 0
    assert plan_recovery([], Ckpt(0, 0), CFG, last_exit_ok=True).start_offset == 0


def test_abnormal_recovery_starts_at_the_newest_segment_before_the_checkpoint():
    # min timestamp = min(physic, logics) - 3000 = 20_000
    files = segs(10_000, 19_000, 20_000, 20_001, 30_000)
    p = plan_recovery(files, Ckpt(25_000, 23_000), CFG, last_exit_ok=False)
    assert (p.normal, p.start_index, p.redispatch_from) == (False, 2, 2 * SEG)
    # a segment that does not start with a message (0) is never chosen
    p = plan_recovery(segs(10_000, 0, 0), Ckpt(99_000, 99_000), CFG, last_exit_ok=False)
    assert p.start_index == 0
    # nothing old enough: from the first segment
    assert plan_recovery(segs(50_000, 60_000), Ckpt(10, 10), CFG, last_exit_ok=False).start_index == 0
    assert plan_recovery(segs(1), Ckpt(0, 0), CFG.replace(check_crc_on_recover=False),
                         last_exit_ok=False).check_crc is False


def test_reput_start_is_the_lowest_point_a_derived_file_may_lack():
    normal = plan_recovery(segs(1, 2, 3), Ckpt(0, 0), CFG, last_exit_ok=True)
    crashed = plan_recovery(segs(1, 2, 3), Ckpt(10_000, 10_000), CFG, last_exit_ok=False)
    assert reput_start(normal, 2500, 0, 2400, [], {}, None) == 2400
    assert reput_start(normal, 2500, 0, 2400, [1700], {}, 2450) == 1700
    assert reput_start(normal, 2500, 0, 2400, [], {("T", 0): 2100, ("U", 1): 2600}, 2450) == 2100
    assert reput_start(normal, 2500, 0, 2400, [], {}, 900) == 900
    assert reput_start(crashed, 2500, 0, 2400, [], {}, None) == 2 * SEG
    assert reput_start(normal, 2500, 1500, -1, [], {}, 0) == 1500  # never below the min offset
    assert reput_start(normal, 2000, 0, 2400, [], {}, None) == 2000  # nor beyond the valid end
