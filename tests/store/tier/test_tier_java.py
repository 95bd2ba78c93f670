"""RocketMQ 5.3.3's own tiered store reads the tier we wrote: a small Java program compiled
against 5.3.3 (javac-rmq) loads our ``tieredStoreMetadata.json`` with ``DefaultMetadataStore``,
our files with ``FlatFileStore`` over ``PosixFileSegment``, and reads every queue offset."""
from __future__ import annotations

import os
import subprocess

from rocketstore.format.message import decode_message
from rocketstore.store.message_store import MessageStore

from ... import referee
from .test_tier_store import BROKER, CLUSTER, put, store_cfg
from .tierutil import local_records, tier_queue

HERE = os.path.dirname(__file__)


def test_rocketmq_533_reads_our_posix_tier(tmp_path):
    home = referee.home(referee.V5)
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.run([os.path.join(home, "javac-rmq"), "-d", str(classes),
                    os.path.join(HERE, "TierRead.java")], check=True, timeout=120)
    with MessageStore(store_cfg(tmp_path)) as s:
        put(s, 60, queues=2)
        assert s.tier.wait_caught_up(30)
        local = {q: local_records(s, "TierT", q) for q in (0, 1)}
    tier = str(tmp_path / "tier")
    for q in (0, 1):
        r = subprocess.run([os.path.join(home, "java-run"), "TierRead", str(tmp_path / "store"),
                            tier, CLUSTER, BROKER, "TierT", str(q)],
                           env=dict(os.environ, CP_EXTRA=str(classes)), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("range ", "msg "))]
        rows, _, cl_len = tier_queue(tier, CLUSTER, BROKER, "TierT", q)
        assert lines[0] == f"range 0 30 {cl_len}"
        want = [f"msg {qo} {phy} {decode_message(rec, 0).body.decode()}"
                for qo, phy, rec, _ in rows]
        assert lines[1:] == want
        assert [w.split(" ", 3)[3] for w in want] == \
            [decode_message(rec, 0).body.decode() for _, rec, _ in local[q]]


def test_rocketmq_533_queries_our_index(tmp_path):
    """RocketMQ 5.3.3's IndexStoreService finds each key in the INDEX segment we sealed, and
    the items point at the right records of the flat COMMIT_LOG."""
    from .test_tier_index import SLOTS, cfg, put_keyed
    home = referee.home(referee.V5)
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.run([os.path.join(home, "javac-rmq"), "-d", str(classes),
                    os.path.join(HERE, "TierIndexQuery.java")], check=True, timeout=120)
    with MessageStore(cfg(tmp_path)) as s:
        want = put_keyed(s, 40)
        assert s.tier.wait_caught_up(30) and s.tier.seal_index()
    keys = ["k0", "k7", "k39", "even", "nosuchkey"]
    r = subprocess.run([os.path.join(home, "java-run"), "TierIndexQuery", str(tmp_path / "store"),
                        str(tmp_path / "tier"), CLUSTER, BROKER, str(SLOTS), "TierIx", *keys],
                       env=dict(os.environ, CP_EXTRA=str(classes)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    hits: dict[str, set[str]] = {}
    rows = {q: {phy: rec for _, phy, rec, _ in tier_queue(str(tmp_path / "tier"), CLUSTER, BROKER,
                                                          "TierIx", q)[0]} for q in (0, 1)}
    for line in r.stdout.splitlines():
        if line.startswith("hit "):
            _, key, qid, off, size, body = line.split(" ", 5)
            rec = rows[int(qid)][int(off)]
            assert len(rec) == int(size) and decode_message(rec, 0).body.decode() == body
            hits.setdefault(key, set()).add(body)
    assert hits == {k: {b.decode() for b in want[k]} for k in keys if k in want}
