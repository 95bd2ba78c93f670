"""PySpark data source discovery: ``spark.read.format("rocketmq")`` without ``register()``.

PySpark imports top-level ``pyspark_*`` packages that define ``DefaultSource`` and registers
that data source under its ``name()``.
"""
from rocketstore.spark.commitlog_source import CommitLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
