"""An epoch file written by RocketMQ 5.3.3's own broker in controller mode, read with our
``store/ha/epoch.py``: the entries are those the broker reports over GET_BROKER_EPOCH_CACHE
(1007), and our encoder writes the file back byte for byte. The broker runs under our
controller (two epochs in one file are read in ``test_epoch_file``, and a Java master's entries
arrive over the HA handshake in the mixed-group tests)."""
from __future__ import annotations

from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.store.ha.epoch import decode, encode, read_file
from tests import referee
from tests.cluster import java_rocketmq as jr
from tests.ha.ha_helpers import wait_for

from .conftest import body_of, call, stop_all, write_conf
from .test_java_brokers import BN, send_some, sync_state

pytestmark = referee.skip_unless(referee.V5)


def test_java_epoch_file_reads_as_the_broker_reports(controllers, tmp_path):
    home = referee.home(referee.V5)
    procs = []
    try:
        ns = jr.start_java_namesrv(home, str(tmp_path / "ns"))
        procs.append(ns)
        ctl = controllers(write_conf(str(tmp_path / "controller.conf"), str(tmp_path / "cstore"),
                                     scanNotActiveBrokerInterval=1000), str(tmp_path / "ctl.log"))
        b1 = jr.controller_mode_broker(home, str(tmp_path / "b1"), ns.addr, ctl.addr, BN)
        procs.append(b1)
        wait_for(lambda: sync_state(ctl.addr).get("masterBrokerId") == 1, 60, "the master", 0.5)
        acked: dict[str, bytes] = {}
        send_some(ns.addr, 20, 0, acked)
        cache = body_of(call(b1.addr, Q.GET_BROKER_EPOCH_CACHE, {}))
        reported = [(e["epoch"], e["startOffset"]) for e in cache["epochList"]]
        b1.stop()
        procs.remove(b1)
    finally:
        stop_all(procs)
    path = str(tmp_path / "b1" / "store" / "epochFileCheckpoint")
    entries = read_file(path)
    assert [(e.epoch, e.start_offset) for e in entries] == reported
    assert reported == [(1, 0)]
    assert cache["maxOffset"] > 0  # the sends were stored in epoch 1
    raw = open(path, "rb").read()
    assert encode(decode(raw)) == raw
