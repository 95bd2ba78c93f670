"""Test stores for the Spark tests, written through the real ``MessageStore`` facade.

``build_store`` puts a varied mix (topics incl. a non-ASCII one, queues, tags, keys with
duplicates, user properties, empty bodies, IPv6 born hosts, delayed messages, prepared /
commit / rollback transaction records) and returns what the store itself answers for every
record (``look_message_by_offset``), which is what the Spark reader must reproduce.
"""
from __future__ import annotations

import os
import random
import shutil
import stat
import struct
from pathlib import Path

from rocketstore import Message, MessageStore, PutStatus, StoreConfig
from rocketstore.format.message import (MESSAGE_MAGIC_CODE_V2, Message as _Msg, decode_message,
                                        encode_message, patch_record)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9.7"
TOPICS = ["TopicA", "TopicB", "日志主题"]


def config(root, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(root), mapped_file_size_commitlog=32 * 1024,
                mapped_file_size_consume_queue=20 * 40, max_hash_slot_num=53, max_index_num=120,
                flush_interval_commitlog=50)
    base.update(kw)
    return StoreConfig(**base)


def message(i: int, rnd: random.Random) -> Message:
    topic = TOPICS[i % len(TOPICS)]
    body = bytes(rnd.getrandbits(8) for _ in range(rnd.choice([0, 0, 5, 40, 200, 700])))
    keys = [f"key-{i}", f"grp-{i % 7}"] + (["dup", "dup"] if i % 11 == 0 else [])
    props = {"seq": str(i)} if i % 3 == 0 else None
    m = Message(topic=topic, body=body, tags=rnd.choice([None, "TagA", "TagB", "标签"]), keys=keys,
                properties=props, queue_id=i % 4)
    if i % 9 == 0:
        m.born_host = "[2001:db8::7]:40001"
    if i % 13 == 5:
        m.properties = dict(m.properties or {}, DELAY="2")
    if i % 17 == 3:
        m.sys_flag = rnd.choice([0x4, 0x8, 0xC])
    return m


def build_store(root, n: int = 400, seed: int = 7, **cfg_kw) -> dict:
    """Put ``n`` varied messages; returns {"cfg", "offsets", "expected": {offset: MessageExt}}."""
    rnd = random.Random(seed)
    cfg = config(root, **cfg_kw)
    offsets = []
    with MessageStore(cfg) as store:
        for i in range(n):
            r = store.put_message(message(i, rnd))
            assert r.status is PutStatus.PUT_OK, r
            offsets.append(r.wrote_offset)
        assert store.wait_dispatched(timeout=10)
        expected = {o: store.look_message_by_offset(o) for o in offsets}
        max_off = store.get_max_phy_offset()
    return {"cfg": cfg, "offsets": offsets, "expected": expected, "max_offset": max_off}


def segment_paths(root) -> list[str]:
    d = os.path.join(str(root), "commitlog")
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.isdigit()]


def append_raw(root, offset: int, data: bytes) -> None:
    """Write raw bytes at CommitLog ``offset`` (inside an existing segment)."""
    for p in segment_paths(root):
        base = int(os.path.basename(p))
        if base <= offset < base + os.path.getsize(p):
            assert offset - base + len(data) <= os.path.getsize(p), "does not fit in the segment"
            with open(p, "r+b") as fh:
                fh.seek(offset - base)
                fh.write(data)
            return
    raise AssertionError(f"no segment holds offset {offset}")


def v2_record(topic: str, body: bytes, phys: int, queue_offset: int, store_ts: int,
              props: dict[str, str] | None = None) -> bytes:
    """A 5.x 'v2' record: magic 0xDAA320AB and a 2-byte topic length."""
    props = dict(props or {})
    enc = encode_message(_Msg(topic=topic, body=body), props, born_timestamp=store_ts - 1,
                         born_host="10.0.0.1:1234", store_host="127.0.0.1:10911",
                         max_body_size=1 << 22)
    buf = bytearray(enc.data)
    patch_record(buf, 0, enc.store_ts_pos, queue_offset, phys, store_ts)
    tpos = 88 + len(body)  # IPv4 hosts: the topic length byte follows the body
    assert buf[tpos] == len(topic.encode())
    out = bytearray(buf[:tpos]) + struct.pack(">h", buf[tpos]) + buf[tpos + 1:]
    struct.pack_into(">ii", out, 0, len(out), MESSAGE_MAGIC_CODE_V2)
    decoded = decode_message(out)
    assert decoded.topic == topic and decoded.body == body
    return bytes(out)


def copy_fixture(dst) -> Path:
    """A writable copy of the RocketMQ 4.9.7 store fixture (clean shutdown)."""
    dst = Path(dst)
    shutil.copytree(FIXTURE / "store", dst)
    for r, ds, fs in os.walk(dst):
        for name in ds + fs:
            p = os.path.join(r, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    return dst
