"""``MappedFile.write_at``: the first write into a page is a ``pwrite``, later writes inside
pages already written that way are a memory copy. Either way the file holds exactly the bytes
written: checked here with ``os.pread`` on a separate descriptor, against a bytearray model."""
from __future__ import annotations

import os
import random

from rocketstore.store.lazy_file import LazyMappedFile
from rocketstore.store.mapped_file import OS_PAGE_SIZE, MappedFile

SIZE = 8 * OS_PAGE_SIZE


def _on_disk(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, SIZE, 0)
    finally:
        os.close(fd)


def _units_then_jumps(mf, model: bytearray) -> None:
    rng = random.Random(7)
    pos = 100
    for i in range(600):  # 20-byte units from a position inside the first page, across pages
        data = (i * 7919).to_bytes(20, "big")
        mf.write_at(pos, data)
        model[pos:pos + 20] = data
        pos += 20
    # the pages the units crossed are warm: the writes after each page's first were copies
    assert mf._warm == (0, -(-pos // OS_PAGE_SIZE) * OS_PAGE_SIZE)
    for _ in range(200):  # then anywhere: behind, ahead, over page edges
        p = rng.randrange(0, SIZE - 50)
        data = rng.randbytes(rng.randrange(1, 50))
        mf.write_at(p, data)
        model[p:p + len(data)] = data


def test_write_at_bytes_are_the_same_either_way(tmp_path):
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 0, SIZE, create=True, sparse=True)
    try:
        mf.ensure_allocated(SIZE)
        model = bytearray(SIZE)
        _units_then_jumps(mf, model)
        assert bytes(mf.mm[:SIZE]) == bytes(model)
        assert _on_disk(path) == bytes(model)
    finally:
        mf.close()


def test_a_lazy_file_written_after_its_mapping_was_released(tmp_path):
    path = str(tmp_path / "00000000000000000000")
    lf = LazyMappedFile(path, 0, SIZE, create=True)
    try:
        lf.ensure_allocated(SIZE)
        model = bytearray(SIZE)
        _units_then_jumps(lf, model)
        lf._release(blocking=True)  # descriptor and mapping dropped, as the open-file budget does
        for k in range(300):  # warm pages again: written through a new mapping
            data = bytes([k % 251]) * 20
            lf.write_at(100 + 20 * k, data)
            model[100 + 20 * k:120 + 20 * k] = data
        assert _on_disk(path) == bytes(model)
    finally:
        lf.close()
