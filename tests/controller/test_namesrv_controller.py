"""``rocketstore namesrv --config namesrv.conf`` with ``enableControllerInNamesrv=true``: the
controller runs beside the name server, on the port ``controllerDLegerPeers`` gives it (as
RocketMQ's NamesrvStartup does), with its decisions as durable as a standalone one's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from rocketstore.controller.codes import ControllerRequest as Q
from rocketstore.controller.codes import ControllerResponse as R
from rocketstore.remoting.codes import RequestCode
from tests.broker.conftest import free_port

from .conftest import body_of, call


def _start(conf: str) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(__file__), "..", "..", "src"),
                                         env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "namesrv", "--config", conf,
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True, env=env)
    line = proc.stdout.readline()
    assert line, f"namesrv exited {proc.wait(10)}"
    return proc, json.loads(line)


def test_controller_in_the_name_server(tmp_path):
    ns_port, ctl_port = free_port(), free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort={ns_port}\nkvConfigPath={tmp_path}/kv.json\n"
                    "enableControllerInNamesrv=true\ncontrollerDLegerGroup=group1\n"
                    f"controllerDLegerPeers=n0-127.0.0.1:{ctl_port}\ncontrollerDLegerSelfId=n0\n"
                    f"controllerStorePath={tmp_path}/cstore\nenableElectUncleanMaster=true\n")
    proc, ready = _start(str(conf))
    try:
        assert ready["namesrv"] == f"127.0.0.1:{ns_port}"
        assert ready["controller"] == f"127.0.0.1:{ctl_port}"
        ctl = ready["controller"]
        meta = call(ctl, Q.CONTROLLER_GET_METADATA_INFO, {}).ext_fields
        assert (meta["group"], meta["controllerLeaderId"], meta["controllerLeaderAddress"]) == \
            ("group1", "n0", ctl)
        assert call(ready["namesrv"], RequestCode.GET_BROKER_CLUSTER_INFO, {}).code == R.SUCCESS
        # the name server's port is not the controller's
        assert call(ready["namesrv"], Q.CONTROLLER_GET_METADATA_INFO, {}).code == R.REQUEST_CODE_NOT_SUPPORTED
        r = call(ctl, Q.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": "b",
                 "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:7;1"})
        assert r.code == R.SUCCESS
        assert "enableElectUncleanMaster=true" in call(ctl, Q.GET_CONTROLLER_CONFIG, {}).body.decode()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    proc, ready = _start(str(conf))
    try:
        r = call(ready["controller"], Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "C", "brokerName": "b"})
        assert r.ext_fields["nextBrokerId"] == "2"
        r = call(ready["controller"], Q.CONTROLLER_GET_SYNC_STATE_DATA, {}, ["b"])
        assert body_of(r)["replicasInfoTable"]["b"]["notInSyncReplicas"][0]["brokerAddress"] == "127.0.0.1:7"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
