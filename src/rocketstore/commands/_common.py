"""Helpers shared by the CLI commands: JSON output, progress bars, store opening."""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
store_option = click.option("--store", "store_dir", required=True,
                            type=click.Path(file_okay=False), help="Store root directory.")


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
