"""rocketstore on Apache Spark (``pip install 'rocketstore[spark]'``).

* ``register(spark)`` — the ``rocketmq`` data source (batch and streaming) over a store's CommitLog;
* ``get_session(master)`` — a SparkSession with Java checked, quiet logs and our interpreter;
* ``rebuild(root, engine=...)`` — recreate every ConsumeQueue and IndexFile from the CommitLog;
* ``export(root, out, follow=...)`` — Parquet partitioned by topic and date, exactly once;
* ``lag(progress)`` — how far a stream's ``rocketmq`` sources are behind the brokers;
* ``demo_step(store_dir)`` — the Spark part of ``rocketstore demo``.

Names are imported lazily so that ``import rocketstore.spark`` works without starting Java.
"""
from __future__ import annotations

from typing import Any

__all__ = ["register", "get_session", "rebuild", "export", "demo_step", "SparkSetupError", "lag"]


def __getattr__(name: str) -> Any:
    if name == "register":
        from .commitlog_source import register
        return register
    if name in ("get_session", "SparkSetupError"):
        from . import session
        return getattr(session, name)
    if name == "rebuild":
        from .rebuild_job import rebuild
        return rebuild
    if name == "export":
        from .export_job import export
        return export
    if name == "lag":
        from .network_source import lag
        return lag
    if name == "demo_step":
        from .demo import demo_step
        return demo_step
    raise AttributeError(name)
