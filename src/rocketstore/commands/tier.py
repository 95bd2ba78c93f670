"""``rocketstore tier status|verify --store DIR [--json]``: the tier a store feeds.

The tier's location comes from ``<store>/config/tieredStoreLocation.json`` (written by the
store; credentials are never in it: an S3 tier takes AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
from the environment) or from ``--config broker.conf``. ``verify`` exits 1 when a queue's
files are not consistent (``store.tier.check``), 2 when no tier is known for the store.
``verify --repair`` first opens the store and mends what it can (``store.tier.repair``).
"""
from __future__ import annotations

import sys

import click

from ._common import emit_json, json_option, store_option


def _tier(store_dir: str, config: str | None):
    from ..config import StoreConfig
    from ..store.tier.check import tier_config_of_store
    tcfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir).tier_config()
            if config else tier_config_of_store(store_dir))
    if tcfg is None:
        click.echo(f"error: {store_dir}: no tier known (give --config broker.conf with "
                   "messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore)", err=True)
        sys.exit(2)
    return tcfg


def _run(store_dir: str, config: str | None, as_json: bool, verify: bool) -> None:
    from ..store.tier.check import tier_report
    report = tier_report(_tier(store_dir, config), verify=verify)
    if as_json:
        emit_json(report)
    else:
        click.echo(f"tier ({report['backend']}) {report['base']}: cluster {report['cluster']}, "
                   f"broker {report['broker']}, {len(report['queues'])} queue(s)")
        for q in report["queues"]:
            click.echo(f"  {q['topic']}/{q['queueId']}: offsets [{q['minOffset']}, {q['maxOffset']}), "
                       f"{q['commitLogSegments']} COMMIT_LOG segment(s), {q['commitLogBytes']} bytes")
        click.echo(f"  INDEX: {report['indexSegments']} segment(s), {report['indexBytes']} bytes")
        for d in report["damaged"]:
            click.echo(f"  damaged beyond repair: {d['topic']}/{d['queueId']} queue offset(s) "
                       f"{','.join(map(str, d['queueOffsets']))} (flat offsets "
                       f"{','.join(map(str, d['flatOffsets']))}), kept aside as {d['quarantine']}: "
                       f"{d['reason']}")
        for p in report["problems"]:
            click.echo(p)
        if verify:
            click.echo("OK" if report["ok"] else f"DAMAGED: {len(report['problems'])} problem(s)")
    if verify and not report["ok"]:
        sys.exit(1)


@click.group("tier")
def command() -> None:
    """The tiered store a store feeds (RocketMQ 5's TieredMessageStore layout)."""


_config = click.option("--config", type=click.Path(dir_okay=False, exists=True),
                       help="broker.conf with the tier keys (default: what the store recorded).")


@command.command("status")
@store_option
@_config
@json_option
def status(store_dir: str, config: str | None, as_json: bool) -> None:
    """Each queue's offsets and bytes in the tier."""
    _run(store_dir, config, as_json, verify=False)


@command.command("verify")
@store_option
@_config
@click.option("--repair", is_flag=True,
              help="First mend damaged tier records from the local CommitLog while it holds them "
                   "(what the broker does when a read finds one); the rest are kept aside under "
                   "quarantine/. Opens the store: the broker must be stopped.")
@json_option
def verify(store_dir: str, config: str | None, repair: bool, as_json: bool) -> None:
    """Check every queue's flat files (whole units, records where they point and their CRCs,
    S3 object checksums, no torn tail)."""
    if repair:
        _repair(store_dir, config, as_json)
    _run(store_dir, config, as_json, verify=True)


def _repair(store_dir: str, config: str | None, as_json: bool) -> None:
    """``store.tier.verify_and_repair`` on the store opened with its tier."""
    from ..config import StoreConfig
    from ..errors import StoreLockedError
    from ..store.message_store import MessageStore
    from ._common import detect_sizes
    tcfg = _tier(store_dir, config)
    cfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir) if config
           else StoreConfig(store_path_root_dir=store_dir, **detect_sizes(store_dir)))
    try:
        with MessageStore(cfg.replace(tier=tcfg)) as store:
            assert store.tier is not None
            done = store.tier.verify_and_repair()
    except StoreLockedError as e:
        click.echo(f"error: {e} (stop the broker first; it repairs on read by itself)", err=True)
        sys.exit(2)
    if not as_json:
        for path, (mended, lost) in sorted(done.items()):
            click.echo(f"repaired {path}: {len(mended)} record(s) rewritten from the local "
                       f"CommitLog, {len(lost)} beyond repair (kept aside under quarantine/)")
