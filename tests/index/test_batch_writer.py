"""The numpy batch writer gives the same bytes as putting keys one by one."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.store.index_file import IndexFile, plan_index_files

from .index_helpers import index_bytes, make_service

stream = st.lists(
    st.tuples(st.integers(0, 2**31 - 1) | st.integers(0, 40),  # hash: wide or heavily colliding
              st.integers(0, 5000),  # phy offset delta
              st.integers(-3000, 5000)),  # store time delta (may go backwards)
    min_size=1, max_size=120)


def _columns(items, t0):
    h = np.array([i[0] for i in items], dtype=np.int64)
    phy = np.cumsum([i[1] for i in items]).astype(np.int64)
    ts = (t0 + np.cumsum([i[2] for i in items])).astype(np.int64)
    return h, phy, ts


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pre=stream, items=stream, slots=st.sampled_from([1, 2, 3, 7, 64]),
       num=st.integers(2, 300), carry=st.booleans(), cuts=st.lists(st.integers(1, 50), max_size=6),
       t0=st.sampled_from([0, 1_700_000_000_000]))
def test_batch_equals_one_by_one(tmp_path_factory, pre, items, slots, num, carry, cuts, t0):
    d = tmp_path_factory.mktemp("bw")
    carry_phy, carry_ts = (12345, t0 - 777 if t0 else 0) if carry else (0, 0)
    a = IndexFile.create(str(d / "a"), slots, num, carry_phy, carry_ts)
    b = IndexFile.create(str(d / "b"), slots, num, carry_phy, carry_ts)
    ph, pphy, pts = _columns(pre, t0)
    # the same prefix already in both files (one by one), then the stream
    for x, y, z in zip(ph.tolist(), pphy.tolist(), pts.tolist()):
        a.put_hash(x, y, z)
        b.put_hash(x, y, z)
    h, phy, ts = _columns(items, t0 + 9000)
    wrote_a = 0
    for x, y, z in zip(h.tolist(), phy.tolist(), ts.tolist()):
        wrote_a += a.put_hash(x, y, z)
    wrote_b, pos = 0, 0
    for c in cuts + [len(h)]:
        n = b.put_batch(h[pos:pos + c], phy[pos:pos + c], ts[pos:pos + c])
        wrote_b += n
        pos += c
        if pos >= len(h):
            break
    assert wrote_a == wrote_b
    assert _read(a.path) == _read(b.path)
    assert (a.hash_slot_count, a.index_count, a.begin_timestamp, a.end_phy_offset) == \
           (b.hash_slot_count, b.index_count, b.begin_timestamp, b.end_phy_offset)
    a.close()
    b.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=stream, num=st.integers(2, 12), pre=st.integers(0, 15))
def test_service_rolls_and_plan_agree(tmp_path_factory, items, num, pre):
    """Service batch puts == service one-by-one puts == files built from plan_index_files."""
    t0 = 1_700_000_000_000
    h, phy, ts = _columns(items, t0)
    phy = phy + 100
    one = make_service(tmp_path_factory.mktemp("one"), slots=5, num=num)
    bat = make_service(tmp_path_factory.mktemp("bat"), slots=5, num=num)
    for svc in (one, bat):  # same pre-existing entries
        for i in range(pre):
            svc.last_file().put_hash(i * 3, i, t0 - 1000 + i)
    for x, y, z in zip(h.tolist(), phy.tolist(), ts.tolist()):
        while not one.last_file().put_hash(x, y, z):
            pass
    bat.put_keys(h, phy, ts)
    assert index_bytes(one) == index_bytes(bat)
    # the pure plan reproduces the same split and headers
    d = tmp_path_factory.mktemp("plan")
    last = None
    out = []
    if pre:
        last = IndexFile.create(str(d / "f0"), 5, num)
        for i in range(pre):
            while not last.put_hash(i * 3, i, t0 - 1000 + i):
                assert last.is_write_full()
                out.append(last)
                last = IndexFile.create(str(d / f"f{len(out)}"), 5, num, last.end_phy_offset,
                                        last.end_timestamp)
    plans = plan_index_files(phy, ts, num - 1, free_in_last=last.free if last else 0,
                             last_end_phy_offset=last.end_phy_offset if last else 0,
                             last_end_timestamp=last.end_timestamp if last else 0)
    for p in plans:
        if p.new_file:
            if last is not None:
                out.append(last)
            last = IndexFile.create(str(d / f"f{len(out)}"), 5, num, p.carry_end_phy_offset,
                                    p.carry_end_timestamp)
        assert last.put_batch(h[p.start:p.stop], phy[p.start:p.stop], ts[p.start:p.stop]) == p.stop - p.start
    if last is not None:
        out.append(last)
    got = [_read(f.path) for f in out]
    # the service may hold one extra empty file after an eager roll; compare the written ones
    exp = index_bytes(bat)[:len(got)]
    assert got == exp
    for f in out:
        f.close()
    one.shutdown()
    bat.shutdown()
