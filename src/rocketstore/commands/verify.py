"""``rocketstore verify --store DIR [--config broker.conf] [--json]``: check a closed store.
``--store`` may name a tier instead (a posix tier's base directory or ``s3://bucket/prefix``,
``--option objectStoreEndpoint=...`` or the AWS environment variables): every queue's flat files
are checked (``store.tier.check.verify_tier_base``).

Exit 0 when the store is consistent (warnings are printed but allowed), 1 with a report naming
file and offset for every damaged record, unit or index entry (``store.verify``), 2 when the
store cannot be checked (open in another process, not a store).
"""
from __future__ import annotations

import os
import sys

import click

from ..config import StoreConfig
from ..store.verify import verify_store
from ._common import emit_json, json_option, store_option, tier_location, tier_option


@click.command("verify")
@store_option
@click.option("--config", type=click.Path(dir_okay=False, exists=True),
              help="broker.conf with the store's file sizes (default: detected).")
@tier_option
@json_option
def command(store_dir: str, config: str | None, tier_opts: tuple[str, ...], as_json: bool) -> None:
    """Check every record's CRC and layout, every ConsumeQueue unit and every index entry
    (of a store, or of a tier: a posix tier's base directory or s3://bucket/prefix)."""
    tier = tier_location(store_dir, tier_opts, "rocketstore verify --option")
    if tier is not None:
        _verify_tier(tier, as_json)
    if not os.path.isdir(store_dir):
        raise click.ClickException(f"{store_dir}: no such store directory")
    from ..store.store_dir import is_store_dir
    if not is_store_dir(store_dir):
        click.echo(f"error: {store_dir}: not a store directory (no commitlog, consumequeue, index "
                   "or checkpoint); nothing was written", err=True)
        sys.exit(2)
    from ._common import detect_sizes
    cfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir) if config
           else StoreConfig(store_path_root_dir=store_dir, **detect_sizes(store_dir)))
    from ..errors import StoreLockedError
    try:
        report = verify_store(store_dir, cfg)
    except StoreLockedError as exc:  # cannot be checked: exit 2, as the docstring says
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(f"{store_dir}: {report.segments} segment(s), {report.records} record(s) "
                   f"[{report.min_offset}, {report.max_offset}), {report.queues} queue(s) with "
                   f"{report.cq_units} unit(s), {report.index_files} index file(s) with "
                   f"{report.index_entries} entr(ies)")
        d = report.first_damage
        if d is not None:
            click.echo(f"first damaged record: {d['file']} @ {d['offset']}: {d['field']} "
                       f"expected {d['expected']}, found {d['found']}"
                       + (f"; the next intact record starts at {d['next_intact']}"
                          if d["next_intact"] is not None else ""))
        for p in report.problems:
            click.echo(str(p))
        if report.knock_on:
            click.echo(f"{report.knock_on} knock-on error(s) not listed: ConsumeQueue units and "
                       "index entries pointing into the bytes the damaged record made unreadable")
        click.echo(("OK" if report.ok else f"DAMAGED: {report.error_count} error(s)") +
                   (f", {report.warning_count} warning(s)" if report.warning_count else ""))
    sys.exit(0 if report.ok else 1)


def _verify_tier(opts: dict, as_json: bool) -> None:
    """``store.tier.check.verify_tier_base``: every queue of every broker in the tier."""
    from ..spark.tier_options import open_tier_backend, tier_options
    from ..store.tier.check import verify_tier_base
    where = opts["path"]
    try:
        report = verify_tier_base(open_tier_backend(tier_options(opts)), where)
    except OSError as e:
        click.echo(f"error: {where}: {e}", err=True)
        sys.exit(2)
    if as_json:
        emit_json(report)
    else:
        click.echo(f"tier {where}: {len(report['queues'])} queue(s), {report['records']} record(s)")
        for p in report["problems"]:
            click.echo(p)
        for d in report["damaged"]:
            click.echo(f"damaged beyond repair: {d['topic']}/{d['queueId']} queue offset(s) "
                       f"{','.join(map(str, d['queueOffsets']))}, kept aside as {d['quarantine']}")
        click.echo("OK" if report["ok"] else
                   f"DAMAGED: {len(report['problems']) + len(report['damaged'])} problem(s)")
    sys.exit(0 if report["ok"] else 1)
