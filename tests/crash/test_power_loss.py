"""Power loss, not just a killed process: unsynced pages are lost.

A SIGKILL keeps the page cache, so it cannot tell SYNC_FLUSH from ASYNC_FLUSH. Here the writer
child runs with the store's power-loss probe on (``store/syncprobe.py``): at every point where
the store makes a file durable (fdatasync, msync, atomic replace, creation with its directory
synced) the probe copies that file, as it then is, to a shadow directory — before the caller
learns the sync returned. The parent kills the child at a random moment and builds the disk a
power loss could leave, per 4 KiB page: the last synced copy, or (chance 1/2 per page, as the
kernel may have written any dirty page back) the newer bytes the dead process left; small files
the store replaces atomically (checkpoint, abort, config) are one version or the other, whole;
a file never synced is absent. Then it opens that disk and checks, against the writer's own
acknowledgements:

* SYNC_FLUSH: every acknowledged message is there, intact, by ConsumeQueue and by key;
* ASYNC_FLUSH: what was lost is a tail: every acknowledged message below the CommitLog's last
  synced position survives, and no message survives after a lost one;
* recovery never cuts below the checkpoint's durable point: every message stored before the
  (surviving) checkpoint's physicMsgTimestamp is there.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rocketstore.store.message_store import MessageStore
from rocketstore.store.results import GetStatus

pytestmark = pytest.mark.crash

RUNS = int(os.environ.get("ROCKETSTORE_POWER_LOSS_RUNS", "3"))
PAGE = 4096
WHOLE_FILES = {"checkpoint", "abort", "store.properties"}

CHILD = r"""
import json, sys
from rocketstore import Message, MessageStore, StoreConfig
root, flush = sys.argv[1], sys.argv[2]
cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=32 * 1024,
                  mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=97, max_index_num=400,
                  flush_disk_type=flush, flush_interval_commitlog=20, flush_commitlog_least_pages=1,
                  flush_interval_consume_queue=50, clean_resource_interval=3_600_000)
s = MessageStore(cfg)
print("READY", flush=True)
seq = 0
while True:
    topic, qid = ("PowerA", seq % 2) if seq % 3 else ("PowerB", 0)
    r = s.put_message(Message(topic, b"%d|" % seq + bytes(seq % 200), keys=["pk%d" % seq],
                              queue_id=qid))
    if r.ok:
        print(json.dumps([seq, r.wrote_offset, r.wrote_bytes, r.store_timestamp, topic, qid,
                          r.queue_offset]), flush=True)
    seq += 1
"""


def _config(root, flush):
    from rocketstore import StoreConfig
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=32 * 1024,
                       mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=97,
                       max_index_num=400, flush_disk_type=flush, clean_resource_interval=3_600_000)


def _run_writer(root, shadow, flush, rng):
    env = dict(os.environ, ROCKETSTORE_SYNC_SHADOW=f"{shadow}:{root}")
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(root), flush], stdout=subprocess.PIPE,
                         text=True, env=env)
    acked = []
    try:
        assert p.stdout.readline().strip() == "READY"
        want = rng.randint(40, 400)
        deadline = time.monotonic() + 60
        while len(acked) < want and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            acked.append(json.loads(line))
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # acknowledgements still in the pipe were given before the kill, too
    for line in p.stdout.read().splitlines():
        try:
            acked.append(json.loads(line))
        except ValueError:
            pass  # a line cut by the kill
    return acked


def _power_loss_disk(root, shadow, out, rng):
    """The disk a power loss could leave (see the module doc)."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            live = os.path.join(dirpath, name)
            rel = os.path.relpath(live, root)
            synced = os.path.join(shadow, rel)
            dst = os.path.join(out, rel)
            if name.endswith(".tmp") or not os.path.exists(synced):
                continue  # never made durable: gone
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(synced, "rb") as fh:
                old = fh.read()
            with open(live, "rb") as fh:
                new = fh.read()
            if name in WHOLE_FILES:
                data = new if rng.random() < 0.5 else old
            else:
                data = bytearray(old + bytes(max(0, len(new) - len(old))))
                for p in range(0, len(new), PAGE):
                    if rng.random() < 0.5:
                        data[p:p + PAGE] = new[p:p + PAGE]
                data = bytes(data)
            with open(dst, "wb") as fh:
                fh.write(data)


def _durable_commitlog_end(shadow) -> int:
    """Where the CommitLog was last synced up to (contiguously from its start)."""
    d = os.path.join(shadow, "commitlog")
    end = 0
    for name in sorted(n for n in os.listdir(d) if n.isdigit()):
        with open(os.path.join(d, name + ".pos")) as fh:
            upto = json.load(fh)["upto"]
        base = int(name)
        if base > end:
            break
        end = max(end, base + upto)
    return end


def _checkpoint_physic(root) -> int:
    try:
        with open(os.path.join(root, "checkpoint"), "rb") as fh:
            raw = fh.read(8)
    except FileNotFoundError:
        return 0
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else 0


def _survivors(store, acked):
    """Acked seqs found intact by ConsumeQueue, and checked by key for each."""
    found = {}
    for topic, qid in (("PowerA", 0), ("PowerA", 1), ("PowerB", 0)):
        off = store.get_min_offset_in_queue(topic, qid)
        while off < store.get_max_offset_in_queue(topic, qid):
            g = store.get_message("g", topic, qid, off, 32)
            assert g.status is GetStatus.FOUND, (topic, qid, off, g.status)
            for m in g.messages:
                seq = int(m.body.split(b"|")[0])
                assert m.body == b"%d|" % seq + bytes(seq % 200) and m.keys == [f"pk{seq}"]
                assert seq not in found, f"message {seq} twice"
                found[seq] = m.commitlog_offset
            off = g.next_begin_offset
    by_seq = {a[0]: a for a in acked}
    for seq, off in found.items():
        if seq in by_seq:
            assert off == by_seq[seq][1]
    return found


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
@pytest.mark.parametrize("run", range(RUNS))
def test_power_loss(tmp_path, flush, run):
    rng = random.Random(f"{flush}-{run}")
    root, shadow, disk = tmp_path / "live", tmp_path / "shadow", tmp_path / "disk"
    acked = _run_writer(root, shadow, flush, rng)
    assert acked, "the writer acknowledged nothing"
    _power_loss_disk(root, shadow, disk, rng)
    durable_end = _durable_commitlog_end(shadow)
    physic = _checkpoint_physic(disk)
    with MessageStore(_config(disk, flush)) as store:
        assert store.wait_dispatched(30), store.dispatch_health()
        found = _survivors(store, acked)
        lost = [a for a in acked if a[0] not in found]
        what = (flush, len(acked), len(lost), durable_end, store.recovery_report.summary())
        if flush == "SYNC_FLUSH":
            assert not lost, what  # acknowledged means fsynced
        else:
            # only a tail: everything synced survives, nothing survives after a lost message
            assert all(a[1] + a[2] > durable_end for a in lost), what
            first_lost = min((a[1] for a in lost), default=None)
            assert first_lost is None or all(off < first_lost for off in found.values()), what
        # the checkpoint's durable point: every message stored before physicMsgTimestamp
        # survives (strictly before: the flush records the time of the last record it synced,
        # and later records of the same millisecond may lie beyond what it synced)
        early = [a for a in acked if a[3] < physic and a[0] not in found]
        assert not early, (what, physic, early[:5])
        for a in rng.sample(acked, min(20, len(acked))):
            if a[0] in found:
                got = store.query_message(a[4], f"pk{a[0]}").messages
                assert [m.commitlog_offset for m in got] == [a[1]], what
