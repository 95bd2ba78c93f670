"""Helpers shared by the CLI commands: JSON output, progress bars, opening a store for reading
and showing its messages."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator

import click

TOPIC_NOT_EXIST = 17  # ResponseCode.TOPIC_NOT_EXIST
_NO_ROUTE = re.compile(r"for the topic: ?(\S+)")


def broker_message(exc: Exception) -> str:
    """An exception as one line; a broker's TOPIC_NOT_EXIST says which topic does not exist
    (RocketMQ's "No topic route info in name server for the topic: T")."""
    from ..errors import BrokerError
    if isinstance(exc, BrokerError) and exc.code == TOPIC_NOT_EXIST:
        m = _NO_ROUTE.search(exc.remark or "")
        name = f"topic {m.group(1)}" if m else "the topic"
        return (f"{name} does not exist (the name server has no route for it; "
                "create it with `rocketstore updatetopic` or by sending to it)")
    return str(exc)


async def until_signalled() -> None:
    """Wait until SIGTERM or SIGINT: how a server command (namesrv, controller) stays up; the
    caller closes its servers after."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
store_option = click.option("--store", "store_dir", required=True,
                            type=click.Path(file_okay=False), help="Store root directory.")


tier_option = click.option(
    "--option", "-o", "tier_opts", multiple=True, metavar="KEY=VALUE",
    help="With a tier for --store (s3://bucket/prefix): objectStoreEndpoint, objectStoreAccessKey, "
         "objectStoreSecretKey, objectStoreRegion, as the Spark tier source takes them (default: "
         "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION).")


def tier_location(store_dir: str, pairs: tuple[str, ...], what: str) -> dict | None:
    """When ``--store`` names a tier (a posix tier's base or ``s3://bucket/prefix``): its
    options as the Spark tier source reads them (``spark.tier_options``), else None."""
    from ..spark.tier_options import TIER_NAMES, is_tier_path, tier_options
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.ClickException(f"--option {pair!r}: give KEY=VALUE")
        given[key.strip()] = value
    if not is_tier_path(store_dir):
        if given:
            raise click.ClickException(f"--option is for a tier; {store_dir} is not one")
        return None
    names = tuple(n for n in TIER_NAMES if n not in ("path", "pushdown"))
    try:
        tier_options(given, names, what)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    return {"path": store_dir, **given}


def emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, ensure_ascii=False, default=_default, indent=None))


def _default(o: Any) -> Any:
    if isinstance(o, bytes):
        try:
            return o.decode("utf-8")
        except UnicodeDecodeError:
            return o.hex()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "name"):
        return o.name
    return str(o)


def is_terminal() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(description: str, total: float | None, unit: str = "") -> Iterator[Any]:
    """A rich progress bar on a terminal, a silent stand-in when piped.

    Yields an object with ``advance(n)``.
    """
    if not is_terminal():
        class _Quiet:
            def advance(self, n: float = 1) -> None:
                pass
        yield _Quiet()
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TransferSpeedColumn)
    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn()]
    if unit == "bytes":
        cols.insert(3, TransferSpeedColumn())
    with Progress(*cols, transient=True) as prog:
        task = prog.add_task(description, total=total)

        class _Bar:
            def advance(self, n: float = 1) -> None:
                prog.advance(task, n)
        yield _Bar()


def parse_time_ms(value: str | None) -> int | None:
    """ISO-8601 (or integer ms) → epoch ms; None passes through."""
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.astimezone(timezone.utc).timestamp() * 1000)


# -- reading a store and showing its messages ---------------------------------------------------
def open_store_read_only(store_dir: str, config: str | None = None):
    """Open a store for a read-only command: no lock (works beside a live broker), nothing
    written; a directory that is not a store is refused with a clear message."""
    from ..config import StoreConfig
    from ..errors import NotAStoreError
    from ..store.message_store import MessageStore
    from ..store.store_dir import is_store_dir
    if not os.path.isdir(store_dir):
        raise click.ClickException(f"{store_dir}: no such store directory")
    if not is_store_dir(store_dir):
        raise click.ClickException(f"{store_dir}: not a store directory (no commitlog, consumequeue, "
                                   "index or checkpoint); nothing was written")
    cfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir) if config
           else StoreConfig(store_path_root_dir=store_dir, **detect_sizes(store_dir)))
    try:
        return MessageStore.open_read_only(store_dir, cfg)
    except NotAStoreError as exc:
        raise click.ClickException(str(exc)) from exc


def detect_sizes(store_dir: str) -> dict:
    """File sizes of an existing store, so it opens without a config file."""
    from ..errors import CorruptFileError
    from ..store.store_dir import detect_sizes as _detect
    try:
        return _detect(store_dir)
    except CorruptFileError as exc:
        raise click.ClickException(f"{exc}; pass --config broker.conf") from exc


def message_dict(m, with_body: bool = True) -> dict:
    d = {"msg_id": m.msg_id, "topic": m.topic, "queue_id": m.queue_id,
         "queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
         "store_size": m.store_size, "tags": m.tags, "keys": m.keys, "uniq_key": m.uniq_key,
         "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
         "born_host": m.born_host, "store_host": m.store_host, "sys_flag": m.sys_flag,
         "flag": m.flag, "reconsume_times": m.reconsume_times, "body_crc": m.body_crc,
         "properties": m.properties}
    if with_body:
        try:
            d["body"] = m.body.decode("utf-8")
        except UnicodeDecodeError:
            d["body_hex"] = m.body.hex()
    return d
