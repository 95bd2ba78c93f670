#!/usr/bin/env python3
"""Resolve RocketMQ's own released jars from Maven Central and write launchers beside them.

The referee of rocketstore's tests and benchmarks is RocketMQ itself: 4.9.7 (everything built up to
round 3) and the 5.x line (5.3.3 and the newest 5.x release served). This script is the only place
that knows Maven. For each version it runs ``mvn dependency:copy-dependencies`` on
``scripts/referee/pom.xml`` into a cache outside the repository and writes a *home* there::

    <cache>/<version>/lib/*.jar    the jars, transitive dependencies included
    <cache>/<version>/classpath    one line, ':'-separated
    <cache>/<version>/conf/        logback configs (4.x reads them from $ROCKETMQ_HOME/conf)
    <cache>/<version>/namesrv | broker | mqadmin | producer-bench | consumer-bench | java-run | javac-rmq
    <cache>/<version>/controller | proxy                              (5.x only)
    <cache>/bench-<v>/lib          RocketMQ's benchmark Producer/Consumer (rocketmq-example), every
                                   home's producer-bench/consumer-bench run them
    <cache>/client-java-<v>/lib    org.apache.rocketmq:rocketmq-client-java (5.x gRPC client);
                                   <home>/client-java-classpath names its jars
    <cache>/referee.json           what was resolved, or why not

The launchers take the same arguments as ``shared/tools/rocketmq-java/build.sh``'s (that build from
source stays the offline alternative: point ROCKETMQ_HOME at it). They run the JVM as RocketMQ's
``bin/runserver.sh``/``runbroker.sh`` do (G1, -XX:-OmitStackTraceInFastThrow, the ``--add-opens``
that Java 9+ needs), with small heaps by default (``NAMESRV_HEAP``, ``BROKER_HEAP``, ``TOOLS_HEAP``,
``BENCH_HEAP``, ``CONTROLLER_HEAP``, ``PROXY_HEAP``).

The cache is ``$ROCKETSTORE_REFEREE_CACHE`` or ``~/.cache/rocketstore/referee``. A version already
resolved with the same pom is not resolved again. When Maven Central cannot be reached, the reason
goes into referee.json and the Java-backed tests skip with it (and only then).

    python scripts/referee/resolve.py            # every version, prints the homes
    python scripts/referee/resolve.py --env      # shell lines: export ROCKETMQ_HOME=... (eval them)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

POM = Path(__file__).resolve().with_name("pom.xml")

#: version -> (pom profile, environment variable naming the home)
VERSIONS: dict[str, tuple[str, str]] = {
    "4.9.7": ("rmq4", "ROCKETMQ_HOME"),
    "5.3.3": ("rmq5", "ROCKETMQ5_HOME"),
    "5.5.0": ("rmq5", "ROCKETMQ5_NEWEST_HOME"),
}
#: shared by every home: RocketMQ's benchmark Producer/Consumer (rocketmq-example was not
#: published for 4.9.x or 5.3.x; the newest served runs against any broker) and the 5.x gRPC client
EXTRAS = {"bench": ("bench", "example.version", "5.5.0"),
          "client-java": ("client-java", "client.java.version", "5.2.0")}

JVM_OPTS = (
    "-XX:+UseG1GC -XX:-OmitStackTraceInFastThrow "
    "--add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-exports java.base/jdk.internal.ref=ALL-UNNAMED "
    "--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED "
    "--add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED "
    "--add-opens java.base/jdk.internal.misc=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED "
    "-Drocketmq.client.logUseSlf4j=false"
)

#: launcher name -> (heap variable, default heap, main class, lines it exists for)
LAUNCHERS = {
    "namesrv": ("NAMESRV_HEAP", "256m", "org.apache.rocketmq.namesrv.NamesrvStartup", ("rmq4", "rmq5")),
    "broker": ("BROKER_HEAP", "512m", "org.apache.rocketmq.broker.BrokerStartup", ("rmq4", "rmq5")),
    "mqadmin": ("TOOLS_HEAP", "256m", "org.apache.rocketmq.tools.command.MQAdminStartup", ("rmq4", "rmq5")),
    "producer-bench": ("BENCH_HEAP", "1g", "org.apache.rocketmq.example.benchmark.Producer", ("bench",)),
    "consumer-bench": ("BENCH_HEAP", "1g", "org.apache.rocketmq.example.benchmark.Consumer", ("bench",)),
    "java-run": ("TOOLS_HEAP", "512m", "", ("rmq4", "rmq5")),
    "controller": ("CONTROLLER_HEAP", "256m", "org.apache.rocketmq.controller.ControllerStartup", ("rmq5",)),
    "proxy": ("PROXY_HEAP", "512m", "org.apache.rocketmq.proxy.ProxyStartup", ("rmq5",)),
}

# RocketMQ 4.x's startups configure logback from $ROCKETMQ_HOME/conf/<file>; 5.x ships its own
# configs inside its jars. Ours write one file per process under ${user.home}/logs/rocketmqlogs,
# as RocketMQ's do (tests set -Duser.home to their work directory).
LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${{user.home}}/logs/rocketmqlogs/{name}.log</file>
    <append>true</append>
    <encoder><pattern>%d{{yyy-MM-dd HH:mm:ss,SSS}} %p %c{{0}} - %m%n</pattern><charset>UTF-8</charset></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""
LOGBACK_FILES = {"logback_namesrv.xml": "namesrv", "logback_broker.xml": "broker",
                 "logback_tools.xml": "tools", "logback_filtersrv.xml": "filtersrv"}


def cache_dir() -> Path:
    env = os.environ.get("ROCKETSTORE_REFEREE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rocketstore" / "referee"


def pom_digest() -> str:
    h = hashlib.sha256(POM.read_bytes())
    h.update(json.dumps([VERSIONS, EXTRAS, JVM_OPTS, sorted(LAUNCHERS)]).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def _mvn(profile: str, props: dict[str, str], outdir: Path) -> None:
    cmd = ["mvn", "-q", "-B", "-f", str(POM), f"-P{profile}",
           *(f"-D{k}={v}" for k, v in props.items()),
           "dependency:copy-dependencies", f"-DoutputDirectory={outdir}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        tail = "\n".join(line for line in (r.stdout + r.stderr).splitlines() if "ERROR" in line)[-1500:]
        raise RuntimeError(f"mvn {profile} {props} failed (exit {r.returncode}): {tail or r.stdout[-1500:]}")


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _launcher(version: str, heap_var: str, heap: str, main: str, classpath: str) -> str:
    return f"""#!/usr/bin/env bash
