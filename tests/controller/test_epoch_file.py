"""The controller-mode epoch file (``store/ha/epoch.py``): RocketMQ 5.3.3's checkpoint text,
the ``.bak`` beside it, its append/truncate rules and the consistent point two replicas agree
on. The expected bytes are written out by hand (the CRC is java.util.zip.CRC32 & 0x7fffffff of
the entry lines, the value a Java broker writes; ``test_java_epoch_file`` reads a real one)."""
from __future__ import annotations

import os

import pytest

from rocketstore.store.ha.epoch import (MAX_END, EpochCache, EpochEntry, EpochFileError,
                                        consistent_point, decode, encode, read_file)

# 2 entries, CRC32("1-0\n3-4096\n") & 0x7fffffff, as jshell computes it with java.util.zip.CRC32
TWO = b"2\n1131518206\n1-0\n3-4096\n"


def test_bytes_round_trip_and_bak(tmp_path):
    path = str(tmp_path / "epochFileCheckpoint")
    c = EpochCache(path)
    assert len(c) == 0 and not os.path.exists(path)  # nothing written for no entries
    assert c.append(1, 0)
    assert c.append(3, 4096)
    assert open(path, "rb").read() == TWO
    assert open(path + ".bak", "rb").read() == b"1\n" + str(
        __import__("zlib").crc32(b"1-0\n") & 0x7FFFFFFF).encode() + b"\n1-0\n"
    assert [(e.epoch, e.start_offset, e.end_offset) for e in EpochCache(path).entries()] == \
        [(1, 0, 4096), (3, 4096, MAX_END)]
    assert encode(decode(TWO)) == TWO


def test_damaged_main_file_falls_back_to_bak(tmp_path):
    path = str(tmp_path / "epochFileCheckpoint")
    c = EpochCache(path)
    c.append(1, 0)
    c.append(2, 100)
    with open(path, "r+b") as fh:  # a flipped digit: the CRC no longer matches
        data = fh.read()
        fh.seek(0)
        fh.write(data.replace(b"2-100", b"2-900"))
    with pytest.raises(EpochFileError, match="CRC"):
        decode(open(path, "rb").read())
    assert [(e.epoch, e.start_offset) for e in read_file(path)] == [(1, 0)]  # the .bak
    with pytest.raises(EpochFileError, match="expected 3 entries"):
        decode(b"3\n0\n1-0\n")
    assert [e.start_offset for e in decode(b"1\n0\n5-77\n")] == [77]  # CRC 0: not checked


def test_append_rules_and_truncation(tmp_path):
    c = EpochCache(str(tmp_path / "e"))
    assert c.append(1, 0)
    assert not c.append(1, 50)  # the epoch must grow
    assert not c.append(2, 0)  # and the start offset too (RocketMQ's rule)
    assert c.append(2, 100) and c.append(4, 300)
    assert c.find_by_offset(99).epoch == 1 and c.find_by_offset(100).epoch == 2
    assert c.find_by_offset(10**12).epoch == 4
    assert c.next_entry(2).epoch == 4
    c.truncate_suffix_by_offset(300)  # entries starting at/after the cut go
    assert [(e.epoch, e.end_offset) for e in c.entries()] == [(1, 100), (2, MAX_END)]
    c.truncate_suffix_by_epoch(2)
    assert [e.epoch for e in EpochCache(str(tmp_path / "e")).entries()] == [1]


@pytest.mark.parametrize("local,local_end,master,master_end,want", [
    # same history, the slave behind: its own end
    ([(1, 0), (2, 100)], 150, [(1, 0), (2, 100)], 400, 150),
    # the old master wrote 100..180 in epoch 2; the new master started epoch 3 at 150
    ([(1, 0), (2, 100)], 180, [(1, 0), (2, 100), (3, 150)], 260, 150),
    # the old master's epoch 2 is unknown to the new one (it started epoch 3 at 100)
    ([(1, 0), (2, 100)], 180, [(1, 0), (3, 100)], 260, 100),
    # an epoch with the same number but another start is not shared history
    ([(1, 0), (2, 120)], 180, [(1, 0), (2, 100)], 260, 100),
    # nothing in common
    ([(5, 0)], 10, [(1, 0)], 10, -1),
])
def test_consistent_point(local, local_end, master, master_end, want):
    mk = lambda xs: [EpochEntry(e, s) for e, s in xs]  # noqa: E731
    assert consistent_point(mk(local), local_end, mk(master), master_end) == want
