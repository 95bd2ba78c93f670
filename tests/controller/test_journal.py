"""The controller's journal: what was appended comes back; a torn tail is cut (and kept aside),
never half-applied; a crash between snapshot and log truncation applies nothing twice."""
from __future__ import annotations

import os

from rocketstore.controller.journal import EVENTS, SNAPSHOT, Journal
from rocketstore.controller.state import ReplicasInfo


def _events(n: int) -> list[list[dict]]:
    out = [[{"type": "apply_broker_id", "clusterName": "C", "brokerName": "b", "brokerAddress": "h:1",
             "brokerId": 1, "registerCheckCode": "h:1;0"}],
           [{"type": "elect_master", "brokerName": "b", "newMaster": 1}]]
    for i in range(n):
        out.append([{"type": "apply_broker_id", "clusterName": "C", "brokerName": "b",
                     "brokerAddress": f"h:{i + 2}", "brokerId": i + 2, "registerCheckCode": f"x{i}"}])
        out.append([{"type": "alter_sync_state_set", "brokerName": "b", "syncStateSet": [1, i + 2]}])
    return out


def _apply_all(batches) -> ReplicasInfo:
    s = ReplicasInfo()
    for b in batches:
        for ev in b:
            s.apply(ev)
    return s


def test_reopen_gives_back_every_record(tmp_path):
    j = Journal(str(tmp_path))
    j.open()
    batches = _events(5)
    for b in batches:
        j.append(b)
    j.close()
    j2 = Journal(str(tmp_path))
    assert j2.open().to_json() == _apply_all(batches).to_json()
    assert j2.seq == len(batches) and j2.replayed == len(batches)


def test_torn_tail_is_cut_and_kept_aside(tmp_path):
    j = Journal(str(tmp_path))
    j.open()
    batches = _events(3)
    for b in batches:
        j.append(b)
    j.close()
    path = os.path.join(tmp_path, EVENTS)
    whole = os.path.getsize(path)
    with open(path, "ab") as fh:
        fh.write(b"\x00\x00\x01\x00garbage")  # a record that never finished
    state = Journal(str(tmp_path)).open()
    assert state.to_json() == _apply_all(batches).to_json()
    assert os.path.getsize(path) == whole
    assert [f for f in os.listdir(tmp_path) if ".bad-" in f]
    # a flipped byte in the last record: that record is dropped, the ones before stay
    with open(path, "r+b") as fh:
        fh.seek(whole - 3)
        fh.write(b"#")
    state = Journal(str(tmp_path)).open()
    assert state.to_json() == _apply_all(batches[:-1]).to_json()


def test_compaction_and_a_crash_before_the_log_is_emptied(tmp_path):
    j = Journal(str(tmp_path), compact_bytes=400)
    state = j.open()
    batches = _events(20)
    for b in batches:
        j.append(b)
        for ev in b:
            state.apply(ev)
        j.maybe_compact(state)
    assert os.path.exists(os.path.join(tmp_path, SNAPSHOT))
    assert j.size() < 400 + 300
    j.close()
    assert Journal(str(tmp_path)).open().to_json() == state.to_json()
    # the crash: a snapshot written, the log not yet emptied -> its records are skipped by seq
    j = Journal(str(tmp_path))
    s = j.open()
    log_bytes = open(os.path.join(tmp_path, EVENTS), "rb").read()
    j.snapshot(s)
    j.close()
    with open(os.path.join(tmp_path, EVENTS), "wb") as fh:
        fh.write(log_bytes)
    assert Journal(str(tmp_path)).open().to_json() == state.to_json()


def test_a_failed_fsync_is_undone_and_not_applied(tmp_path, monkeypatch):
    """fault injection: fsync fails once; the decision is refused, its bytes are cut, and the
    next decision is appended where replay will find it."""
    import rocketstore.controller.journal as jmod
    j = Journal(str(tmp_path))
    j.open()
    batches = _events(2)
    j.append(batches[0])
    real = jmod.os.fsync
    calls = {"n": 0}

    def flaky(fd):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        return real(fd)
    monkeypatch.setattr(jmod.os, "fsync", flaky)
    try:
        j.append(batches[1])
        raise AssertionError("the failed append was not refused")
    except OSError:
        pass
    monkeypatch.setattr(jmod.os, "fsync", real)
    for b in batches[2:]:
        j.append(b)
    j.close()
    expected = _apply_all([batches[0]] + batches[2:])
    assert Journal(str(tmp_path)).open().to_json() == expected.to_json()
