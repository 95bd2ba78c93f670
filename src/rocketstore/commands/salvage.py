"""``rocketstore salvage --store DIR [--json] [--dry-run]``: re-append the intact records that
recovery set aside in ``<store>/quarantine/`` (``store.salvage``).

Opens the store for writing (so its own recovery runs first and may quarantine more), appends
every intact record found in each event not yet salvaged, and reports per event what was
found, appended and could not be saved (offset and bytes of the unreadable ranges). Exit 0
when every record found was appended, 1 when any append failed or a manifest is unreadable.
"""
from __future__ import annotations

import os
import sys

import click

from ._common import emit_json, json_option, store_option
from .store_cmds import config_option, open_store


@click.command("salvage")
@store_option
@config_option
@click.option("--dry-run", is_flag=True, help="Only report what would be appended.")
@json_option
def command(store_dir: str, config: str | None, dry_run: bool, as_json: bool) -> None:
    """Re-append the intact records recovery set aside in quarantine/ as new messages."""
    from ..store.store_dir import is_store_dir
    from ..store.salvage import salvage_store
    if not is_store_dir(store_dir):
        raise click.ClickException(f"{store_dir}: not a store directory; nothing was written")
    with open_store(store_dir, config) as store:
        results = salvage_store(store, dry_run=dry_run)
    bad = any(r.get("failed") or r["status"] == "unreadable" for r in results)
    if as_json:
        emit_json({"store": os.path.abspath(store_dir), "events": results, "ok": not bad})
    elif not results:
        click.echo(f"{store_dir}: nothing in quarantine")
    else:
        for r in results:
            if r["status"] == "unreadable":
                click.echo(f"{r['event']}: {r['error']}", err=True)
                continue
            click.echo(f"{r['event']}: {r['status']}: cut at {r['cut_at']} ({r['reason']}); "
                       f"{r.get('found', 0)} intact record(s) found, {r.get('appended', 0)} "
                       f"appended, {len(r.get('failed') or [])} failed")
            for u in r.get("unsaved") or []:
                click.echo(f"  could not save {u['bytes']} byte(s) at CommitLog offset "
                           f"{u['offset']} (no intact record there)")
            for f in r.get("failed") or []:
                click.echo(f"  append of the record from {f['offset']} failed: {f['error']}",
                           err=True)
        click.echo(f"quarantine kept in {os.path.join(store_dir, 'quarantine')} (delete it "
                   "yourself once satisfied)")
    sys.exit(1 if bad else 0)
