"""RocketMQ's own name server and broker (the releases resolved by set-up, see tests/referee.py),
started by tests on 127.0.0.1 with free ports and stopped by PID."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from tests import referee
from tests.broker.conftest import free_port, free_port_block


def rocketmq_home(version: str = referee.V4) -> str:
    """The launchers of RocketMQ ``version`` resolved at set-up (skips with set-up's reason)."""
    return referee.home(version)


def _free_port_block(n: int) -> int:
    """A port p such that p-2 .. p+n-1 are free (the Java broker uses listenPort-2 and +1)."""
    return free_port_block(n + 2) + 2


def _wait_port(port: int, proc: subprocess.Popen, log: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"java process exited {proc.returncode}: {open(log).read()[-3000:]}")
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"java process did not listen on {port}: {open(log).read()[-3000:]}")


@dataclass
class JavaProc:
    proc: subprocess.Popen
    addr: str
    log_path: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _spawn(home: str, tool: str, conf: str, log_path: str, env_extra: dict) -> subprocess.Popen:
    env = dict(os.environ, **env_extra)
    env.pop("ROCKETMQ_HOME", None)
    out = open(log_path, "w")
    # own process group: the wrapper execs java, but kill the whole group to be sure
    return subprocess.Popen(["timeout", "600", os.path.join(home, tool), "-c", conf],
                            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.path.dirname(conf),
                            start_new_session=True)


def start_java_namesrv(home: str, workdir: str) -> JavaProc:
    os.makedirs(workdir, exist_ok=True)
    port = free_port()
    conf = os.path.join(workdir, "namesrv.conf")
    with open(conf, "w") as fh:
        fh.write(f"listenPort={port}\n")
    log = os.path.join(workdir, "namesrv.log")
    proc = _spawn(home, "namesrv", conf, log, {"NAMESRV_HEAP": "128m",
                                                 "JAVA_OPT_EXT": f"-Duser.home={workdir}"})
    _wait_port(port, proc, log)
    return JavaProc(proc, f"127.0.0.1:{port}", log)


def start_java_broker(home: str, workdir: str, namesrv: str, name: str,
                      cluster: str = "DefaultCluster", extra: dict | None = None) -> JavaProc:
    os.makedirs(workdir, exist_ok=True)
    port = _free_port_block(2)
    store = os.path.join(workdir, "store")
    conf = os.path.join(workdir, "broker.conf")
    with open(conf, "w") as fh:
        fh.write("\n".join([
            f"brokerClusterName={cluster}", f"brokerName={name}", "brokerId=0",
            f"namesrvAddr={namesrv}", f"listenPort={port}", "brokerIP1=127.0.0.1",
            f"storePathRootDir={store}", f"storePathCommitLog={store}/commitlog",
            "autoCreateTopicEnable=true", "mappedFileSizeCommitLog=4194304",
            "mappedFileSizeConsumeQueue=60000", "flushDiskType=ASYNC_FLUSH",
            "deleteWhen=04", "fileReservedTime=48",
            # a loaded test machine (2 cores, three suites, JVMs and Spark side by side) must
            # not turn the referee's answers into flow control: RocketMQ's fast failure answers
            # SYSTEM_BUSY ("[TIMEOUT_CLEAN_QUEUE]broker busy") to a send that waited 200 ms in
            # its queue, and "[PC_SYNCHRONIZED]" to one that waited 1 s on the CommitLog lock
            "brokerFastFailureEnable=false", "osPageCacheBusyTimeOutMills=10000",
            *(f"{k}={v}" for k, v in (extra or {}).items()), ""]))
    log = os.path.join(workdir, "broker.log")
    proc = _spawn(home, "broker", conf, log, {"BROKER_HEAP": "256m",
                                                "JAVA_OPT_EXT": f"-Duser.home={workdir}"})
    _wait_port(port, proc, log)
    if str((extra or {}).get("enableControllerMode", "false")).lower() != "true":
        _wait_registered(namesrv, f"127.0.0.1:{port}")
    return JavaProc(proc, f"127.0.0.1:{port}", log)


def _wait_registered(namesrv: str, addr: str, timeout: float = 60) -> None:
    """Until the name server lists the broker: RocketMQ's broker listens first and registers a
    moment later (seconds on a loaded machine), and a client that looks a route up in between
    gets "No topic route info". A broker in controller mode registers once the controller gave
    it a role: callers wait for that themselves."""
    from rocketstore.remoting.codes import RequestCode
    from tests.broker.admin_wire import call

    first = namesrv.split(";")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = call(first, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=5)
            if r.code == 0 and addr.encode() in (r.body or b""):
                return
        except OSError:
            pass
        time.sleep(0.2)


