"""A Spark driver for the cluster tests, run as its own process:
``python cluster_driver.py '{"phase": ..., ...}'``; prints ``RESULT {json}`` last.

phase "cluster": on a standalone master — file source and export with *relative* paths (the
driver's cwd is not the executors'), the network source and sink; it prints its RESULT, then
streams into a parquet sink a few rows per micro-batch until it is killed (SIGKILL, by the
test); phase "restart": a new driver finishing that stream from its checkpoint;
phase "connect": the network source and sink through a Spark Connect server.
"""
import json
import os
import sys


def session(args):
    from pyspark.sql import SparkSession
    if args.get("remote"):
        return SparkSession.builder.remote(args["remote"]).getOrCreate()
    b = (SparkSession.builder.master(args["master"]).appName("rocketstore-cluster-test")
         .config("spark.executor.memory", "512m").config("spark.driver.memory", "512m")
         .config("spark.cores.max", "2").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.pyspark.python", sys.executable)
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1"))
    return b.getOrCreate()


def stream(spark, args, until_killed=False):
    w = (spark.readStream.format("rocketmq").option("namesrv", args["namesrv"])
         .option("topic", args["stream_topic"]).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", 3).load()
         .select("topic", "body", "queue_offset")
         .writeStream.format("parquet").option("checkpointLocation", args["ck"]))
    if until_killed:
        w.trigger(processingTime="500 milliseconds").start(args["out"]).awaitTermination()
        return None
    q = w.trigger(availableNow=True).start(args["out"])
    q.awaitTermination(300)
    if q.exception() is not None:
        raise q.exception()
    return sorted(r.body.decode() for r in spark.read.parquet(args["out"]).collect())


def main():
    args = json.loads(sys.argv[1])
    spark = session(args)
    from rocketstore.spark import register
    register(spark)
    res = {}
    ns = args["namesrv"]
    if args["phase"] == "cluster":
        here = os.getcwd()
        res["executors"] = sorted(set(spark.sparkContext.parallelize(range(4), 2)
                                      .map(lambda _: (os.getpid(), os.getcwd())).collect()))
        res["driver"] = [os.getpid(), here]
        res["file_count"] = spark.read.format("rocketmq").load(args["store"]).count()
        from rocketstore.spark.export_job import export
        e = export(args["store"], "exported", spark=spark)
        res["exported"] = spark.read.parquet("exported").count()
        res["export_out"] = e.out
    if args["phase"] in ("cluster", "connect"):
        df = (spark.read.format("rocketmq").option("namesrv", ns).option("topic", args["topic"])
              .option("minPartitions", 4).load())
        res["net_bodies"] = sorted(r.body.decode() for r in df.select("body").collect())
        res["net_brokers"] = sorted({r.store_host for r in df.select("store_host").collect()})
        rows = spark.createDataFrame([(f"s-{i}", f"id-{i}") for i in range(30)],
                                     "body STRING, idempotencyKey STRING")
        (rows.write.format("rocketmq").option("namesrv", ns).option("topic", args["sink_topic"])
         .mode("append").save())
    if args["phase"] == "restart":
        res["stream"] = stream(spark, args)
    print("RESULT " + json.dumps(res), flush=True)
    if args["phase"] == "cluster":
        stream(spark, args, until_killed=True)
    spark.stop()


if __name__ == "__main__":
    main()
