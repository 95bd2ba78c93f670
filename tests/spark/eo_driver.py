"""A Spark driver for the exactly-once tests: copy topic SOURCE to TARGET through the network
source and the exactly-once sink, small micro-batches, until SOURCE is drained
(``Trigger.AvailableNow``). Killed at random by the test; run again on the same checkpoint.

    python eo_driver.py NAMESRV CHECKPOINT SOURCE TARGET ROWS_PER_BATCH [GUARANTEE]
"""
from __future__ import annotations

import os
import sys


def main(ns: str, ck: str, source: str, target: str, per_batch: int,
         guarantee: str = "exactly-once") -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from rocketstore.spark.session import prepare_environment
    prepare_environment()
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstore.spark import register
    register(spark)
    df = (spark.readStream.format("rocketmq").option("namesrv", ns).option("topic", source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_batch)
          .load().selectExpr("body", "keys"))
    q = (df.writeStream.format("rocketmq").option("namesrv", ns).option("topic", target)
         .option("deliveryGuarantee", guarantee).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    print("started", flush=True)
    q.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], a[3], int(a[4]), *(a[5:6]))
