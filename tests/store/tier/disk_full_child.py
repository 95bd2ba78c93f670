"""Run by test_tier_disk_full inside its own mount namespace, with ``argv[1]`` a small tmpfs
(the posix tier's disk) holding a ballast file: fill the tier's disk, check the error and that
sends go on, free the ballast, check the tier caught up with no gap and no duplicate."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))

from rocketstore.config import StoreConfig, TierConfig  # noqa: E402
from rocketstore.format.message import Message  # noqa: E402
from rocketstore.store.message_store import MessageStore  # noqa: E402
from tests.store.tier.tierutil import check_queue_matches  # noqa: E402


def main() -> None:
    mnt, store = sys.argv[1], sys.argv[2]
    tier = os.path.join(mnt, "tier")
    t = TierConfig(file_path=tier, broker_cluster_name="FullC", broker_name="full-b",
                   commitlog_max_size=16384, consume_queue_max_size=20000,
                   group_commit_timeout=600_000, group_commit_count=1_000_000)
    cfg = StoreConfig(store_path_root_dir=store, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=6000, tier=t, timer_wheel_enable=False)
    out: dict = {}
    with MessageStore(cfg) as s:
        for i in range(800):
            assert s.put_message(Message("FullT", b"full-%04d-" % i + b"d" * 60, keys=f"f{i}",
                                         queue_id=i % 2)).ok
        assert s.wait_dispatched(10)
        try:
            s.tier.upload_round(force=True)
            out["error"] = None
        except OSError as e:
            out["error"] = str(e)
        for i in range(800, 900):  # sends go on while the tier's disk is full
            assert s.put_message(Message("FullT", b"full-%04d-" % i + b"d" * 60, keys=f"f{i}",
                                         queue_id=i % 2)).ok
        assert s.wait_dispatched(10)
        os.unlink(os.path.join(mnt, "ballast"))
        out["caught_up"] = s.tier.wait_caught_up(30)
        for q in (0, 1):
            check_queue_matches(tier, "FullC", "full-b", s, "FullT", q, expect_count=450)
        out["keys"] = len(s.query_message("FullT", "f777", 4).messages)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
