"""The worker↔writer link codec (``broker.workers.link``), sans-IO: what one side encodes the
other decodes, however the bytes are chunked, and a broken length drops the link."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.broker.workers import link as L

puts = st.builds(
    L.Put, seq=st.integers(0, 2**64 - 1), conn=st.integers(0, 2**32 - 1),
    queue_id=st.integers(0, 2**31 - 1), sys_flag=st.integers(-2**31, 2**31 - 1),
    store_ts_pos=st.integers(0, 0xFFFF), body_len=st.integers(0, 2**32 - 1),
    default_queue_nums=st.integers(-2**15, 2**15 - 1), props_off=st.integers(0, 2**32 - 1),
    topic=st.text(min_size=0, max_size=40).filter(lambda t: len(t.encode()) < 256),
    record=st.binary(max_size=300))
results = st.tuples(st.integers(0, 2**64 - 1), st.integers(-2**31, 2**31 - 1),
                    st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1),
                    st.text(max_size=60), st.text(max_size=60))


@settings(max_examples=200, deadline=None)
@given(puts, results, st.integers(0, 2**32 - 1), st.text(max_size=30), st.binary(max_size=200),
       st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_every_kind_round_trips_in_any_chunking(put, res, conn, peer, frame, cuts):
    stream = b"".join([
        b"".join(L.put_msg(put)), L.result_msg(*res), L.open_msg(conn, peer),
        L.close_msg(conn, True), L.frame_head(conn, len(frame)) + frame,
        L.conn_msg(L.PAUSE, conn), L.message(L.STOP)])
    dec = L.LinkDecoder()
    got = []
    pos = 0
    i = 0
    while pos < len(stream):
        n = cuts[i % len(cuts)]
        got += dec.feed(stream[pos:pos + n])
        pos += n
        i += 1
    assert [k for k, _ in got] == [L.PUT, L.RESULT, L.OPEN, L.CLOSE, L.FRAME, L.PAUSE, L.STOP]
    assert L.parse_put(got[0][1]) == put
    assert tuple(L.parse_result(got[1][1])) == res
    assert L.parse_open(got[2][1]) == (conn, peer)
    assert L.parse_close(got[3][1]) == (conn, True)
    assert L.parse_conn(got[4][1]) == conn and got[4][1][4:] == frame
    assert L.parse_conn(got[5][1]) == conn and got[6][1] == b""


def test_a_length_past_any_frame_breaks_the_link():
    dec = L.LinkDecoder()
    with pytest.raises(L.LinkError):
        dec.feed(struct.pack(">IB", L.MAX_LINK_MESSAGE + 1, L.FRAME))
    with pytest.raises(L.LinkError):  # and stays broken: the writer drops that link
        dec.feed(L.message(L.STOP))
    assert L.LinkDecoder().feed(L.message(L.STOP)[:3]) == []  # a part of a header waits
