"""``format("rocketmq")`` works in a plain session, without ``register()`` (PySpark discovers the
``pyspark_rocketmq`` package); ``pushdown=false`` suits sessions with Python pushdown off."""
import subprocess
import sys
import textwrap

import pytest

from rocketstore import Message, MessageStore
from tests.conftest import small_config


@pytest.mark.spark
def test_plain_session_discovers_the_source(tmp_path):
    with MessageStore(small_config(tmp_path / "s")) as store:
        for i in range(5):
            store.put_message(Message("Disc", b"m%d" % i))
    code = textwrap.dedent(f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
        df = s.read.format("rocketmq").option("pushdown", "false").load({str(tmp_path / "s")!r})
        print("RESULT", df.count(), df.filter("queue_offset >= 3").count())
        s.stop()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "RESULT 5 2" in p.stdout, p.stderr[-2000:]


@pytest.mark.spark
def test_register_turns_on_filter_pushdown(spark, tmp_path):
    """README: ``register(spark)`` turns on Python filter pushdown, so the pushdown reader
    (the default) works right after it on a session where the flag is off."""
    from rocketstore.spark import register
    with MessageStore(small_config(tmp_path / "s")) as store:
        for i in range(6):
            store.put_message(Message("Push", b"m%d" % i))
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")  # a plain session's default
    try:
        register(spark)
        assert spark.conf.get(key) == "true"
        df = spark.read.format("rocketmq").load(str(tmp_path / "s"))
        assert df.filter("queue_offset >= 4").count() == 2
    finally:
        spark.conf.set(key, before)
