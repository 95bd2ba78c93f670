"""What a store directory is, and the file sizes it was created with.

``is_store_dir`` tells a store root from any other directory (before anything is read or
written); ``config/store.properties`` records the file sizes a store was created with, so
tools reopen it without a config file (``detect_sizes``), an open adopts them where the
caller left a size at its default (``adopt_saved_sizes``) and refuses a conflicting size up
front (``check_saved_sizes``), before anything could pad or truncate a file to the wrong size.
"""
from __future__ import annotations

import dataclasses
import os

from ..config import StoreConfig
from ..errors import CorruptFileError
from .checkpoint import atomic_write

SIZES_FILE = "store.properties"  # <root>/config/: the file sizes, so tools reopen the store
# what a store directory holds; a directory with none of these is not a store
STORE_MARKERS = ("commitlog", "consumequeue", "index", "checkpoint", "abort", "lock",
                 os.path.join("config", SIZES_FILE))
SIZE_FIELDS = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
               "max_hash_slot_num", "max_index_num")


def sizes_path(root: str) -> str:
    return os.path.join(root, "config", SIZES_FILE)


def is_store_dir(path: str, commitlog_dir: str | None = None) -> bool:
    """Whether ``path`` looks like a store root (any of its files or directories exists)."""
    if not os.path.isdir(path):
        return False
    if commitlog_dir is not None and os.path.isdir(commitlog_dir):
        return True
    return any(os.path.exists(os.path.join(path, m)) for m in STORE_MARKERS)


def detect_sizes(store_dir: str) -> dict:
    """File sizes of an existing store (``config/store.properties``, else measured from its
    files), so it opens without a config file. Reads only."""
    saved = sizes_path(store_dir)
    if os.path.exists(saved):
        cfg = StoreConfig.from_properties(saved)
        return {k: getattr(cfg, k) for k in SIZE_FIELDS}
    out: dict = {}
    cl = os.path.join(store_dir, "commitlog")
    if os.path.isdir(cl):
        names = sorted(n for n in os.listdir(cl) if len(n) == 20 and n.isdigit())
        if names:
            out["mapped_file_size_commitlog"] = os.path.getsize(os.path.join(cl, names[0]))
    cq = os.path.join(store_dir, "consumequeue")
    if os.path.isdir(cq):
        for topic in sorted(os.listdir(cq)):
            tdir = os.path.join(cq, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                d = os.path.join(tdir, qid)
                files = sorted(n for n in os.listdir(d) if len(n) == 20 and n.isdigit()) if os.path.isdir(d) else []
                if files:
                    out["mapped_file_size_consume_queue"] = os.path.getsize(os.path.join(d, files[0]))
                    break
            if "mapped_file_size_consume_queue" in out:
                break
    idx = os.path.join(store_dir, "index")
    if os.path.isdir(idx):
        from .index_service import _file_sizes
        names = sorted(os.listdir(idx))
        if names:
            out["max_hash_slot_num"], out["max_index_num"] = _file_sizes(
                os.path.join(idx, names[0]), None, None)
    return out


def adopt_saved_sizes(cfg: StoreConfig) -> StoreConfig:
    """``cfg`` with the file sizes an existing store was created with (``config/
    store.properties``) wherever ``cfg`` left a size at its default: opening a store needs no
    knowledge of how it was made. A size the caller set to something else still has to match
    (``check_saved_sizes`` refuses the open otherwise)."""
    path = sizes_path(cfg.store_path_root_dir)
    if not os.path.exists(path):
        return cfg
    try:
        saved = StoreConfig.from_properties(path)
    except (OSError, ValueError):
        return cfg  # the check that follows names the file
    defaults = {f.name: f.default for f in dataclasses.fields(StoreConfig)}
    for n in SIZE_FIELDS:  # in place: the broker shares this config object with the store
        if getattr(cfg, n) == defaults[n] and getattr(saved, n) != defaults[n]:
            setattr(cfg, n, getattr(saved, n))
    return cfg


def check_saved_sizes(root: str, cfg: StoreConfig) -> None:
    """A store opened with other file sizes than it was created with is refused up front
    (before anything could pad or truncate a file to the wrong size)."""
    path = sizes_path(root)
    if not os.path.exists(path):
        return
    saved = StoreConfig.from_properties(path)
    for name in SIZE_FIELDS:
        want, have = getattr(saved, name), getattr(cfg, name)
        if want != have:
            raise CorruptFileError(path, f"store was created with {name}={want}, opened with {have}")


def save_sizes(root: str, cfg: StoreConfig) -> None:
    """Record the sizes of a store being created (never rewrites an existing record)."""
    path = sizes_path(root)
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = (f"mappedFileSizeCommitLog={cfg.mapped_file_size_commitlog}\n"
            f"mappedFileSizeConsumeQueue={cfg.mapped_file_size_consume_queue}\n"
            f"maxHashSlotNum={cfg.max_hash_slot_num}\nmaxIndexNum={cfg.max_index_num}\n")
    atomic_write(path, text.encode())
