"""Every code block of README.md runs, in order, as a new user would run it.

Blocks are fenced with a language: ``python`` blocks run in a fresh interpreter started by the
venv's python *by full path, no activation* (no ``VIRTUAL_ENV``, the venv's ``bin`` not on
PATH, no ``PYSPARK_PYTHON``); ``sh`` blocks run line by line in bash (a ``$ `` prompt marks the
commands of a block that also shows output; ``# ...`` is a comment; ``&`` or a server command
starts a server, whose first line — the banner — must name only ports that listen, and which is
stopped at the end of its block and must exit 0); ``yaml`` and ``properties`` blocks must parse
and are used as the configuration of their section's broker. An untagged block fails the test.

The examples name RocketMQ's default ports; the test runs them against servers on free ports:
``127.0.0.1:9876`` / ``h1:9876`` (name server) and ``127.0.0.1:10911`` (broker) are rewritten
to a live ``rocketstore serve`` of the block's section (plain ACL and SQL92 sections get brokers
configured by their own blocks); ports a block's own servers bind are rewritten to free ones.
A ``properties`` block whose first line is ``# NAME.conf`` is the file a later ``--config
NAME.conf`` reads (its ports rewritten likewise). ``make`` targets are checked with ``make -n`` (they build the venv and run this suite);
``python -m pytest`` commands run with ``--collect-only`` (the long runs take 25 minutes);
``mqadmin`` runs when ``ROCKETMQ_HOME`` has RocketMQ's Java build, and is skipped otherwise.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)
BIND_FLAGS = ("--port", "--namesrv-port", "--metrics-port", "--console", "--grpc-port")
SERVERS = ("serve", "namesrv", "console")
# for working on the README only: skip the examples that start Spark (minutes on a busy machine)
SKIP_SPARK = os.environ.get("ROCKETSTORE_README_SKIP_SPARK") == "1"


def _free_port() -> int:
    from tests.broker.conftest import free_port  # shared by every test process (see there)
    return free_port()


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def blocks() -> list[tuple[str, str, str, int]]:
    """(section, language, text, line) of every fenced block."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        heads = re.findall(r"^## (.+)$", text[:m.start()], re.M)
        out.append((heads[-1] if heads else "", m.group(1).strip(), m.group(2), line))
    return out