# written by scripts/referee/resolve.py: runs {main or 'a class of yours'} of RocketMQ {version}
H="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export ROCKETMQ_HOME="$H"
exec "${{JAVA:-java}}" -Xms${{{heap_var}:-{heap}}} -Xmx${{{heap_var}:-{heap}}} {JVM_OPTS} ${{JAVA_OPT_EXT:-}} \\
  -Drocketmq.home.dir="$H" -cp "$H/conf:$(cat "$H/{classpath}")${{CP_EXTRA:+:$CP_EXTRA}}" {main} "$@"
"""


def _classpath(d: Path) -> str:
    return ":".join(str(j) for j in sorted((d / "lib").glob("*.jar"))) + "\n"


def write_home(version: str, home: Path, profile: str, extras: dict[str, Path]) -> None:
    (home / "classpath").write_text(_classpath(home))
    (home / "bench-classpath").write_text(_classpath(extras["bench"]))
    (home / "client-java-classpath").write_text(_classpath(extras["client-java"]))
    conf = home / "conf"
    conf.mkdir(exist_ok=True)
    for fname, proc in LOGBACK_FILES.items():
        (conf / fname).write_text(LOGBACK.format(name=proc))
    (conf / "broker.conf").write_text(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n"
        "deleteWhen=04\nfileReservedTime=48\nbrokerRole=ASYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n")
    for name, (heap_var, heap, main, lines) in LAUNCHERS.items():
        if profile in lines:
            _write_exec(home / name, _launcher(version, heap_var, heap, main, "classpath"))
        elif "bench" in lines:
            _write_exec(home / name, _launcher(version, heap_var, heap, main, "bench-classpath"))
    _write_exec(home / "javac-rmq", f"""#!/usr/bin/env bash
