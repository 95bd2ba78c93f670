"""Run by test_tier_crash: put messages into a store with a tier until killed."""
import sys

from rocketstore.config import StoreConfig, TierConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore

root, tier, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = TierConfig(file_path=tier, broker_cluster_name="CrashC", broker_name="crash-b",
               commitlog_max_size=16384, consume_queue_max_size=400, group_commit_timeout=1,
               group_commit_count=1)
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=1 << 20,
                  mapped_file_size_consume_queue=2000, tier=t, timer_wheel_enable=False)
s = MessageStore(cfg)
print("open", len(s.tier.cut_on_recover), flush=True)
i = start
while True:
    batch = [Message("CrashT", b"m-%07d-" % (i + k) + b"y" * ((i + k) % 200), tags="t",
                     queue_id=(i + k) % 4) for k in range(20)]
    for m in batch:
        assert s.put_message(m).ok
    i += len(batch)
    if i % 200 == 0:
        print(i, flush=True)
