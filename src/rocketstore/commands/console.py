"""``rocketstore console``: the web console of a running cluster, or of a store directory.

``--namesrv ADDR`` (or ``--broker ADDR``) reads a running cluster through RocketMQ's admin
requests — the ones ``mqadmin`` sends — so it works for ``rocketstore serve`` and for Apache
RocketMQ's own brokers alike: brokers and their TPS, topics, consumer groups with lag, message
search. ``--store DIR`` reads a store directory: it takes no lock and writes nothing, so it runs
beside a live ``rocketstore serve`` on the same directory (or on a copy, a backup, a store
written by Apache RocketMQ); what only a running broker knows — live clients, TPS — is not
shown. Prints one ready line (JSON with ``--json``), runs until SIGTERM or SIGINT, exits 0.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading

import click


def _source(store_dir: str | None, namesrv: str | None, broker: str | None, refresh_s: float):
    from ..errors import RocketStoreError
    from ..ops.sources import LocalSource, RemoteSource
    from ..ops.state import StoreDirectorySource

    if store_dir is not None:
        if not os.path.isdir(store_dir):
            raise click.ClickException(f"{store_dir}: no such store directory")
        try:
            d = StoreDirectorySource(store_dir, refresh_s)
        except RocketStoreError as exc:
            raise click.ClickException(f"{exc}; nothing was written") from exc
        return LocalSource(d.state), d.close, d.path
    try:
        remote = RemoteSource(namesrv, broker)
    except (ConnectionError, TimeoutError, OSError, RocketStoreError) as exc:
        raise click.ClickException(f"cannot read the cluster at {namesrv or broker}: "
                                   f"{exc}") from exc
    return remote, remote.close, namesrv or broker


@click.command("console")
@click.option("--namesrv", metavar="HOST:PORT[;HOST:PORT]",
              help="A running cluster's name server(s).")
@click.option("--broker", metavar="HOST:PORT", help="One running broker (no name server).")
@click.option("--store", "store_dir", type=click.Path(file_okay=False),
              help="A store directory, read-only (no broker needed).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free).")
@click.option("--refresh", "refresh_s", default=5.0, show_default=True, type=float,
              help="With --store: seconds after which the store is re-read (0 = read once).")
@click.option("--allowed-hosts", default="", metavar="NAME[,NAME]",
              help="Host header values to answer besides 127.0.0.1, localhost and --host.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable status lines.")
def command(namesrv: str | None, broker: str | None, store_dir: str | None, host: str, port: int,
            refresh_s: float, allowed_hosts: str, as_json: bool) -> None:
    """Web console of a running cluster (--namesrv/--broker) or a store directory (--store)."""
    if sum(x is not None for x in (namesrv, broker, store_dir)) != 1:
        raise click.UsageError("give one of --namesrv, --broker or --store")
    try:
        from ..ops.console import ConsoleServer
    except ImportError as exc:
        raise click.ClickException(f"the console needs the ops extra "
                                   f"(pip install 'rocketstore[ops]'): {exc}") from exc
    source, close, what = _source(store_dir, namesrv, broker, refresh_s)
    from ..ops.httpguard import allowed_hosts as host_list
    server = ConsoleServer(source, host, port, allowed_hosts=host_list(host, allowed_hosts))
    try:
        try:
            server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot serve the console on {host}:{port}: "
                                       f"{exc.strerror or exc}") from exc
        ready = {"event": "ready", "console": server.url,
                 **({"store": what} if store_dir else {"cluster": what})}
        mode = "read-only" if store_dir else "through the admin requests"
        click.echo(json.dumps(ready) if as_json else
                   f"rocketstore console on {server.url} for {what} ({mode}; Ctrl-C to stop)")
        sys.stdout.flush()
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        close()
    click.echo(json.dumps({"event": "stopped"}) if as_json else "stopped cleanly")
