"""The rocketmq sink's save modes: it sends new messages, so ``append`` is its mode; an
``overwrite`` is refused before anything is sent, with the mode to use (the README's sink
example, with ``.mode("append")``, runs in ``tests/test_readme.py``)."""
from __future__ import annotations

import pytest


def test_overwrite_is_refused_with_the_mode_to_use(spark):
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception) as ei:  # Py4J / AnalysisException, by Spark version
        (df.write.format("rocketmq").option("namesrv", "127.0.0.1:1").option("topic", "T")
         .mode("overwrite").save())
    assert 'use .mode("append")' in str(ei.value), str(ei.value)[:2000]