# written by scripts/referee/resolve.py: javac-rmq -d DIR Foo.java against RocketMQ {version}
H="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
exec "${{JAVAC:-javac}}" -nowarn -encoding UTF-8 --add-exports java.base/sun.nio.ch=ALL-UNNAMED \\
  -cp "$(cat "$H/classpath")${{CP_EXTRA:+:$CP_EXTRA}}" "$@"
""")
    (home / "VERSION").write_text(version + "\n")


def resolve(versions: list[str], quiet: bool = False) -> dict:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    digest = pom_digest()
    state: dict = {"homes": {}, "env": {}, "extras": {}, "error": None, "seconds": {}}
    extras: dict[str, Path] = {}

    def fresh(d: Path) -> bool:
        done = d / ".complete"
        return done.exists() and done.read_text().strip() == digest

    try:
        for name, (profile, prop, version) in EXTRAS.items():
            d = root / f"{name}-{version}"
            if not fresh(d):
                t0 = time.monotonic()
                shutil.rmtree(d, ignore_errors=True)
                _mvn(profile, {prop: version}, d / "lib")
                (d / ".complete").write_text(digest)
                state["seconds"][name] = round(time.monotonic() - t0, 1)
            extras[name] = d
            state["extras"][name] = str(d)
        for v in versions:
            profile, env = VERSIONS[v]
            home = root / v
            if not fresh(home):
                t0 = time.monotonic()
                shutil.rmtree(home, ignore_errors=True)
                _mvn(profile, {"rocketmq.version": v}, home / "lib")
                write_home(v, home, profile, extras)
                done = home / ".complete"
                done.write_text(digest)
                state["seconds"][v] = round(time.monotonic() - t0, 1)
                if not quiet:
                    print(f"referee: RocketMQ {v} resolved into {home} in {state['seconds'][v]} s",
                          file=sys.stderr)
            state["homes"][v] = str(home)
            state["env"][env] = str(home)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        state["error"] = f"RocketMQ's jars could not be resolved from Maven Central at set-up: {e}"
    (root / "referee.json").write_text(json.dumps(state, indent=2) + "\n")
    return state


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated (default: all)")
    ap.add_argument("--env", action="store_true", help="print export lines for a shell")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a version could not be resolved")
    args = ap.parse_args()
    versions = [v for v in args.versions.split(",") if v]
    unknown = [v for v in versions if v not in VERSIONS]
    if unknown:
        ap.error(f"unknown version(s) {unknown}; known: {', '.join(VERSIONS)}")
    if shutil.which("mvn") is None:
        state = {"homes": {}, "env": {}, "extras": {}, "seconds": {},
                 "error": "RocketMQ's jars could not be resolved at set-up: Maven (mvn) is not installed"}
        cache_dir().mkdir(parents=True, exist_ok=True)
        (cache_dir() / "referee.json").write_text(json.dumps(state, indent=2) + "\n")
    else:
        state = resolve(versions, quiet=args.env)
    if state["error"]:
        print(f"referee: {state['error']}", file=sys.stderr)
    if args.env:
        for k, v in state["env"].items():
            print(f"export {k}={v}")
    elif not state["error"]:
        for v, home in state["homes"].items():
            print(f"{v}\t{home}")
    return 1 if (args.strict and state["error"]) else 0


if __name__ == "__main__":
    sys.exit(main())
