"""``rocketstore rebuild``: recreate every ConsumeQueue and IndexFile from the CommitLog.

Runs on Spark by default (embedded ``local[*]``, or ``--master``); ``--engine local`` runs the
same code in this process. The store must not be open anywhere (its lock is taken); results are
staged and swapped in atomically. See ``rocketstore.spark.rebuild_job``.
"""
from __future__ import annotations

import os

import click

from ._common import emit_json, json_option, progress, store_option


@click.command("rebuild")
@store_option
@click.option("--engine", type=click.Choice(["spark", "local"]), default="spark", show_default=True)
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]).")
@click.option("--config", "config", type=click.Path(dir_okay=False, exists=True),
              help="RocketMQ broker.conf with the store's file sizes.")
@click.option("--check-crc", is_flag=True, help="Verify body CRCs while scanning.")
@json_option
def command(store_dir, engine, master, config, check_crc, as_json):
    """Rebuild ConsumeQueue and IndexFile files of a (closed) store from its CommitLog."""
    from ..config import StoreConfig
    from ._common import detect_sizes
    if not os.path.isdir(os.path.join(store_dir, "commitlog")):
        raise click.ClickException(f"{store_dir}: not a store (no commitlog directory)")
    cfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir) if config
           else StoreConfig(store_path_root_dir=store_dir, **detect_sizes(store_dir)))
    from ..store.lock import StoreLock
    # refuse a live store at once, not after Spark started (seconds); rebuild takes it again
    StoreLock(store_dir, posix=True, why="the store is open in another process; stop it "
              "before rebuilding").acquire().release()
    from ..spark.rebuild_job import rebuild
    from ..spark.segments import list_segments, tail_index
    segs = list_segments(cfg.commitlog_dir)
    total = sum(s.size for s in segs[:tail_index(segs) + 1]) if segs else 0
    spark = None
    if engine == "spark":
        from ..spark.session import get_session
        spark = get_session(master, app_name="rocketstore-rebuild")
    with progress(f"rebuild ({engine})", total=total, unit="bytes") as bar:
        state = {"done": 0}

        def on_progress(phase: str, done: int, n: int) -> None:
            # ranges finish in any order; report bytes in proportion to ranges done
            b = total * done // max(n, 1)
            bar.advance(b - state["done"])
            state["done"] = b

        res = rebuild(store_dir, engine=engine, cfg=cfg, spark=spark, check_crc=check_crc,
                      on_progress=on_progress)
    if as_json:
        emit_json(res.as_dict())
    else:
        click.echo(f"rebuilt {res.queues} queue(s) ({res.cq_units} units) and {res.index_files} "
                   f"index file(s) ({res.index_keys} keys) from {res.records} records in "
                   f"{res.segments} segment(s) with {engine} in {res.seconds['total']:.1f}s")
