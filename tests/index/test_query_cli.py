"""``rocketstore query`` end to end on real stores."""
from __future__ import annotations

import json

from click.testing import CliRunner

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main


def _run(*args):
    r = CliRunner().invoke(main, ["query", *args])
    return r.exit_code, r.output


def _store(tmp_path):
    root = tmp_path / "s"
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=64 * 1024,
                      mapped_file_size_consume_queue=2000, max_hash_slot_num=1000,
                      max_index_num=4000)
    with MessageStore(cfg) as st:
        rs = [st.put_message(Message(topic=t, body=b, keys=k)) for t, b, k in [
            ("AaTopic", b"one", ["Aa"]), ("BBTopic", b"two", ["BB"]), ("AaTopic", b"three", ["Aa", "x"])]]
        assert st.wait_dispatched(10)
        uniq = st.look_message_by_offset(rs[1].wrote_offset).uniq_key
    return root, rs, uniq


def test_query_by_key_json_is_exact(tmp_path):
    root, rs, _ = _store(tmp_path)
    code, out = _run("--store", str(root), "--topic", "AaTopic", "--key", "Aa", "--json")
    assert code == 0, out
    d = json.loads(out)
    assert d["count"] == 2
    assert [m["commitlog_offset"] for m in d["messages"]] == [rs[2].wrote_offset, rs[0].wrote_offset]
    assert [m["body"] for m in d["messages"]] == ["three", "one"]
    code, out = _run("--store", str(root), "--topic", "AaTopic", "--key", "BB", "--json")
    assert code == 0 and json.loads(out)["count"] == 0  # same hash, other key: not returned
    code, out = _run("--store", str(root), "--topic", "AaTopic", "--key", "Aa", "--max", "1")
    assert code == 0 and out.startswith("1 message(s)") and "three" in out


def test_query_time_window(tmp_path):
    root, rs, _ = _store(tmp_path)
    after = rs[2].store_timestamp + 1
    code, out = _run("--store", str(root), "--topic", "AaTopic", "--key", "Aa", "--begin", str(after), "--json")
    assert code == 0 and json.loads(out)["count"] == 0
    code, out = _run("--store", str(root), "--topic", "AaTopic", "--key", "Aa",
                     "--begin", "2000-01-01T00:00:00", "--end", "2999-01-01T00:00:00", "--json")
    assert code == 0 and json.loads(out)["count"] == 2


def test_query_by_msg_id_and_uniq_key(tmp_path):
    root, rs, uniq = _store(tmp_path)
    code, out = _run("--store", str(root), "--msg-id", rs[1].msg_id, "--json")
    assert code == 0, out
    d = json.loads(out)
    assert d["query"]["matched_by"] == "msg_id" and d["messages"][0]["body"] == "two"
    code, out = _run("--store", str(root), "--msg-id", uniq, "--json")
    d = json.loads(out)
    assert code == 0 and d["query"]["matched_by"] == "uniq_key"
    assert [m["commitlog_offset"] for m in d["messages"]] == [rs[1].wrote_offset]
    code, out = _run("--store", str(root), "--msg-id", "00" * 16)
    assert code == 1 and out.startswith("0 message(s)")


def test_query_usage_errors(tmp_path):
    root, _, _ = _store(tmp_path)
    code, out = _run("--store", str(root), "--key", "Aa")
    assert code != 0 and "--topic" in out
    code, out = _run("--store", str(root), "--topic", "T")
    assert code != 0 and "exactly one" in out
    code, out = _run("--store", str(tmp_path / "missing"), "--topic", "T", "--key", "k")
    assert code != 0 and "no such store" in out


def test_query_rocketmq_fixture_with_broker_conf(rmq_fixture, tmp_path):
    root, manifest = rmq_fixture
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=131072\nmappedFileSizeConsumeQueue=1600\n"
                    "maxHashSlotNum=211\nmaxIndexNum=128\n")
    code, out = _run("--store", str(root / "store"), "--config", str(conf), "--topic", "AaTopic",
                     "--key", "BB", "--json")
    assert code == 0, out
    d = json.loads(out)
    assert d["count"] == 7 and all(m["topic"] == "AaTopic" and "BB" in m["keys"] for m in d["messages"])
    offs = [m["commitlog_offset"] for m in d["messages"]]
    assert offs == sorted(offs, reverse=True) and offs[0] == 466639
    code, out = _run("--store", str(root / "store"), "--config", str(conf), "--topic", "DevOrders",
                     "--key", "user-11", "--json")
    assert [m["commitlog_offset"] for m in json.loads(out)["messages"]] == [405586, 304466, 252077, 150376]
