"""Planning pieces of the network source, without Spark or a broker: option parsing, range
splitting and the per-trigger rate limit."""
import pytest

from rocketstore.spark.network import NetOptions, QueueRange, parse_offsets, split_ranges
from rocketstore.spark.network_source import rate_limit


def test_parse_offsets():
    assert parse_offsets("s", None, "earliest") == "earliest"
    assert parse_offsets("s", " LATEST ", "earliest") == "latest"
    assert parse_offsets("s", '{"T": {"b-a:0": 4, "b-a:1": -2}}', "x") == \
        {"T": {"b-a:0": 4, "b-a:1": -2}}
    for bad in ('{"T": {"0": 4}}', '{"T": {"b:x": 4}}', '{"T": {"b:0": -3}}', '{"T": 4}',
                "[1]", "{oops"):
        with pytest.raises(ValueError):
            parse_offsets("s", bad, "x")


def test_options_are_checked():
    with pytest.raises(ValueError, match="namesrv"):
        NetOptions({"topic": "T"})
    with pytest.raises(ValueError, match="exactly one"):
        NetOptions({"namesrv": "h:1", "topic": "T", "topicPattern": "T.*"})
    with pytest.raises(ValueError, match="topicPattern"):
        NetOptions({"namesrv": "h:1", "topicPattern": "(("})
    with pytest.raises(ValueError, match="batch queries only"):
        NetOptions({"namesrv": "h:1", "topic": "T", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(ValueError, match="positive"):
        NetOptions({"namesrv": "h:1", "topic": "T", "minPartitions": "0"})
    o = NetOptions({"namesrv": "h:1", "topic": "A, B", "startingTimestamp": "1970-01-01T00:00:01Z"})
    assert o.topics == ["A", "B"] and o.starting_ts == 1000 and o.starting == "earliest"
    assert NetOptions({"namesrv": "h:1", "topic": "T"}, streaming=True).starting == "latest"


def test_split_ranges_covers_each_range_exactly():
    rs = [QueueRange("T", "a", 0, 10, 110), QueueRange("T", "b", 1, 0, 7),
          QueueRange("T", "a", 2, 5, 5)]
    out = split_ranges(rs, 12)
    assert len(out) >= 12
    for r in rs:
        mine = sorted((p.start, p.end) for p in out if (p.broker, p.queue_id) == (r.broker, r.queue_id))
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(r.start, r.end))
    assert split_ranges(rs, 2) == rs


def test_rate_limit_shares_by_backlog_and_never_exceeds():
    start = {"T": {"a:0": 0, "a:1": 100}}
    latest = {"T": {"a:0": 90, "a:1": 110, "b:0": 50}}
    first = {("T", "b:0"): 20}  # a new queue starts at its oldest offset
    end = rate_limit(start, latest, first, 26)
    took = {k: end["T"][k] - start["T"].get(k, first.get(("T", k), 0)) for k in latest["T"]}
    assert sum(took.values()) == 26 and all(v >= 0 for v in took.values())
    assert took["a:0"] > took["b:0"] > took["a:1"]  # backlogs 90, 30, 10
    assert rate_limit(start, latest, first, 10**9) == {"T": {"a:0": 90, "a:1": 110, "b:0": 50}}
    # a queue that left the route keeps its offset
    assert rate_limit({"T": {"x:0": 7}}, {}, {}, 5) == {"T": {"x:0": 7}}
