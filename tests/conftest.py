import importlib
import os
import shutil

import pytest

from rocketstore import StoreConfig, _native
from tests import referee

# RocketMQ's releases resolved by set-up (scripts/referee/resolve.py): ROCKETMQ_HOME (4.9.7),
# ROCKETMQ5_HOME (5.3.3), ROCKETMQ5_NEWEST_HOME (the newest 5.x), unless already set.
referee.export_env()

# A store written by Apache RocketMQ 4.9.7's own code (copied from the shared fixtures, with
# its manifest of what RocketMQ wrote and answered). Tests copy it before opening it.
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rocketmq-4.9.7")


def small_config(root, **kw) -> StoreConfig:
    """A store config with tiny files, for fast tests."""
    base = dict(store_path_root_dir=str(root), mapped_file_size_commitlog=64 * 1024,
                mapped_file_size_consume_queue=20 * 100, max_hash_slot_num=211,
                max_index_num=400, flush_interval_commitlog=50)
    base.update(kw)
    return StoreConfig(**base)


@pytest.fixture
def cfg(tmp_path):
    return small_config(tmp_path / "store")


@pytest.fixture(scope="session")
def rocketmq_manifest():
    import json
    path = os.path.join(FIXTURE, "manifest.json")
    if not os.path.exists(path):
        pytest.skip(f"RocketMQ fixture not found at {FIXTURE}")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture
def rocketmq_store(tmp_path, rocketmq_manifest):
    """Copies of the RocketMQ-written stores: (clean dir, unclean dir)."""
    clean = tmp_path / "rmq-clean"
    unclean = tmp_path / "rmq-unclean"
    shutil.copytree(os.path.join(FIXTURE, "store"), clean)
    shutil.copytree(os.path.join(FIXTURE, "store-unclean"), unclean)
    return clean, unclean


def fixture_config(root, manifest, **kw) -> StoreConfig:
    c = manifest["config"]
    return StoreConfig(store_path_root_dir=str(root),
                       mapped_file_size_commitlog=c["mappedFileSizeCommitLog"],
                       mapped_file_size_consume_queue=c["mappedFileSizeConsumeQueue"],
                       max_hash_slot_num=c["maxHashSlotNum"], max_index_num=c["maxIndexNum"],
                       store_host="127.0.0.1:10911", **kw)


def fill_disk(path, leave: int = 0) -> None:
    """Fill the file system holding ``path`` (a new ballast file) to the last block, then give
    ``leave`` bytes back. Writing until ENOSPC holds where "write what statvfs says is free"
    does not: the free count moves under a store's own threads."""
    import errno

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                if os.write(fd, chunk) == 0:
                    break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)


@pytest.fixture
def tmpfs_factory(tmp_path):
    """Mount small tmpfs file systems (for full-disk tests); skips where mounting is not allowed."""
    import subprocess
    mounted = []

    def mount(size: str):
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root (CI: run as root or grant CAP_SYS_ADMIN)")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)



def compiled_or_skip(module: str, what: str):
    """The compiled twin ``module`` for a module of equivalence tests; else the whole module is
    skipped with the reason shown (pure Python forced, or no C compiler at install)."""
    if _native.PURE_PYTHON:
        pytest.skip(f"ROCKETSTORE_PURE_PYTHON is set: the compiled {what} ({module}) is not loaded",
                    allow_module_level=True)
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # a build without a C compiler
        pytest.skip(f"the compiled {what} ({module}) is not built: {exc}", allow_module_level=True)
