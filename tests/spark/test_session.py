"""Starting Spark: Java checks with clear errors, interpreter, shipped log config."""
from __future__ import annotations

import os
import stat
import sys

import pytest
from click.testing import CliRunner

from rocketstore.cli import main
from rocketstore.spark.session import (CONF_DIR, SparkSetupError, check_java, get_session,
                                       java_version, prepare_environment)


def fake_java(tmp_path, banner: str) -> str:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return str(home)


def test_old_java_is_refused_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", fake_java(tmp_path, 'java version "1.8.0_392"'))
    assert java_version() == 8
    with pytest.raises(SparkSetupError, match="Java 8 found .*needs Java 17"):
        check_java()


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkSetupError, match="Java not found"):
        check_java()


def test_java_17_is_accepted(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", fake_java(tmp_path, 'openjdk version "17.0.15" 2025-04-15'))
    assert check_java() == 17


def test_environment_and_shipped_log_config(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    prepare_environment()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert os.environ["SPARK_CONF_DIR"] == CONF_DIR
    text = open(os.path.join(CONF_DIR, "log4j2.properties"), encoding="utf-8").read()
    assert "rootLogger.level" in text and "PythonGatewayServer" in text


@pytest.mark.spark
def test_get_session_reuses_the_active_session(spark):
    s = get_session()
    assert s is spark
    assert s.conf.get("spark.sql.python.filterPushdown.enabled") == "true"


def test_cli_errors_are_one_line(tmp_path):
    r = CliRunner().invoke(main, ["export", "--store", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "not a store" in r.output and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["rebuild", "--store", str(tmp_path / "nope")])
    assert r.exit_code != 0 and "not a store" in r.output


def test_package_names_stay_the_functions_after_submodule_imports():
    """``rocketstore.spark.export`` / ``.rebuild`` are the functions, whatever was imported
    first (a submodule of the same name would replace the attribute)."""
    import subprocess
    import sys
    code = ("import rocketstore.spark.export_job, rocketstore.spark.rebuild_job\n"
            "import rocketstore.spark as s, types\n"
            "from rocketstore.spark import export, rebuild\n"
            "assert isinstance(s.export, types.FunctionType) and s.export is export\n"
            "assert isinstance(s.rebuild, types.FunctionType) and s.rebuild is rebuild\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
