"""The lock file: a second opener — another process or another store in this one — gets
``StoreLockedError`` and changes nothing on disk."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from rocketstore.errors import StoreLockedError
from rocketstore.store.message_store import MessageStore

from .helpers import put_n, small_config


def _snapshot(root) -> dict:
    out = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, hashlib.sha1(fh.read()).hexdigest())
    return out


CHILD = """
import sys
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreLockedError
from rocketstore.store.message_store import MessageStore
try:
    MessageStore(StoreConfig(store_path_root_dir=sys.argv[1], mapped_file_size_commitlog=65536,
                             mapped_file_size_consume_queue=1280, max_hash_slot_num=64,
                             max_index_num=512))
except StoreLockedError as exc:
    print("LOCKED", exc)
else:
    print("OPENED")
"""


def test_second_process_gets_store_locked_error_and_changes_nothing(tmp_path):
    root = tmp_path / "s"
    cfg = small_config(root, flush_interval_consume_queue=3_600_000, flush_interval_commitlog=3_600_000)
    with MessageStore(cfg) as store:
        put_n(store, 20, "A")
        assert store.wait_dispatched(5)
        store.flush_service.flush_once(thorough=True)
        store.flush_service.flush_logics_once(thorough=True)
        before = _snapshot(root)
        out = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.startswith("LOCKED"), out.stdout + out.stderr
        assert _snapshot(root) == before
        with pytest.raises(StoreLockedError):
            MessageStore(cfg)  # a second store in the same process, too
        assert _snapshot(root) == before
        assert store.put_message.__self__ is store and put_n(store, 1, "A", start=50)
    # once closed, another process may open it
    out = subprocess.run([sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("OPENED"), out.stdout + out.stderr
