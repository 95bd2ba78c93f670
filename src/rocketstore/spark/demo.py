"""The Spark step of ``rocketstore demo``: rebuild the derived files, then SQL over the CommitLog.

Theory of operation. The demo store is closed when this runs. ``demo_step`` starts (or reuses)
a SparkSession, rebuilds every ConsumeQueue and IndexFile with the Spark engine (which also
proves the store is rebuildable from its CommitLog alone), then registers the ``rocketmq``
source as a temporary view — with a narrow schema, so bodies are never built — and runs two
SQL queries: messages and bytes per topic, and the most used message keys. It returns plain
dicts (JSON-ready) and prints a short table through ``echo``.
"""
from __future__ import annotations

from typing import Callable

PER_TOPIC = """
SELECT topic, count(*) AS messages, sum(store_size) AS bytes,
       min(store_timestamp) AS first_stored, max(store_timestamp) AS last_stored
FROM messages GROUP BY topic ORDER BY messages DESC, topic"""
TOP_KEYS = """
SELECT key, count(*) AS messages, count(DISTINCT topic) AS topics
FROM messages LATERAL VIEW explode(keys) k AS key
GROUP BY key ORDER BY messages DESC, key LIMIT {limit}"""


def demo_step(store_dir: str, master: str | None = None, echo: Callable[[str], None] = print,
              spark=None, top: int = 5) -> dict:
    """Rebuild ``store_dir`` with Spark and summarise it with SQL; returns printable rows."""
    from .rebuild_job import rebuild, store_config
    from .session import get_session
    spark = spark or get_session(master, app_name="rocketstore-demo")
    from .commitlog_source import register
    register(spark)
    res = rebuild(store_dir, engine="spark", cfg=store_config(store_dir), spark=spark)
    echo(f"  rebuilt {res.queues} ConsumeQueue(s) ({res.cq_units} units) and {res.index_files} "
         f"IndexFile(s) ({res.index_keys} keys) from {res.records} records in "
         f"{res.seconds['total']:.1f}s on {spark.sparkContext.master}")
    (spark.read.format("rocketmq")
     .schema("topic STRING, keys ARRAY<STRING>, store_size INT, store_timestamp TIMESTAMP")
     .load(store_dir).createOrReplaceTempView("messages"))
    per_topic = [r.asDict() for r in spark.sql(PER_TOPIC).collect()]
    top_keys = [r.asDict() for r in spark.sql(TOP_KEYS.format(limit=int(top))).collect()]
    for r in per_topic:
        r["first_stored"] = r["first_stored"].isoformat(sep=" ", timespec="milliseconds")
        r["last_stored"] = r["last_stored"].isoformat(sep=" ", timespec="milliseconds")
    echo("  messages per topic (Spark SQL over the CommitLog):")
    for r in per_topic:
        echo(f"    {r['topic']:<24} {r['messages']:>8} msgs {r['bytes']:>12,} bytes")
    echo(f"  top {len(top_keys)} keys:")
    for r in top_keys:
        echo(f"    {r['key']:<24} {r['messages']:>8} msgs in {r['topics']} topic(s)")
    return {"rebuild": res.as_dict(), "messages_per_topic": per_topic, "top_keys": top_keys}
