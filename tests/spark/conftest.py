"""The one SparkSession of the test run (local[2], UI off, 2 shuffle partitions)."""
from __future__ import annotations

import os
import sys

import pytest

from .spark_stores import FIXTURE  # noqa: F401  (re-exported for tests)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    from rocketstore.spark.session import SparkSetupError, check_java, prepare_environment
    try:
        check_java()
    except SparkSetupError as exc:
        pytest.skip(str(exc))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    prepare_environment()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.python.filterPushdown.enabled", "true")
         .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
         .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    from rocketstore.spark import register
    register(s)
    yield s
    s.stop()
