"""The tier on ``/metrics`` (ops/metrics.py BrokerCollector): upload lag while uploads wait,
the counters after they ran and after a pull the tier answered. Expected values come from the
messages the test put (their local records), never from the tier's own numbers."""
from __future__ import annotations

import dataclasses
import time

import pytest

pytest.importorskip("prometheus_client")

from rocketstore.ops.metrics import BrokerCollector  # noqa: E402
from rocketstore.ops.state import OpsState  # noqa: E402
from rocketstore.store.message_store import MessageStore  # noqa: E402

from .test_tier_store import put, store_cfg, tier_cfg  # noqa: E402
from .tierutil import local_records  # noqa: E402


def tier_samples(store) -> dict[str, float]:
    st = OpsState(store=lambda: store, store_config=store.cfg, topics=None, offsets=None)
    out = {}
    for fam in BrokerCollector(st).collect():
        if fam.name.startswith("rocketstore_tier_"):
            for s in fam.samples:
                out[s.name + "".join(f"{{{v}}}" for v in s.labels.values())] = s.value
    return out


def test_tier_metrics(tmp_path):
    tier = dataclasses.replace(tier_cfg(tmp_path / "tier"), group_commit_count=1_000_000,
                               group_commit_timeout=600_000)  # uploads only when the test says
    with MessageStore(store_cfg(tmp_path, tier=tier, file_reserved_time=0)) as s:
        t0 = time.time()
        put(s, 60, queues=2)
        recs = {q: local_records(s, "TierT", q) for q in (0, 1)}
        first = min(s.read_consume_queue("TierT", q, 0, 1)[0][0] for q in (0, 1))
        m = tier_samples(s)
        assert m["rocketstore_tier_upload_lag_messages"] == 60
        assert m["rocketstore_tier_upload_lag_bytes"] == s.commitlog.max_offset() - first
        assert 0 <= m["rocketstore_tier_upload_lag_seconds"] <= time.time() - t0 + 1
        assert m["rocketstore_tier_uploaded_messages_total"] == 0
        assert s.tier.upload_round(force=True) == 60
        m = tier_samples(s)
        assert m["rocketstore_tier_upload_lag_messages"] == 0
        assert m["rocketstore_tier_upload_lag_bytes"] == 0
        assert m["rocketstore_tier_uploaded_messages_total"] == 60
        assert m["rocketstore_tier_uploaded_bytes_total"] == \
            sum(len(r) for q in (0, 1) for _, r, _ in recs[q])
        assert m["rocketstore_tier_index_pending_keys"] == 60 * 2  # KEYS and UNIQ_KEY each
        assert m["rocketstore_tier_reads_total"] == 0
        assert s.clean_expired_files(force=True) > 0
        r = s.get_message("g", "TierT", 0, 0, 8, decode=False)
        assert len(r.buffers) == 8
        m = tier_samples(s)
        assert m["rocketstore_tier_reads_total"] == 1
        assert m["rocketstore_tier_read_errors_total"] == 0
        assert m["rocketstore_tier_expired_segments_total{COMMIT_LOG}"] == 0
