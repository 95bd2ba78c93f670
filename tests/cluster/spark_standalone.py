"""A real Spark standalone cluster for tests: a master and one worker started with pyspark's own
``spark-class`` (no download), bound to 127.0.0.1, executors in their own JVM and Python
processes. Drivers run in subprocesses (the test run keeps its one local session)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tests.broker.conftest import free_port


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_env(workdir: str) -> dict:
    env = dict(os.environ)
    env.update({"SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOG_DIR": workdir, "SPARK_PID_DIR": workdir,
                "SPARK_NO_DAEMONIZE": "1"})
    from rocketstore.spark.session import CONF_DIR
    env.setdefault("SPARK_CONF_DIR", CONF_DIR)
    return env


@dataclass
class Standalone:
    master_url: str
    workdir: str
    procs: list = field(default_factory=list)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


def _spawn(args: list[str], env: dict, log: str) -> subprocess.Popen:
    return subprocess.Popen(["timeout", "1800", os.path.join(spark_home(), "bin", "spark-class"),
                             *args], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def start_standalone(workdir: str, cores: int = 2, memory: str = "1g") -> Standalone:
    os.makedirs(workdir, exist_ok=True)
    env = spark_env(workdir)
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    cl = Standalone(url, workdir)
    mlog, wlog = os.path.join(workdir, "master.log"), os.path.join(workdir, "worker.log")
    # the shipped log4j config logs errors only; these two lines are how we know they are up
    try:
        cl.procs.append(_spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(port), "--webui-port", str(ui)], env, mlog))
        _wait_port(port, cl.procs[0], mlog)
        cl.procs.append(_spawn(["org.apache.spark.deploy.worker.Worker", url, "--host",
                                "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                "--webui-port", str(free_port()),
                                "--work-dir", os.path.join(workdir, "work")], env, wlog))
        _wait_worker(ui, cl)
    except BaseException:
        cl.stop()
        raise
    return cl


def _wait_port(port: int, proc, log: str, timeout: float = 120) -> None:
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"spark master exited: {open(log).read()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"spark master did not listen: {open(log).read()[-3000:]}")


def _wait_worker(ui: int, cl: Standalone, timeout: float = 120) -> None:
    """Wait until the master's status page lists an ALIVE worker."""
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cl.procs[1].poll() is not None:
            raise RuntimeError("spark worker exited: "
                               + open(os.path.join(cl.workdir, "worker.log")).read()[-3000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                state = json.load(r)
            if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("spark worker did not register with the master")


def run_driver(script: str, args: dict, cwd: str, env: dict, timeout: float = 600) -> dict:
    """Run a driver script (``python script '<json args>'``); its last ``RESULT {json}`` line."""
    p = subprocess.run([sys.executable, script, json.dumps(args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError(f"driver failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
