"""StoreConfig: RocketMQ defaults, broker.conf parsing, derived sizes."""
import pytest

from rocketstore import StoreConfig


def test_defaults_are_rocketmqs():
    c = StoreConfig(store_path_root_dir="x")
    assert c.mapped_file_size_commitlog == 1073741824
    assert c.mapped_file_size_consume_queue == 6_000_000 and c.cq_file_size == 6_000_000
    assert (c.max_hash_slot_num, c.max_index_num) == (5_000_000, 20_000_000)
    assert c.max_message_size == 4 * 1024 * 1024 and c.flush_disk_type == "ASYNC_FLUSH"
    assert (c.file_reserved_time, c.delete_when, c.disk_max_used_space_ratio) == (72, "04", 75)
    assert c.max_msgs_num_batch == 64 and c.sync_flush_timeout == 5000


def test_cq_size_rounds_up_to_a_unit_multiple():
    assert StoreConfig(store_path_root_dir="x", mapped_file_size_consume_queue=128).cq_file_size == 140


def test_from_properties_reads_camel_case(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# broker\nbrokerName = broker-a\nstorePathRootDir=/data/store\n"
                    "mappedFileSizeCommitLog=131072\nmappedFileSizeConsumeQueue=1600\n"
                    "flushDiskType=SYNC_FLUSH\nmessageIndexEnable=false\nfileReservedTime=48\n"
                    "deleteWhen=03;04\nmaxHashSlotNum=211\n")
    c = StoreConfig.from_properties(str(conf))
    assert c.store_path_root_dir == "/data/store" and c.mapped_file_size_commitlog == 131072
    assert c.cq_file_size == 1600 and c.sync_flush and c.message_index_enable is False
    assert c.file_reserved_time == 48 and c.delete_when == "03;04" and c.max_hash_slot_num == 211
    assert c.extra == {"brokerName": "broker-a"}
    assert StoreConfig.from_properties(str(conf), store_path_root_dir="y").store_path_root_dir == "y"


def test_bad_values_are_clear_errors(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=big\n")
    with pytest.raises(ValueError, match="mappedFileSizeCommitLog"):
        StoreConfig.from_properties(str(conf))
    with pytest.raises(ValueError, match="flush_disk_type"):
        StoreConfig(store_path_root_dir="x", flush_disk_type="FAST")
    with pytest.raises(ValueError, match="mapped_file_size_commitlog"):
        StoreConfig(store_path_root_dir="x", mapped_file_size_commitlog=0)
