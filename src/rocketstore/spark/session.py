"""Starting Spark for rocketstore: Java check, interpreter, quiet logs, master URL.

Theory of operation. PySpark starts a JVM (``spark-submit`` under the hood) and Python worker
processes. Four things go wrong on a fresh machine, and this module settles each *before* the
JVM starts, because none of them can be changed afterwards:

* no Java, or a Java older than 17 → Spark dies with a long, confusing trace. ``check_java()``
  runs ``java -version`` first (``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH) and raises
  ``SparkSetupError`` with one clear sentence.
* the workers run ``python3`` from PATH, which lacks pyarrow when we run from an unactivated
  venv → ``PYSPARK_PYTHON`` (and the driver's) is set to ``sys.executable``.
* Spark's INFO/WARN chatter → ``SPARK_CONF_DIR`` points at the ``log4j2.properties`` shipped in
  ``rocketstore/spark/conf`` (unless the user set their own), ``SPARK_LOCAL_IP`` defaults to
  loopback for local masters and the console progress bar is off.
* our data source implements ``pushFilters``, which fails planning unless
  ``spark.sql.python.filterPushdown.enabled`` is true → always set.

``get_session(master)`` returns the active session if there is one (tests share one), else builds
one on ``master`` (default ``local[*]``; ``spark.master`` from the environment or a
``spark-defaults.conf`` wins when ``master`` is None and ``SPARK_MASTER`` is set).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any, Mapping

from ..errors import RocketStoreError

MIN_JAVA = 17
CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf")


class SparkSetupError(RocketStoreError):
    """Spark cannot start here (Java missing or too old, pyspark not installed)."""


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        cand = os.path.join(home, "bin", "java")
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("java")


def java_version(java: str | None = None) -> int:
    """Major version of the Java that Spark will use; raises ``SparkSetupError`` if none."""
    java = java or java_executable()
    if not java:
        raise SparkSetupError("Java not found: Spark needs Java 17 or 21 on PATH (or JAVA_HOME); "
                              "install e.g. openjdk-17-jre-headless")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"cannot run {java} -version: {exc}") from exc
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        raise SparkSetupError(f"cannot read the Java version from {java}: {text.strip()[:200]!r}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_392"
        major = int(m.group(2))
    return major


def check_java() -> int:
    major = java_version()
    if major < MIN_JAVA:
        raise SparkSetupError(f"Java {major} found ({java_executable()}), but Spark 4 needs Java "
                              f"{MIN_JAVA} or 21; set JAVA_HOME to a Java 17 installation")
    return major


def prepare_environment() -> None:
    """Environment every Spark start of ours needs (idempotent, before the JVM starts)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "SPARK_CONF_DIR" not in os.environ and os.path.isfile(os.path.join(CONF_DIR, "log4j2.properties")):
        os.environ["SPARK_CONF_DIR"] = CONF_DIR


def _is_local(master: str) -> bool:
    return master.startswith("local")


DEFAULT_CONF: dict[str, str] = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}


def get_session(master: str | None = None, app_name: str = "rocketstore",
                conf: Mapping[str, Any] | None = None):
    """The active SparkSession, or a new one on ``master`` (default ``local[*]``)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SparkSetupError("pyspark is not installed: pip install 'rocketstore[spark]'") from exc
    active = SparkSession.getActiveSession()
    if active is not None:
        active.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        from .commitlog_source import register
        register(active)
        return active
    check_java()
    prepare_environment()
    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    if _is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    b = SparkSession.builder.master(master).appName(app_name)
    settings = dict(DEFAULT_CONF)
    if _is_local(master):
        settings.setdefault("spark.ui.enabled", "false")
        cores = os.cpu_count() or 2
        settings.setdefault("spark.sql.shuffle.partitions", str(max(2, min(8, cores * 2))))
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    for k, v in settings.items():
        b = b.config(k, v)
    try:
        spark = b.getOrCreate()
    except Exception as exc:  # JVM start failures come as several exception types
        raise SparkSetupError(f"Spark did not start on {master}: {exc}") from exc
    spark.sparkContext.setLogLevel(os.environ.get("ROCKETSTORE_SPARK_LOG", "ERROR").upper())
    from .commitlog_source import register
    register(spark)
    return spark


_MARKERS = ("DataLossError: ", "CorruptRecordError: ", "CorruptFileError: ", "StoreLockedError: ",
            "FileNotFoundError: ", "ValueError: ")


def short_error(exc: BaseException) -> str:
    """The one line that matters of a Spark/Py4J error raised by our Python code in a task."""
    text = str(exc)
    for marker in _MARKERS:
        i = text.rfind(marker)
        if i >= 0:
            return text[i:].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
