"""``rocketstore verify``: clean stores pass, damage is reported with file and offset (exit 1),
``--json`` is machine-readable, an open store is refused (exit 2)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from rocketstore.store.message_store import MessageStore
from rocketstore.store.verify import verify_store

from .helpers import damage_topic_length, put_n, small_config

CLI = [sys.executable, "-m", "rocketstore.cli", "verify"]


def _cli(*args):
    r = subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def _store(tmp_path):
    root = tmp_path / "s"
    cfg = small_config(root, mapped_file_size_commitlog=8192)
    with MessageStore(cfg) as store:
        rs = put_n(store, 120, "V")
        put_n(store, 30, "W", queue_id=2)
    return root, cfg, rs


def test_clean_store_passes(tmp_path):
    root, cfg, _ = _store(tmp_path)
    rep = verify_store(root, cfg)
    assert rep.ok and not rep.problems
    assert rep.records == 150 and rep.cq_units == 150 and rep.queues == 2
    assert rep.index_entries == 300  # KEYS + UNIQ_KEY per message
    code, out, err = _cli("--store", str(root))
    assert code == 0, out + err
    assert out.strip().endswith("OK")
    code, out, _ = _cli("--store", str(root), "--json")
    d = json.loads(out)
    assert code == 0 and d["ok"] and d["records"] == 150 and d["problems"] == []


def test_damaged_record_reported_with_file_and_offset(tmp_path):
    root, cfg, rs = _store(tmp_path)
    victim = rs[50]
    damage_topic_length(root, victim.wrote_offset, 8192)
    code, out, _ = _cli("--store", str(root), "--json")
    assert code == 1
    d = json.loads(out)
    assert not d["ok"] and d["error_count"] >= 1
    seg = victim.wrote_offset - victim.wrote_offset % 8192
    first = d["problems"][0]
    assert first["file"] == os.path.join("commitlog", f"{seg:020d}")
    assert first["offset"] == victim.wrote_offset and first["severity"] == "error"
    code, out, _ = _cli("--store", str(root))
    assert code == 1 and "DAMAGED" in out and f"@ {victim.wrote_offset}" in out


def test_bad_cq_unit_and_index_entry_reported(tmp_path):
    root, cfg, rs = _store(tmp_path)
    qdir = root / "consumequeue" / "V" / "0"
    first = sorted(os.listdir(qdir))[0]
    with open(qdir / first, "r+b") as fh:  # unit 3 points one record further
        fh.seek(3 * 20)
        fh.write(rs[4].wrote_offset.to_bytes(8, "big"))
    idx = sorted(os.listdir(root / "index"))[0]
    with open(root / "index" / idx, "r+b") as fh:  # entry 1's offset into the middle of a record
        fh.seek(40 + cfg.max_hash_slot_num * 4 + 20 + 4)
        fh.write((rs[0].wrote_offset + 3).to_bytes(8, "big"))
    rep = verify_store(root, cfg)
    assert not rep.ok
    whats = [(p.file, p.offset) for p in rep.errors]
    assert (os.path.join("consumequeue", "V", "0", first), 60) in whats
    assert any(f.startswith("index") for f, _ in whats)


def test_open_store_is_refused(tmp_path):
    root, cfg, _ = _store(tmp_path)
    with MessageStore(cfg):
        code, _, err = _cli("--store", str(root))
    assert code == 2 and "open" in err


def test_rocketmq_written_stores_verify(tmp_path):
    """The RocketMQ 4.9.7 fixture verifies clean; the copy taken while it ran (abort file, an
    empty preallocated segment) verifies with a warning, and clean once opened and closed."""
    import shutil
    import stat

    import pytest

    from rocketstore.config import StoreConfig
    fixture = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rocketmq-4.9.7")
    if not os.path.isdir(fixture):
        pytest.skip("RocketMQ fixture not found")
    shutil.copytree(fixture, tmp_path / "fx")
    for dirpath, dirs, files in os.walk(tmp_path / "fx"):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    sizes = dict(mapped_file_size_commitlog=131072, mapped_file_size_consume_queue=1600,
                 max_hash_slot_num=211, max_index_num=128)
    clean = verify_store(tmp_path / "fx" / "store", StoreConfig(store_path_root_dir=str(tmp_path / "fx" / "store"), **sizes))
    assert clean.ok and not clean.problems and clean.records == 600
    root = tmp_path / "fx" / "store-unclean"
    cfg = StoreConfig(store_path_root_dir=str(root), **sizes)
    rep = verify_store(root, cfg)
    assert rep.ok and rep.warning_count == 1 and rep.records == 600
    with MessageStore(cfg) as store:
        assert not store.recovery_report.normal
    rep = verify_store(root, cfg)
    assert rep.ok and not rep.problems, [str(p) for p in rep.problems]


def test_index_file_emptied_under_an_intact_range_is_reported(tmp_path):
    """Found by the corruption fuzz (seed 2311 of 3000): an index file whose indexCount, slots
    and entries were zeroed, its begin/end CommitLog range left, holds no key any more — every
    key query for its messages misses. ``verify`` must say so (it read as an empty, valid file);
    so must entries left beyond indexCount (beyond the one a killed put may leave)."""
    root, cfg, rs = _store(tmp_path)
    names = sorted(os.listdir(root / "index"))
    path = root / "index" / names[0]
    slots = cfg.max_hash_slot_num
    with open(path, "r+b") as fh:
        fh.seek(32)  # hashSlotCount, indexCount, every slot and the first 5 entries
        fh.write(bytes(8 + slots * 4 + 5 * 20))
    rep = verify_store(root, cfg)
    assert any(p.file == os.path.join("index", names[0]) for p in rep.errors), \
        [str(p) for p in rep.problems]
    root2, cfg2, _ = _store(tmp_path / "b")
    path2 = root2 / "index" / sorted(os.listdir(root2 / "index"))[0]
    with open(path2, "r+b") as fh:  # indexCount 3 of a file holding more entries
        fh.seek(36)
        fh.write((3).to_bytes(4, "big"))
    rep = verify_store(root2, cfg2)
    assert any(p.file.startswith("index") and "beyond indexCount" in p.what for p in rep.errors), \
        [str(p) for p in rep.problems]
