"""Child of the full-disk test: fills a small file system through the store, frees space, puts
again. Prints one JSON line of observations (the parent asserts). Run in a child process so a
SIGBUS (a sparse file written on a full file system) fails the test instead of killing pytest."""
from __future__ import annotations

import json
import os
import sys
import time

from rocketstore.config import StoreConfig
from rocketstore.format.message import Message
from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus


def cfg(root: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=128 * 1024,
                       mapped_file_size_consume_queue=20 * 400, max_hash_slot_num=64,
                       max_index_num=4000, flush_disk_type="SYNC_FLUSH",
                       clean_resource_interval=3_600_000, generate_uniq_key=False)


def main() -> None:
    scenario = sys.argv[2] if len(sys.argv) > 2 else "segment"
    if scenario == "dispatch":
        return dispatch_scenario(sys.argv[1])
    if scenario == "usage":
        return usage_scenario(sys.argv[1])
    mnt = sys.argv[1]
    root = os.path.join(mnt, "store")
    ballast = os.path.join(mnt, "ballast")
    out: dict = {"statuses": {}}
    store = MessageStore(cfg(root))
    acked = []
    # reserve 384 KiB we can give back later
    with open(ballast, "wb") as fh:
        fh.write(b"\xff" * (384 * 1024))
    seq = 0
    first_fail = None
    while seq < 100_000:
        body = f"{seq}|".encode() + b"z" * 900
        r = store.put_message(Message(topic="Full", body=body, keys=[f"k{seq}"] if seq % 10 == 0 else None))
        out["statuses"][r.status.name] = out["statuses"].get(r.status.name, 0) + 1
        if r.ok:
            acked.append((seq, r.wrote_offset))
        elif first_fail is None:
            first_fail = (seq, r.status.name, r.error)
            fails = 1
        else:
            fails += 1
            if fails >= 20:
                break
        seq += 1
    out["first_fail"] = first_fail
    out["acked_before_free"] = len(acked)
    store.flush_service.flush_once()
    store.wait_dispatched(10)
    out["readable_while_full"] = _check(store, acked)
    out["dispatch_error_while_full"] = repr(store.reput.last_error)
    os.unlink(ballast)
    time.sleep(0.3)
    after = []
    for _ in range(50):
        body = f"{seq}|".encode() + b"z" * 900
        r = store.put_message(Message(topic="Full", body=body, keys=[f"k{seq}"]))
        out["statuses"]["after:" + r.status.name] = out["statuses"].get("after:" + r.status.name, 0) + 1
        if r.ok:
            acked.append((seq, r.wrote_offset))
            after.append(seq)
        seq += 1
    out["acked_after_free"] = len(after)
    store.flush_service.flush_once()
    out["dispatched_after_free"] = store.wait_dispatched(10)
    out["readable_after_free"] = _check(store, acked)
    out["query_after_free"] = bool(after) and len(store.query_message("Full", f"k{after[-1]}").messages) == 1
    store.shutdown()
    store = MessageStore(cfg(root))
    out["recovery"] = store.recovery_report.summary()
    out["readable_after_reopen"] = _check(store, acked)
    store.shutdown()
    print(json.dumps(out))


def _fill(path: str) -> None:
    """Write ``path`` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\xff" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def _put(store, seq: int):
    return store.put_message(Message(topic="Full", body=f"{seq}|".encode() + b"z" * 900, keys=[f"k{seq}"]))


def dispatch_scenario(mnt: str) -> None:
    """The disk fills while the CommitLog segment still has room (the blocks allocated ahead of
    its write position): appends succeed, dispatch cannot allocate the next ConsumeQueue file
    (the first holds 20 units, full before the disk fills), pauses, and resumes once space is
    back."""
    root = os.path.join(mnt, "store")
    out: dict = {"statuses": {}}
    store = MessageStore(cfg(root).replace(mapped_file_size_consume_queue=400))
    acked = []
    for seq in range(20):
        r = _put(store, seq)
        acked.append((seq, r.wrote_offset))
    store.wait_dispatched(10)  # the first ConsumeQueue file exists before the disk fills
    _fill(os.path.join(mnt, "ballast"))
    for seq in range(20, 300):
        r = _put(store, seq)
        out["statuses"][r.status.name] = out["statuses"].get(r.status.name, 0) + 1
        if r.ok:
            acked.append((seq, r.wrote_offset))
            # one put at a time: dispatch either takes it or records why it cannot before the next
            # put, so the CommitLog's blocks allocated ahead do not run out first on a slow machine
            _dispatched_or_failed(store, 30)
        elif r.status.name == "SERVICE_NOT_AVAILABLE":
            out.setdefault("refused_because", r.error)
    out["health_while_full"] = store.dispatch_health().ok
    out["dispatch_error_while_full"] = type(store.reput.last_error).__name__
    out["dispatched_while_full"] = store.wait_dispatched(1)
    out["cq_max_while_full"] = store.get_max_offset_in_queue("Full", 0)
    os.unlink(os.path.join(mnt, "ballast"))
    out["dispatched_after_free"] = store.wait_dispatched(10)
    out["health_after_free"] = store.dispatch_health().ok
    out["readable_after_free"] = _check(store, acked)
    out["acked"] = len(acked)
    r = _put(store, 1000)
    out["put_after_free"] = r.status.name
    acked.append((1000, r.wrote_offset))
    store.flush_service.flush_once()
    store.wait_dispatched(10)
    out["query_after_free"] = len(store.query_message("Full", f"k{acked[-2][0]}").messages)
    store.shutdown()
    store = MessageStore(cfg(root).replace(mapped_file_size_consume_queue=400))
    out["readable_after_reopen"] = _check(store, acked)
    store.shutdown()
    print(json.dumps(out))


def _dispatched_or_failed(store, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.reput.last_error is not None or store.wait_dispatched(0.05):
            return
    raise AssertionError(f"dispatch neither progressed nor failed in {timeout} s")


def usage_scenario(mnt: str) -> None:
    """Real disk usage over 90 % marks the store not writeable until space returns."""
    root = os.path.join(mnt, "store")
    store = MessageStore(cfg(root))
    out = {"before": _put(store, 0).status.name}
    _fill(os.path.join(mnt, "ballast"))
    store.clean_service.check_disk()
    out["writeable_full"] = store.put_path.writeable
    out["put_full"] = _put(store, 1).status.name
    os.unlink(os.path.join(mnt, "ballast"))
    store.clean_service.check_disk()
    out["writeable_freed"] = store.put_path.writeable
    out["put_freed"] = _put(store, 2).status.name
    store.shutdown()
    print(json.dumps(out))


def _check(store, acked) -> str:
    got = {}
    off, hi = 0, store.get_max_offset_in_queue("Full", 0)
    while off < hi:
        g = store.get_message("g", "Full", 0, off, 32)
        if g.status is not GetStatus.FOUND:
            return f"offset {off}: {g.status.name}"
        for m in g.messages:
            seq = int(m.body.split(b"|", 1)[0])
            if m.body != f"{seq}|".encode() + b"z" * 900 or seq in got:
                return f"message {seq} corrupted or twice"
            got[seq] = m.commitlog_offset
            off += 1
    missing = [s for s, o in acked if got.get(s) != o]
    return "ok" if not missing else f"{len(missing)} acked missing, e.g. {missing[:3]}"


if __name__ == "__main__":
    main()
