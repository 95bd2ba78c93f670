"""The reput's fast path (columns from the writer) equals decoding the written bytes."""
import numpy as np

from rocketstore import Message, MessageStore
from rocketstore.format.batch import DecodedRecords, decode_records
from tests.conftest import small_config


def _variety():
    yield Message("A", b"plain")
    yield Message("A", b"", tags="TagA", keys=["k1", "k2"], queue_id=1)
    yield Message("日志主题", b"x" * 300, tags="标签", keys="键-1  double  space", queue_id=2)
    yield Message("A", b"v6", tags="T", born_host="[2001:db8::1]:5", store_host="[::1]:10911")
    yield Message("A", b"prepared", sys_flag=0x4, keys=["tx"])
    yield Message("A", b"rollback", sys_flag=0xC, keys=["tx"])
    yield Message("A", b"commit", sys_flag=0x8, keys=["tx"])
    yield Message("Real", b"delayed", tags="TagD", properties={"DELAY": "4"})
    yield Message("Real", b"delayed-too-far", properties={"DELAY": "99"})
    yield Message("A", b"props", properties={"TAGS": "fromprops", "UNIQ_KEY": "U1", "KEYS": "a b"})


def test_feed_columns_equal_decoded_columns(tmp_path):
    cfg = small_config(tmp_path, mapped_file_size_commitlog=2048)
    with MessageStore(cfg) as store:
        store.wait_dispatched(5)
        store.reput.stop()
        start = store.get_max_phy_offset()
        for i in range(6):
            for m in _variety():
                assert store.put_message(m).ok
            assert store.put_messages([Message("B", b"b%d" % j, tags="TagB", keys=[f"bk{j}"], queue_id=3)
                                       for j in range(4)]).ok
        items = list(store.commitlog.dispatch_feed)
        assert items and items[0].start == start
        fed = []
        for it in items:
            fed.append(DecodedRecords.from_dispatch_columns(*it.columns()))
        decoded = []
        for mf, pos, stop in store.commitlog.iter_segments(start, store.get_max_phy_offset()):
            decoded.append(decode_records(mf.mm, pos, stop, base_offset=mf.file_from_offset))
        cat = lambda rs, f: np.concatenate([getattr(r, f) for r in rs])  # noqa: E731
        for f in ("commitlog_offset", "size", "queue_id", "queue_offset", "sys_flag",
                  "store_timestamp", "tags_code"):
            assert cat(fed, f).tolist() == cat(decoded, f).tolist(), f
        lst = lambda rs, m: [x for r in rs for x in getattr(r, m)()]  # noqa: E731
        for m in ("tags", "keys", "uniq_keys"):
            assert lst(fed, m) == lst(decoded, m), m
        assert [t for r in fed for t in r.topic] == [t for r in decoded for t in r.topic]
        assert [p for r in fed for p in r.properties] == [p for r in decoded for p in r.properties]
        store.reput.start()
        assert store.wait_dispatched(5)
        assert len(store.commitlog.dispatch_feed) == 0
        q = store.query_message("A", "tx")
        assert sorted(m.body for m in q.messages) == [b"commit"] * 6 + [b"prepared"] * 6
        assert store.get_max_offset_in_queue("B", 3) == 24
