"""Helpers for the index tests: a RocketMQ-written fixture copy and a small in-memory
CommitLog built with the real record codec (encode → patch → decode_records)."""
from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from rocketstore.config import StoreConfig
from rocketstore.format.batch import decode_records
from rocketstore.format.message import (BLANK, Message, decode_message, encode_message,
                                        patch_record)
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.index_service import IndexService

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9.7"
LONG_MAX = (1 << 63) - 1


def _copy_writable(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture
def rmq_fixture(tmp_path):
    """A writable copy of the RocketMQ 4.9.7 fixture directory and its manifest."""
    if not FIXTURE.is_dir():
        pytest.skip(f"fixture not found at {FIXTURE}")
    root = _copy_writable(FIXTURE, tmp_path / "rmq")
    with open(root / "manifest.json", encoding="utf-8") as fh:
        manifest = json.load(fh)
    return root, manifest


def fixture_config(root: Path, store: str = "store", **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root / store), max_hash_slot_num=211,
                       max_index_num=128, mapped_file_size_commitlog=131072, **kw)


class SegmentReader:
    """``read(offset) -> MessageExt | None`` over CommitLog segment files (no store facade)."""

    def __init__(self, commitlog_dir: str | Path) -> None:
        self.segments = []
        for name in sorted(os.listdir(commitlog_dir)):
            with open(os.path.join(commitlog_dir, name), "rb") as fh:
                self.segments.append((int(name), fh.read()))

    def read(self, offset: int):
        for base, data in self.segments:
            if base <= offset < base + len(data):
                m = decode_message(data, offset - base)
                return None if m is BLANK else m
        return None

    def batches(self):
        for base, data in self.segments:
            yield decode_records(data, base_offset=base)


class MiniLog:
    """An append-only CommitLog in memory, written with the real encoder."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.queue_offsets: dict[tuple[str, int], int] = {}

    def append(self, topic: str, keys=None, uniq: str | None = None, ts: int = 1_700_000_000_000,
               sys_flag: int = 0, body: bytes = b"x") -> int:
        props = {}
        if uniq is not None:
            props["UNIQ_KEY"] = uniq
        msg = Message(topic=topic, body=body, keys=keys, properties=props, sys_flag=sys_flag)
        enc = encode_message(msg, msg.all_properties(), born_timestamp=ts,
                             born_host="127.0.0.1:9999", store_host="127.0.0.1:10911",
                             max_body_size=1 << 20)
        pos = len(self.buf)
        self.buf += enc.data
        q = self.queue_offsets.get((topic, 0), 0)
        self.queue_offsets[(topic, 0)] = q + 1
        patch_record(self.buf, pos, enc.store_ts_pos, q, pos, ts)
        return pos

    def records(self, start: int = 0, end: int | None = None):
        return decode_records(bytes(self.buf), start, end if end is not None else len(self.buf))

    def read(self, offset: int):
        if not 0 <= offset < len(self.buf):
            return None
        m = decode_message(self.buf, offset)
        return None if m is BLANK else m


def make_service(tmp_path, slots: int = 97, num: int = 1000, clock=None, last_exit_ok: bool | None = True,
                 **kw) -> IndexService:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), max_hash_slot_num=slots,
                      max_index_num=num, **kw)
    svc = IndexService(cfg, StoreCheckpoint(os.path.join(str(tmp_path), "checkpoint")),
                       **({"clock": clock} if clock else {}))
    if last_exit_ok is not None:
        svc.load(last_exit_ok)
    return svc


def index_bytes(svc: IndexService) -> list[bytes]:
    out = []
    for f in svc.files:
        with open(f.path, "rb") as fh:
            out.append(fh.read())
    return out
