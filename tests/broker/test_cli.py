"""``rocketstore send`` / ``consume`` against a running broker."""
from __future__ import annotations

import json

from click.testing import CliRunner

from rocketstore.cli import main
from rocketstore.client import PullConsumer

from .test_client_broker import wait_max


def test_send_then_consume_json(server):
    runner = CliRunner()
    r = runner.invoke(main, ["send", "--namesrv", server.namesrv, "--topic", "CliTopic",
                             "--tags", "A", "--keys", "k1,k2", "--queue", "1", "--json",
                             "one", "two"])
    assert r.exit_code == 0, r.output
    sent = [json.loads(line) for line in r.output.splitlines()]
    assert [s["queue_offset"] for s in sent] == [0, 1] and all(s["queue_id"] == 1 for s in sent)
    r = runner.invoke(main, ["send", "--namesrv", server.namesrv, "--topic", "CliTopic",
                             "--batch", "--queue", "1", "--json", "b1", "b2", "b3"])
    assert r.exit_code == 0, r.output
    wait_max(PullConsumer("G0", server.namesrv), "CliTopic", 1, 5)
    r = runner.invoke(main, ["consume", "--namesrv", server.namesrv, "--topic", "CliTopic",
                             "--queue", "1", "--json", "--commit", "--group", "G1"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines()]
    assert [x["body"] for x in rows] == ["one", "two", "b1", "b2", "b3"]
    assert rows[0]["keys"] == ["k1", "k2"] and rows[0]["msg_id"] == sent[0]["msg_id"]
    r = runner.invoke(main, ["consume", "--namesrv", server.namesrv, "--topic", "CliTopic",
                             "--json", "--group", "G1"])
    assert r.exit_code == 0 and r.output == ""  # everything committed
    r = runner.invoke(main, ["consume", "--namesrv", server.namesrv, "--topic", "CliTopic",
                             "--offset", "3", "--queue", "1", "--max", "1"])
    assert r.exit_code == 0 and r.output.strip().endswith("b2")


def test_send_to_a_dead_name_server_fails_with_one_line():
    r = CliRunner().invoke(main, ["send", "--namesrv", "127.0.0.1:1", "--topic", "T", "x",
                                  "--timeout", "1"])
    assert r.exit_code != 0 and "cannot connect" in r.output
