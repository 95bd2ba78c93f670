"""``rocketstore export``: the store's messages to Parquet, partitioned by topic and date.

An export is a Spark Structured Streaming query with a checkpoint (``<out>/_checkpoint``), so an
interrupted or repeated export never duplicates or loses a row; ``--follow`` keeps running and
appends new messages until Ctrl-C. See ``rocketstore.spark.export_job``.
"""
from __future__ import annotations

import os

import click

from ._common import emit_json, json_option, progress, store_option, tier_location, tier_option


@click.command("export")
@store_option
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Output directory (Parquet, topic=<t>/date=<yyyy-MM-dd>/).")
@click.option("--format", "fmt", type=click.Choice(["parquet"]), default="parquet", show_default=True)
@click.option("--follow", is_flag=True, help="Keep exporting new messages until interrupted.")
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]).")
@click.option("--checkpoint", default=None, type=click.Path(file_okay=False),
              help="Streaming checkpoint directory (default: OUT/_checkpoint).")
@click.option("--interval", default="1 second", show_default=True, help="Polling interval with --follow.")
@click.option("--max-files-per-trigger", type=int, default=None, help="Segments per micro-batch.")
@click.option("--max-records-per-trigger", type=int, default=None, help="Messages per micro-batch.")
@click.option("--check-crc", is_flag=True, help="Verify body CRCs while reading.")
@tier_option
@json_option
def command(store_dir, out, fmt, follow, master, checkpoint, interval, max_files_per_trigger,
            max_records_per_trigger, check_crc, tier_opts, as_json):
    """Export every message of a store (or of a tier: a posix tier's base directory or
    s3://bucket/prefix) to Parquet (exactly once, incremental)."""
    tier = tier_location(store_dir, tier_opts, "rocketstore export --option")
    if tier is None and not os.path.isdir(os.path.join(store_dir, "commitlog")):
        raise click.ClickException(f"{store_dir}: not a store (no commitlog directory)")
    from ..spark.export_job import export, plan
    from ..spark.session import get_session
    start, target = plan(store_dir, out, checkpoint) if tier is None else (0, 0)
    spark = get_session(master, app_name="rocketstore-export")
    total = None if follow or tier is not None else max(0, target - start)
    with progress("export", total=total, unit="bytes") as bar:
        state = {"done": 0}

        def on_progress(done: int, total: int) -> None:
            bar.advance(done - state["done"])
            state["done"] = done

        res = export(store_dir, out, follow=follow, spark=spark, checkpoint=checkpoint,
                     interval=interval, max_files_per_trigger=max_files_per_trigger,
                     max_records_per_trigger=max_records_per_trigger, check_crc=check_crc,
                     on_progress=on_progress, tier_opts=tier)
    if as_json:
        emit_json(res.as_dict())
    else:
        rng = f"CommitLog {res.start_offset}..{res.end_offset}" if res.end_offset is not None \
            else ("tier" if tier is not None else "nothing new")
        click.echo(f"exported {res.rows} message(s) in {res.batches} batch(es) to {out} "
                   f"({rng}, {res.seconds:.1f}s)")
