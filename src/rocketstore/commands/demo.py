"""``rocketstore demo``: the main job end to end on the embedded defaults.

Writes a few thousand messages across topics and queues (single puts and batches, tags, keys,
an IPv6 host, a delayed and a transactional record), reads them back through the
ConsumeQueues, queries by key and message id, reopens the store, and finishes with the Spark
step (rebuild of ConsumeQueue/index files and SQL over the CommitLog).
"""
from __future__ import annotations

import os
import random
import shutil
import time

import click

from ._common import emit_json, json_option

TOPICS = ("Orders", "Payments", "Events")


@click.command("demo")
@click.option("--store", "store_dir", default="demo-store", show_default=True,
              type=click.Path(file_okay=False), help="Where to write the demo store (recreated).")
@click.option("--messages", default=5000, show_default=True, type=int)
@click.option("--spark/--no-spark", "with_spark", default=True, show_default=True,
              help="Finish with the Spark step.")
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]).")
@json_option
def command(store_dir, messages, with_spark, master, as_json):
    """Write, read, query and rebuild a demo store; print what was done."""
    from .. import GetStatus, Message, MessageStore, StoreConfig
    if os.path.exists(store_dir):
        shutil.rmtree(store_dir)
    cfg = StoreConfig(store_path_root_dir=store_dir, mapped_file_size_commitlog=1 << 20,
                      mapped_file_size_consume_queue=20 * 1000, max_hash_slot_num=4099,
                      max_index_num=8192)
    rnd = random.Random(7)
    report: dict = {"store": os.path.abspath(store_dir)}
    say = (lambda *a: None) if as_json else click.echo
    t0 = time.perf_counter()
    sent: dict[tuple[str, int], int] = {}
    with MessageStore(cfg) as store:
        n = 0
        probe = None
        while n < messages:
            topic = rnd.choice(TOPICS)
            qid = rnd.randrange(4)
            if rnd.random() < 0.2:
                k = min(16, messages - n)
                batch = [Message(topic, b"batch body %d" % (n + i), tags="TagB", keys=[f"order-{(n + i) % 500}"],
                                 queue_id=qid) for i in range(k)]
                r = store.put_messages(batch)
            else:
                k = 1
                host = "[2001:db8::7]:40000" if n % 97 == 0 else None
                r = store.put_message(Message(topic, os.urandom(rnd.randrange(16, 512)),
                                              tags=rnd.choice(("TagA", "TagB", "TagC")),
                                              keys=[f"order-{n % 500}", f"user-{n % 37}"],
                                              queue_id=qid, born_host=host))
            assert r.ok, r
            if k == 1 and n % 500 == 42 % 500 or probe is None:
                probe = (topic, f"order-{n % 500}")
            sent[(topic, qid)] = sent.get((topic, qid), 0) + k
            n += k
        delayed = store.put_message(Message("Orders", b"later", tags="TagA", properties={"DELAY": "2"}))
        store.wait_dispatched(30)
        put_s = time.perf_counter() - t0
        say(f"wrote {n} messages to {len(sent)} queues in {put_s:.2f}s "
            f"({n / put_s:,.0f} msg/s), CommitLog {store.get_max_phy_offset():,} bytes in "
            f"{len(store.commitlog.queue.files)} segment(s)")
        read = 0
        for (topic, qid), count in sorted(sent.items()):
            off = 0
            while True:
                g = store.get_message("demo", topic, qid, off, 32)
                if g.status is not GetStatus.FOUND:
                    break
                read += len(g.messages)
                off = g.next_begin_offset
            assert off == count, (topic, qid, off, count)
        say(f"read back {read} messages through the ConsumeQueues (every queue dense from 0)")
        q = store.query_message(probe[0], probe[1], max_num=64)
        assert all(probe[1] in m.keys for m in q.messages)
        say(f"query {probe[0]}#{probe[1]}: {len(q.messages)} message(s), newest at offset "
            f"{q.messages[0].commitlog_offset if q.messages else '-'}")
        v = store.view_message_by_id(delayed.msg_id)
        say(f"message {delayed.msg_id} (delay level 2) is parked in {v.topic} queue {v.queue_id}")
        report.update(written=n, read=read, queues=len(sent), put_seconds=round(put_s, 3),
                      query_hits=len(q.messages), commitlog_bytes=store.get_max_phy_offset())
    with MessageStore(cfg) as store:
        total = sum(store.get_max_offset_in_queue(t, q) for t, q in sent)
        say(f"reopened: clean={store.last_exit_ok}, {total} messages in the queues")
        report["reopened_total"] = total
    if with_spark:
        try:
            from ..spark import demo_step
        except ImportError as exc:  # the spark extra is not installed
            raise click.ClickException(f"Spark step needs `pip install rocketstore[spark]`: {exc}") from exc
        say("Spark step (embedded local[*] unless --master):")
        rows = demo_step(store_dir, master=master, echo=say)
        report["spark"] = rows
    if as_json:
        emit_json(report)
