"""Model-based test: dispatch batches, flush, crash (unflushed state lost), clean reopen,
expiry — after every step every key query equals a brute-force scan of the log."""
from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rocketstore.config import StoreConfig
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.index_service import IndexService

from .index_helpers import MiniLog

TOPICS = ["AaTopic", "BBTopic"]
KEYS = ["Aa", "BB", "k1", "k2"]
T0 = 1_700_000_000_000


class IndexMachine(RuleBasedStateMachine):
    @initialize(num=st.integers(2, 9), slots=st.sampled_from([1, 3, 211]))
    def setup(self, num, slots):
        self.dir = tempfile.mkdtemp(prefix="idx-sm-")
        self.cfg = StoreConfig(store_path_root_dir=self.dir, max_hash_slot_num=slots, max_index_num=num)
        self.log = MiniLog()
        self.model: list[tuple[int, str, list[str], str, int]] = []
        self.dispatched = 0  # log bytes handed to the index
        self.min_offset = 0  # CommitLog min offset after "cleaning"
        self.ts = T0
        self.svc = self._open(True)

    def _open(self, clean: bool) -> IndexService:
        svc = IndexService(self.cfg, StoreCheckpoint(os.path.join(self.dir, "checkpoint")))
        svc.load(clean)
        return svc

    def _redispatch(self) -> None:
        """What the reput does after an open: from min(dispatch_from_offset, what it had)."""
        start = max(self.min_offset, min(self.svc.dispatch_from_offset(), self.dispatched))
        if start < self.dispatched:
            self.svc.dispatch(self.log.records(start, self.dispatched))

    @rule(n=st.integers(1, 6), gap=st.integers(0, 1500),
          keys=st.lists(st.lists(st.sampled_from(KEYS), max_size=3), min_size=6, max_size=6),
          topics=st.lists(st.sampled_from(TOPICS), min_size=6, max_size=6))
    def put_and_dispatch(self, n, gap, keys, topics):
        start = len(self.log.buf)
        for i in range(n):
            self.ts += gap
            uniq = f"U{len(self.model)}"
            off = self.log.append(topics[i], keys[i] or None, uniq=uniq, ts=self.ts)
            self.model.append((off, topics[i], keys[i], uniq, self.ts))
        self.svc.dispatch(self.log.records(start))
        self.dispatched = len(self.log.buf)

    @rule()
    def flush(self):
        self.svc.flush()

    @rule()
    def clean_reopen(self):
        self.svc.shutdown()
        self.svc = self._open(True)
        self._redispatch()

    @rule()
    def crash(self):
        """Kill: background flushes finish or not, the writable file is never flushed; the
        on-disk checkpoint is what survives."""
        self.svc._join_flushers()
        for f in self.svc.files:
            f.close()
        self.svc = self._open(False)
        self._redispatch()

    @rule(frac=st.floats(0, 1))
    def expire(self, frac):
        if not self.model:
            return
        cut = self.model[int(frac * (len(self.model) - 1))][0]
        self.min_offset = max(self.min_offset, cut)
        self.svc.delete_expired_file(self.min_offset)

    @invariant()
    def every_key_indexed_once(self):
        if not hasattr(self, "svc") or self.min_offset > 0:
            return
        assert sum(f.entry_count for f in self.svc.files) == sum(1 + len(m[2]) for m in self.model)

    @invariant()
    def queries_are_exact(self):
        if not hasattr(self, "svc"):
            return
        for topic in TOPICS:
            for key in KEYS + ["U0", f"U{max(0, len(self.model) - 1)}"]:
                exp = [m[0] for m in reversed(self.model)
                       if m[1] == topic and (key in m[2] or m[3] == key)]
                got = [m.commitlog_offset for m in
                       self.svc.query_message(topic, key, 64, 0, None, self.log.read).messages]
                # expired files may be gone: only the newest part is guaranteed, and all of it
                # above the newest deleted offset; nothing may be wrong or doubled
                assert len(set(got)) == len(got)
                assert set(got) <= set(exp)
                live = [o for o in exp if o >= self.min_offset][:64]
                assert got[:len(live)] == live, (topic, key)

    def teardown(self):
        if hasattr(self, "svc"):
            self.svc.shutdown()
            shutil.rmtree(self.dir, ignore_errors=True)


IndexMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=20, deadline=None)
TestIndexMachine = IndexMachine.TestCase
