"""``rocketstore send -`` streams: each stdin line is sent as it arrives with one result line
printed as it is acknowledged, and a broker lost mid-way is reported with the count
acknowledged and the stdin line to resume from."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from rocketstore.client import PullConsumer

from .conftest import start_server, wait_max_offset


def _send_proc(namesrv: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "send", "--namesrv", namesrv,
                             "--topic", "StreamT", "--queue", "0", "--timeout", "3", *extra, "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1)


def _line_within(proc: subprocess.Popen, seconds: float) -> str | None:
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline() if ready else None


def test_each_stdin_line_is_sent_and_reported_as_it_arrives(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    try:
        proc = _send_proc(srv.namesrv, "--json")
        try:
            for i in range(3):
                proc.stdin.write(f"line-{i}\n")
                proc.stdin.flush()
                out = _line_within(proc, 20)  # stdin still open: no waiting for EOF
                assert out, f"no result for line {i} while stdin is open: {proc.stderr.read()}"
                r = json.loads(out)
                assert r["status"] == "SEND_OK" and r["queue_offset"] == i, r
            proc.stdin.close()
            assert proc.wait(30) == 0
            assert proc.stdout.read() == ""
        finally:
            if proc.poll() is None:
                proc.kill()
        with PullConsumer("CG_stream", srv.namesrv) as c:
            assert wait_max_offset(c, "StreamT", 0, 3) == 3
            assert [m.body for m in c.pull("StreamT", 0, 0, 32).messages] == \
                [b"line-0", b"line-1", b"line-2"]
    finally:
        srv.stop()


def test_broker_lost_mid_stream_says_how_many_were_acknowledged(tmp_path):
    srv = start_server(str(tmp_path / "store"))
    proc = _send_proc(srv.namesrv)
    try:
        for i in range(2):
            proc.stdin.write(f"m{i}\n")
            proc.stdin.flush()
            out = _line_within(proc, 20)
            assert out and out.startswith("SEND_OK"), out
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        proc.stdin.write("m2\n")
        proc.stdin.flush()
        proc.stdin.close()
        assert proc.wait(60) == 1
        err = proc.stderr.read()
        assert err.startswith("error: send failed after 2 acknowledged message(s)"), err
        assert "resume with line 3 of standard input" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.stop()