def _clean_env(bindir: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env["PATH"] = os.pathsep.join([str(bindir), *path])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


class Context:
    """One live broker (name server + broker ports) the examples of a section talk to."""

    def __init__(self, work: Path, name: str, env: dict, *conf_lines: str,
                 acl_yaml: str | None = None) -> None:
        self.ns, self.broker = _free_port(), _free_port()
        store = work / f"live-{name}"
        args = ["rocketstore", "serve", "--store", str(store), "--port", str(self.broker),
                "--namesrv-port", str(self.ns), "-o", "mapped_file_size_commitlog=4194304",
                "-o", "mapped_file_size_consume_queue=60000"]
        if conf_lines:
            conf = work / f"{name}.conf"
            conf.write_text("\n".join(conf_lines) + "\n")
            args += ["--config", str(conf)]
        if acl_yaml is not None:
            (store / "conf").mkdir(parents=True)
            (store / "conf" / "plain_acl.yml").write_text(acl_yaml)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, cwd=work)
        banner = self.proc.stdout.readline()
        assert banner, self.proc.stderr.read()

    def substitute(self, text: str) -> str:
        text = text.replace("h1:9876;h2:9876", f"127.0.0.1:{self.ns}")
        text = text.replace("h1:9876", f"127.0.0.1:{self.ns}")
        text = text.replace("127.0.0.1:9876", f"127.0.0.1:{self.ns}")
        return text.replace("127.0.0.1:10911", f"127.0.0.1:{self.broker}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.proc.stderr.read()[-3000:]


def _commands(text: str) -> list[str]:
    lines = text.replace("\\\n", " ").splitlines()
    prompted = any(ln.startswith("$ ") for ln in lines)
    out = []
    for ln in lines:
        if prompted:
            if not ln.startswith("$ "):
                continue  # the output the command shows
            ln = ln[2:]
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        out.append(ln)
    return out


def _strip_comment(cmd: str) -> str:
    """``cmd`` without a trailing ``# comment`` (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(cmd):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or cmd[i - 1].isspace()):
            return cmd[:i].rstrip()
    return cmd.rstrip()


def _program(cmd: str) -> tuple[str, str]:
    words = shlex.split(cmd.split("|")[-1]) if "|" in cmd else shlex.split(cmd)
    words = [w for w in words if "=" not in w or w.startswith("-")]
    prog = os.path.basename(words[0]) if words else ""
    sub = words[1] if len(words) > 1 else ""
    return prog, sub


class Runner:
    def __init__(self, work: Path, env: dict) -> None:
        self.work, self.env = work, env
        self.ran: list[str] = []
        self.skipped: list[str] = []
        self.times: list[tuple[float, str]] = []
        self.confs: dict[str, str] = {}  # "master.conf" -> its README text

    def python(self, code: str, line: int) -> None:
        if SKIP_SPARK and "pyspark" in code:
            self.skipped.append(f"python@{line} (ROCKETSTORE_README_SKIP_SPARK)")
            return
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", code], cwd=self.work, env=self.env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"README line {line}: python block failed:\n{r.stderr[-4000:]}"
        self.ran.append(f"python@{line}")
        self.times.append((round(time.monotonic() - t0, 1), f"python@{line}"))

    def shell_block(self, ctx: Context, text: str, line: int) -> None:
        bound: dict[str, str] = {}
        servers: list[tuple[str, subprocess.Popen]] = []
        try:
            for raw in _commands(text):
                cmd = _strip_comment(raw)
                prog, sub = _program(cmd)
                if prog == "export":
                    for k, v in (w.split("=", 1) for w in shlex.split(cmd)[1:]):
                        self.env[k] = v
                    continue
                if prog == "make":
                    r = subprocess.run(["make", "-n", *shlex.split(cmd)[1:]], cwd=ROOT,
                                       capture_output=True, text=True, timeout=60)
                    assert r.returncode == 0, f"README line {line}: {cmd}: {r.stderr}"
                    self.ran.append(cmd)
                    continue
                if SKIP_SPARK and prog == "rocketstore" and sub in ("demo", "rebuild", "export"):
                    self.skipped.append(f"{cmd} (ROCKETSTORE_README_SKIP_SPARK)")
                    continue
                if prog == "mqadmin" and not os.access(
                        os.path.join(os.environ.get("ROCKETMQ_HOME", ""), "mqadmin"), os.X_OK):
                    self.skipped.append(f"{cmd} (no ROCKETMQ_HOME)")
                    continue
                background = cmd.endswith("&")
                server = background or (prog == "rocketstore" and sub in SERVERS)
                cmd = cmd.rstrip("&").rstrip()
                if server:
                    cmd = self._bind_fresh_ports(cmd, bound, sub)
                for name in re.findall(r"--config\s+(\S+\.conf)", cmd):
                    if name in self.confs:  # a file the README shows: written with its ports
                        text = self.confs[name]
                        for port in re.findall(r"^listenPort=(\d+)", text, re.M):
                            bound.setdefault(port, str(_free_port()))
                        (self.work / name).write_text(self._substitute(text, bound, ctx))
                cmd = self._substitute(cmd, bound, ctx)
                if prog in ("python", "python3") and " -m pytest" in cmd:
                    cmd = re.sub(r"\S*/python3?(?= -m pytest)", shlex.quote(sys.executable),
                                 cmd, count=1) + " --collect-only -q"
                if server:
                    servers.append((cmd, self._start(cmd, line)))
                    if not background:  # run in the foreground: the user's Ctrl-C comes next
                        self._stop(*servers.pop(), line)
                    continue
                t0 = time.monotonic()
                for attempt in range(2 if prog == "mqadmin" else 1):  # its 3 s timeouts: busy CI
                    r = subprocess.run(["bash", "-c", cmd],
                                       cwd=ROOT if " -m pytest" in cmd else self.work,
                                       env=self.env, capture_output=True, text=True, timeout=600)
                    if "Exception" not in r.stdout + r.stderr:
                        break
                self.times.append((round(time.monotonic() - t0, 1), cmd[:60]))
                assert r.returncode == 0, \
                    f"README line {line}: `{cmd}` exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
                if prog == "mqadmin":
                    assert "Exception" not in r.stdout + r.stderr, r.stdout + r.stderr
                self.ran.append(cmd)
        finally:
            for cmd, proc in reversed(servers):
                self._stop(cmd, proc, line)

    @staticmethod
    def _stop(cmd: str, proc: subprocess.Popen, line: int) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(10)
        assert rc == 0, f"README line {line}: `{cmd}` exited {rc}: {proc.stderr.read()[-3000:]}"

    @staticmethod
    def _bind_fresh_ports(cmd: str, bound: dict, sub: str) -> str:
        for flag in BIND_FLAGS:
            m = re.search(rf"{flag}[ =](\d+)", cmd)
            if m:
                bound[m.group(1)] = str(_free_port())
        if sub == "serve" and "--config" not in cmd:  # defaults may be taken on a shared machine
            if "--port" not in cmd:
                cmd += f" --port {_free_port()}"
            if "--namesrv-port" not in cmd and "--namesrv " not in cmd:
                cmd += f" --namesrv-port {_free_port()}"
        return cmd

    @staticmethod
    def _substitute(cmd: str, bound: dict, ctx: Context) -> str:
        for old, new in bound.items():
            cmd = re.sub(rf"(?<![\d.]){old}(?!\d)", new, cmd)
        return ctx.substitute(cmd)

    def _start(self, cmd: str, line: int) -> subprocess.Popen:
        proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=self.work, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = proc.stdout.readline()
        assert banner and proc.poll() is None, \
            f"README line {line}: `{cmd}` did not start: {proc.stderr.read()[-3000:]}"
        # the banner (and the lines after it that name ports) lists only ports that listen
        time.sleep(0.3)
        for port in re.findall(r"127\.0\.0\.1:(\d+)", banner):
            assert _listens(int(port)), f"README line {line}: {banner!r} names :{port}, closed"
        self.ran.append(cmd)
        return proc


def _yaml(text: str):
    import yaml
    return yaml.safe_load(text)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_readme_block_runs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "rocketstore").write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m rocketstore.cli \"$@\"\n")
    (bindir / "rocketstore").chmod(0o755)
    home = os.environ.get("ROCKETMQ_HOME", "")
    if home:  # (the wrapper finds its jars relative to its own path)
        (bindir / "mqadmin").write_text(
            f"#!/bin/sh\nexec {shlex.quote(os.path.join(home, 'mqadmin'))} \"$@\"\n")
        (bindir / "mqadmin").chmod(0o755)
    env = _clean_env(bindir)
    all_blocks = blocks()
    untagged = [line for _, lang, _, line in all_blocks if lang not in
                ("python", "sh", "yaml", "properties")]
    assert not untagged, f"README blocks without a known language at lines {untagged}"
    runner = Runner(work, env)
    contexts: dict[str, Context] = {}
    from rocketstore.client import PushConsumer
    billing = None

    def context_for(section: str) -> Context:
        if section in contexts:
            return contexts[section]
        mine = [(lang, text) for sec, lang, text, _ in all_blocks if sec == section]
        if section.startswith("Access control"):
            acl = next(t for lang, t in mine if lang == "yaml")
            ctx = Context(work, "acl", env, "aclEnable=true", acl_yaml=acl)
        elif section.startswith("SQL92"):
            conf = next(t for lang, t in mine if lang == "properties")
            ctx = Context(work, "sql92", env, *[ln.split("#")[0].strip()
                                                 for ln in conf.splitlines()])
        else:
            ctx = contexts.get("") or Context(work, "default", env)
            contexts[""] = ctx
        contexts[section] = ctx
        return ctx

    try:
        for section, lang, text, line in all_blocks:
            ctx = context_for(section)
            if section.startswith("An operator") and billing is None:
                # the operator's examples look at a live consumer group "billing"
                billing = PushConsumer("billing", f"127.0.0.1:{ctx.ns}", {"Orders": "*"},
                                       lambda m: True).start()
                time.sleep(1)
            if lang == "python":
                runner.python(ctx.substitute(text), line)
            elif lang == "sh":
                runner.shell_block(ctx, text, line)
            elif lang == "yaml":
                assert isinstance(_yaml(text), dict), f"README line {line}"
            elif lang == "properties":
                from rocketstore.config import StoreConfig
                conf = tmp_path / f"readme-{line}.conf"
                conf.write_text(text)
                StoreConfig.from_properties(str(conf), store_path_root_dir=str(work / "x"))
                named = re.match(r"#\s*(\S+\.conf)\s*$", text.splitlines()[0])
                if named:  # the sh block after it runs with this file
                    runner.confs[named.group(1)] = text
    finally:
        if billing is not None:
            billing.shutdown()
        for ctx in {id(c): c for c in contexts.values()}.values():
            ctx.stop()
    assert len(runner.ran) >= 40, runner.ran
    print("slowest:", sorted(runner.times)[-5:])
    if runner.skipped:
        print("skipped:", runner.skipped)
