"""Shared helpers for the durability and crash tests: small stores, messages, damage."""
from __future__ import annotations

import os
import struct

from rocketstore.config import StoreConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore


def small_config(root, **kw) -> StoreConfig:
    base = dict(store_path_root_dir=str(root), mapped_file_size_commitlog=64 * 1024,
                mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=512,
                clean_resource_interval=3_600_000)
    base.update(kw)
    return StoreConfig(**base)


def put_n(store: MessageStore, n: int, topic: str = "recoverTopic", queue_id: int = 0,
          body: bytes = b"Once, there was a chance for me!", keys_prefix: str | None = "k",
          start: int = 0):
    out = []
    for i in range(start, start + n):
        keys = [f"{keys_prefix}{i}"] if keys_prefix else None
        r = store.put_message(Message(topic=topic, body=body + str(i).encode(), keys=keys,
                                      queue_id=queue_id))
        assert r.ok, r
        out.append(r)
    return out


def damage_topic_length(root, offset: int, file_size: int) -> None:
    """testRecover's damage: read bodyLen at off+84, zero 16 bytes at off+84+bodyLen+4."""
    seg = offset - offset % file_size
    path = os.path.join(str(root), "commitlog", f"{seg:020d}")
    pos = offset - seg
    with open(path, "r+b") as fh:
        fh.seek(pos + 84)
        body_len = struct.unpack(">i", fh.read(4))[0]
        fh.seek(pos + 84 + body_len + 4)
        fh.write(bytes(16))
        fh.flush()
        os.fsync(fh.fileno())


def touch_abort(root) -> None:
    with open(os.path.join(str(root), "abort"), "w") as fh:
        fh.write("1")


def commitlog_files(root) -> list[str]:
    d = os.path.join(str(root), "commitlog")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def cq_files(root, topic: str, qid: int = 0) -> list[str]:
    d = os.path.join(str(root), "consumequeue", topic, str(qid))
    return sorted(n for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []


def index_files(root) -> list[str]:
    d = os.path.join(str(root), "index")
    return sorted(n for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []
