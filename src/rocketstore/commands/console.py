"""``rocketstore console --store DIR``: the web console over a store directory, without a broker.

The same pages as ``rocketstore serve --console`` (topics, queues, consumer groups and their
committed offsets, message search), read from the files: it takes no lock and writes nothing,
so it runs beside a live ``rocketstore serve`` on the same directory (or on a copy, a backup, a
store written by Apache RocketMQ). What only a running broker knows — live clients, TPS — is not
shown. Prints one ready line (JSON with ``--json``), runs until SIGTERM or SIGINT, exits 0.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading

import click

from ._common import store_option


@click.command("console")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free).")
@click.option("--refresh", "refresh_s", default=5.0, show_default=True, type=float,
              help="Seconds after which the store is re-read (0 = read once).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable status lines.")
def command(store_dir: str, host: str, port: int, refresh_s: float, as_json: bool) -> None:
    """Browse a store directory in the web console (read-only; no broker needed)."""
    try:
        from ..ops.console import ConsoleServer
        from ..ops.state import StoreDirectorySource
    except ImportError as exc:
        raise click.ClickException(f"the console needs the ops extra "
                                   f"(pip install 'rocketstore[ops]'): {exc}") from exc
    from ..errors import RocketStoreError

    if not os.path.isdir(store_dir):
        raise click.ClickException(f"{store_dir}: no such store directory")
    try:
        source = StoreDirectorySource(store_dir, refresh_s)
    except RocketStoreError as exc:
        raise click.ClickException(f"{exc}; nothing was written") from exc
    server = ConsoleServer(source.state, host, port)
    try:
        try:
            server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot serve the console on {host}:{port}: "
                                       f"{exc.strerror or exc}") from exc
        ready = {"event": "ready", "console": server.url, "store": source.path}
        click.echo(json.dumps(ready) if as_json else
                   f"rocketstore console on {server.url} for {source.path} (read-only; Ctrl-C to stop)")
        sys.stdout.flush()
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        source.close()
    click.echo(json.dumps({"event": "stopped"}) if as_json else "stopped cleanly")
