"""``StoreConfig`` grouped by component (``cfg.flush``, ``cfg.ha`` …): every field in exactly one
group, the views read through and refuse writes, and the ``broker.conf`` keys stay RocketMQ's."""
from __future__ import annotations

import dataclasses

import pytest

from rocketstore.config import COMPONENTS, StoreConfig


def test_every_field_belongs_to_exactly_one_component():
    fields = sorted(f.name for f in dataclasses.fields(StoreConfig) if f.name != "extra")
    grouped = [n for names in COMPONENTS.values() for n in names]
    assert sorted(grouped) == fields  # none missing, none twice, none unknown


def test_views_read_through_and_are_read_only(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), flush_interval_commitlog=123,
                      broker_role="SLAVE", timer_wheel_enable=False)
    assert cfg.flush.flush_interval_commitlog == 123
    assert cfg.ha.broker_role == "SLAVE" and cfg.timer.timer_wheel_enable is False
    cfg.max_index_num = 4096  # the store adopts saved sizes in place: a view shows it
    assert cfg.index.max_index_num == 4096
    with pytest.raises(AttributeError, match="read-only"):
        cfg.flush.flush_interval_commitlog = 1
    with pytest.raises(AttributeError, match="no 'broker_role'"):
        cfg.flush.broker_role


def test_component_keys_are_the_broker_conf_keys(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=1 << 20,
                      flush_disk_type="SYNC_FLUSH", flush_interval_commitlog=250,
                      flush_commitlog_least_pages=7, file_reserved_time=5, max_index_num=999,
                      enable_consume_queue_ext=True, max_transfer_count_on_message_in_disk=3,
                      generate_uniq_key=False, timer_precision_ms=500, broker_role="SYNC_MASTER",
                      ha_listen_port=20911, slave_timeout=1234)
    keys = {k: v for name in COMPONENTS for k, v in getattr(cfg, name).conf_keys().items()}
    # RocketMQ's own spellings, written out by hand
    for key in ("storePathRootDir", "mappedFileSizeCommitLog", "flushDiskType", "flushIntervalCommitLog",
                "flushCommitLogLeastPages", "fileReservedTime", "maxIndexNum", "enableConsumeQueueExt",
                "maxTransferCountOnMessageInDisk", "timerPrecisionMs", "brokerRole", "haListenPort",
                "slaveTimeout"):
        assert key in keys, key
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={'' if v is None else str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in keys.items() if v is not None))
    back = StoreConfig.from_properties(str(conf))
    assert back.extra == {}
    assert dataclasses.replace(back, extra={}) == dataclasses.replace(cfg, extra={})