def start_java_controller(home: str, workdir: str, extra: dict | None = None) -> JavaProc:
    """RocketMQ 5's ControllerStartup, one DLedger peer (``n0``) on a free port."""
    os.makedirs(workdir, exist_ok=True)
    port = free_port()
    conf = os.path.join(workdir, "controller.conf")
    with open(conf, "w") as fh:
        fh.write("\n".join([
            "controllerDLegerGroup=group1", f"controllerDLegerPeers=n0-127.0.0.1:{port}",
            "controllerDLegerSelfId=n0", f"controllerStorePath={workdir}/store",
            *(f"{k}={v}" for k, v in (extra or {}).items()), ""]))
    log = os.path.join(workdir, "controller.log")
    proc = _spawn(home, "controller", conf, log, {"CONTROLLER_HEAP": "128m",
                                                    "JAVA_OPT_EXT": f"-Duser.home={workdir}"})
    _wait_port(port, proc, log)
    return JavaProc(proc, f"127.0.0.1:{port}", log)


def start_java_controller_group(home: str, workdir: str, n: int = 3,
                                extra: dict | None = None) -> list[JavaProc]:
    """RocketMQ 5's ControllerStartup as a DLedger group of ``n`` peers (``n0`` .. ``n{n-1}``), each
    on a free port (a peer's controller requests and DLedger share that port), started side by
    side; ``";".join(p.addr for p in group)`` is the brokers' ``controllerAddr``."""
    ports = [free_port() for _ in range(n)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    procs: list[tuple[subprocess.Popen, str, int]] = []
    for i, port in enumerate(ports):
        d = os.path.join(workdir, f"n{i}")
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "controller.conf")
        with open(conf, "w") as fh:
            fh.write("\n".join([
                "controllerDLegerGroup=group1", f"controllerDLegerPeers={peers}",
                f"controllerDLegerSelfId=n{i}", f"controllerStorePath={d}/store",
                *(f"{k}={v}" for k, v in (extra or {}).items()), ""]))
        log = os.path.join(d, "controller.log")
        procs.append((_spawn(home, "controller", conf, log, {"CONTROLLER_HEAP": "128m",
                                                              "JAVA_OPT_EXT": f"-Duser.home={d}"}),
                      log, port))
    out = []
    try:
        for proc, log, port in procs:
            _wait_port(port, proc, log)
            out.append(JavaProc(proc, f"127.0.0.1:{port}", log))
    except Exception:
        for proc, _, _ in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        raise
    return out


def controller_mode_broker(home: str, workdir: str, namesrv: str, controller: str, name: str,
                           cluster: str = "DefaultCluster", extra: dict | None = None) -> JavaProc:
    """A RocketMQ 5 broker in controller mode: the controller gives it its id and role."""
    conf = {"brokerId": "-1", "brokerRole": "SLAVE", "enableControllerMode": "true",
            "controllerAddr": controller, "allAckInSyncStateSet": "true",
            "brokerHeartbeatInterval": "1000", "controllerHeartBeatTimeoutMills": "6000",
            "syncBrokerMetadataPeriod": "1000", "checkSyncStateSetPeriod": "1000",
            "syncControllerMetadataPeriod": "3000", "sendMessageThreadPoolNums": "2"}
    conf.update(extra or {})
    return start_java_broker(home, workdir, namesrv, name, cluster, conf)


def start_java_proxy(home: str, workdir: str, namesrv: str, cluster: str = "DefaultCluster",
                     extra: dict | None = None) -> tuple[JavaProc, str]:
    """RocketMQ 5's proxy in cluster mode (``proxy -pc rmq-proxy.json``) in front of the brokers
    of ``cluster`` at ``namesrv``; returns it and its gRPC endpoint (host:port). Its remoting
    port is free too; it needs one broker of ``cluster`` registered before it starts (it makes
    its system topics on the cluster)."""
    import json

    os.makedirs(workdir, exist_ok=True)
    grpc_port, remoting_port = free_port(), free_port()
    conf = os.path.join(workdir, "rmq-proxy.json")
    with open(conf, "w") as fh:
        json.dump({"proxyMode": "cluster", "namesrvAddr": namesrv, "rocketMQClusterName": cluster,
                   "grpcServerPort": grpc_port, "remotingListenPort": remoting_port,
                   **(extra or {})}, fh)
    log = os.path.join(workdir, "proxy.log")
    env = dict(os.environ, PROXY_HEAP="256m", JAVA_OPT_EXT=f"-Duser.home={workdir}")
    env.pop("ROCKETMQ_HOME", None)
    proc = subprocess.Popen(["timeout", "600", os.path.join(home, "proxy"), "-pc", conf],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            cwd=workdir, start_new_session=True)
    _wait_port(grpc_port, proc, log)
    return JavaProc(proc, f"127.0.0.1:{remoting_port}", log), f"127.0.0.1:{grpc_port}"
