"""A model-based test of the store (hypothesis stateful): random puts, batches, clean reopens
and SIGKILLed writer processes against a plain Python model of topics, queues and keys.

The model is a dict ``(topic, queue) -> [(body, keys, properties)]``; after every step the
store must hold exactly the model in every queue (dense offsets from 0, same bytes), answer a
key query with exactly the model's messages for that key, and recover from a kill without
truncating anything acknowledged. ``ROCKETSTORE_MODEL_EXAMPLES`` (default 6) and
``ROCKETSTORE_MODEL_STEPS`` (default 12) size the run.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rocketstore import Message, MessageStore, StoreConfig

TOPICS = ["MA", "MB"]
QUEUES = [0, 1, 2]
KEYS = ["k1", "k2", "k 3".replace(" ", "_"), "nul\x00key", "ü"]


def _cfg(root: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=4096,
                       mapped_file_size_consume_queue=20 * 16, max_hash_slot_num=17,
                       max_index_num=40, clean_resource_interval=3_600_000)


messages = st.tuples(st.binary(max_size=300),
                     st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
                     st.sampled_from([{}, {"p": "v"}, {"p": "a\x00b"}]))

CHILD = r"""
import json, os, signal, sys
from rocketstore import Message, MessageStore
from tests.store.test_store_model import _cfg
root, todo = sys.argv[1], json.loads(sys.stdin.read())
s = MessageStore(_cfg(root))
for topic, qid, body_hex, keys, props in todo:
    r = s.put_message(Message(topic, bytes.fromhex(body_hex), keys=keys, properties=props,
                              queue_id=qid))
    print(json.dumps([r.status.name, r.queue_offset]), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="rocketstore-model-")
        self.root = os.path.join(self.dir, "store")
        self.store = MessageStore(_cfg(self.root))
        self.model: dict[tuple[str, int], list] = {(t, q): [] for t in TOPICS for q in QUEUES}

    def teardown(self) -> None:
        if self.store is not None:
            self.store.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _append(self, topic, qid, msg, queue_offset) -> None:
        assert queue_offset == len(self.model[(topic, qid)])
        self.model[(topic, qid)].append(msg)

    @rule(topic=st.sampled_from(TOPICS), qid=st.sampled_from(QUEUES), msg=messages)
    def put(self, topic, qid, msg):
        body, keys, props = msg
        r = self.store.put_message(Message(topic, body, keys=keys, properties=props, queue_id=qid))
        assert r.ok, r
        self._append(topic, qid, msg, r.queue_offset)

    @rule(topic=st.sampled_from(TOPICS), qid=st.sampled_from(QUEUES),
          batch=st.lists(messages, min_size=1, max_size=4))
    def put_batch(self, topic, qid, batch):
        r = self.store.put_messages([Message(topic, b, keys=k, properties=p, queue_id=qid)
                                     for b, k, p in batch])
        assert r.ok, r
        for i, msg in enumerate(batch):
            self._append(topic, qid, msg, r.queue_offset + i)

    @rule()
    def clean_reopen(self):
        self.store.shutdown()
        self.store = MessageStore(_cfg(self.root))
        assert self.store.last_exit_ok
        assert self.store.recovery_report.truncated_at is None, self.store.recovery_report.summary()

    @rule(todo=st.lists(st.tuples(st.sampled_from(TOPICS), st.sampled_from(QUEUES), messages),
                        min_size=1, max_size=6))
    def killed_writer(self, todo):
        """Another process opens the store, puts, and is SIGKILLed; then this one reopens."""
        self.store.shutdown()
        self.store = None
        payload = [[t, q, b.hex(), k, p] for t, q, (b, k, p) in todo]
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        p = subprocess.run([sys.executable, "-c", CHILD, self.root], input=json.dumps(payload),
                           capture_output=True, text=True, timeout=120, cwd=repo)
        assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
        acks = [json.loads(line) for line in p.stdout.splitlines()]
        assert len(acks) == len(todo)
        for (topic, qid, msg), (status, qo) in zip(todo, acks):
            assert status == "PUT_OK"
            self._append(topic, qid, msg, qo)
        self.store = MessageStore(_cfg(self.root))
        assert not self.store.last_exit_ok
        assert self.store.recovery_report.truncated_at is None, self.store.recovery_report.summary()

    @invariant()
    def matches_the_model(self):
        s = self.store
        assert s.wait_dispatched(30), s.dispatch_health()
        for (topic, qid), want in self.model.items():
            assert s.get_max_offset_in_queue(topic, qid) == len(want)
            got, off = [], 0
            while off < len(want):
                g = s.get_message("g", topic, qid, off, 32)
                assert g.messages, (topic, qid, off, g.status)
                got += g.messages
                off = g.next_begin_offset
            assert [m.queue_offset for m in got] == list(range(len(want)))
            for m, (body, keys, props) in zip(got, want):
                assert m.body == body and m.keys == keys
                assert {k: v for k, v in m.properties.items() if k == "p"} == props
        for topic in TOPICS:
            for key in KEYS:
                want = sum(1 for q in QUEUES for _b, keys, _p in self.model[(topic, q)] if key in keys)
                hits = s.query_message(topic, key, max_num=64).messages
                assert all(key in m.keys for m in hits)
                assert len(hits) == min(want, 64), (topic, key, want, len(hits))


StoreModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("ROCKETSTORE_MODEL_EXAMPLES", "6")),
    stateful_step_count=int(os.environ.get("ROCKETSTORE_MODEL_STEPS", "12")),
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_store_model = StoreModel.TestCase
