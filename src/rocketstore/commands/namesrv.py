"""``rocketstore namesrv``: a name server alone, for a cluster of brokers.

Brokers — ``rocketstore serve --namesrv HOST:PORT`` or RocketMQ's own (``namesrvAddr``) — register
here every 30 s; clients ask it for routes, the cluster's brokers and its topic list, as they
ask RocketMQ's ``mqnamesrv``; operators change write perms and the KV config
(``~/namesrv/kvConfig.json`` as RocketMQ's, or ``--kv-config-path``). Prints one ready line (JSON with ``--json``), runs until SIGTERM
or SIGINT, exits 0.
"""
from __future__ import annotations

import asyncio
import json
import logging
import sys

import click

from ._common import until_signalled


class _NoBroker:
    """What the remoting server calls on a closing connection: a broker's registration
    connection closing removes that broker from the routes (RocketMQ's onChannelDestroy)."""

    def __init__(self, table=None) -> None:
        self.table = table

    def connection_closed(self, conn) -> None:
        if self.table is not None:
            self.table.channel_closed(conn)


async def _run(host: str, port: int, as_json: bool, kv_config_path: str,
               order_message_enable: bool, acl_file: str | None = None,
               controller_cfg=None) -> None:
    from ..broker import requests
    from ..broker.namesrv import context
    from ..broker.namesrv.kvconfig import KVConfigManager
    from ..broker.namesrv.settings import NamesrvSettings
    from ..broker.server import RemotingServer

    try:
        kv = KVConfigManager(kv_config_path)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load the KV config: {exc}") from exc
    settings = NamesrvSettings(kv_config_path, order_message_enable)
    ctx = context.build(None, kv=kv, settings=settings)
    handlers = requests.namesrv_handlers(ctx)
    acl = None
    if acl_file:  # the write codes need an admin account of that file (broker.namesrv.acl)
        from ..broker.acl.address import AclError
        from ..broker.acl.service import AclFileWatchService, PlainPermissionManager
        from ..broker.namesrv import acl as namesrv_acl
        acl = PlainPermissionManager(acl_file)
        try:
            acl.load()
        except AclError as exc:
            raise click.ClickException(f"ACL configuration: {exc}") from exc
        acl.watcher = AclFileWatchService(acl, 5.0)  # type: ignore[attr-defined]
        acl.watcher.start()
        handlers = namesrv_acl.guard(acl, handlers)
    srv = RemotingServer(_NoBroker(ctx.table), handlers, "namesrv")
    settings.listen_port = lambda: srv.port
    try:
        await srv.start(host, port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    addr = f"{host}:{srv.port}"
    ctl = None
    if controller_cfg is not None:  # enableControllerInNamesrv: RocketMQ 5's controller beside it
        from ..controller import server as controller_server
        try:
            ctl = await controller_server.start(controller_cfg)
        except (OSError, ValueError, KeyError) as exc:
            srv.stop_accepting()
            await srv.close()
            raise click.ClickException(f"the controller (enableControllerInNamesrv): {exc}") from exc
    ready = {"event": "ready", "namesrv": addr}
    if ctl is not None:
        ready["controller"] = ctl.address
    click.echo(json.dumps(ready) if as_json
               else f"rocketstore name server on {addr}"
                    + (f", controller on {ctl.address}" if ctl is not None else "")
                    + " (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        await until_signalled()
    finally:
        srv.stop_accepting()
        await srv.close()
        if ctl is not None:
            await ctl.close()
        if acl is not None:
            acl.watcher.stop()
    click.echo(json.dumps({"event": "stopped"}) if as_json else "stopped cleanly")


@click.command("namesrv")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=9876, show_default=True, type=int, help="Port (0 = any free).")
@click.option("--log-level", default="WARNING", show_default=True)
@click.option("--kv-config-path", default=None, metavar="FILE",
              help="KV config (mqadmin updateKvConfig/updateOrderConf), RocketMQ's "
                   "kvConfigPath. [default: ~/namesrv/kvConfig.json]")
@click.option("--order-message-enable", is_flag=True,
              help="Routes carry the topic's ORDER_TOPIC_CONFIG as orderTopicConf "
                   "(RocketMQ's orderMessageEnable).")
@click.option("--acl-file", default=None, metavar="FILE",
              help="A plain_acl.yml: the write codes (KV config, write perms, broker "
                   "registration, topic deletion, config) then need an admin account's "
                   "signature or a globalWhiteRemoteAddresses address.")
@click.option("--config", "config_path", default=None, metavar="FILE",
              help="namesrv.conf (RocketMQ's keys): listenPort, kvConfigPath, orderMessageEnable; "
                   "enableControllerInNamesrv=true runs RocketMQ 5's controller too, with the "
                   "controller keys (its port: controllerDLegerPeers' entry for "
                   "controllerDLegerSelfId, else 19876). Options given win over the file.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable status lines.")
@click.pass_context
def command(click_ctx: click.Context, host: str, port: int, log_level: str,
            kv_config_path: str | None, order_message_enable: bool, acl_file: str | None,
            config_path: str | None, as_json: bool) -> None:
    """Run a name server that brokers register with (no broker, no store)."""
    from ..broker.namesrv.kvconfig import default_kv_config_path

    from ..logsafe import configure
    configure(getattr(logging, log_level.upper(), logging.WARNING))  # client values escaped
    controller_cfg = None
    if config_path is not None:
        port, kv_config_path, order_message_enable, controller_cfg = _from_config(
            click_ctx, config_path, port, kv_config_path, order_message_enable)
    asyncio.run(_run(host, port, as_json, kv_config_path or default_kv_config_path(),
                     order_message_enable, acl_file, controller_cfg))


def _from_config(click_ctx: click.Context, path: str, port: int, kv_config_path: str | None,
                 order_message_enable: bool):
    from ..config import parse_properties

    def given(name: str) -> bool:
        src = click_ctx.get_parameter_source(name)
        return src is not None and src.name == "COMMANDLINE"
    try:
        with open(path, encoding="utf-8") as fh:
            props = parse_properties(fh.read())
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise click.ClickException(f"{path}: {exc}") from exc

    def flag(key: str) -> bool:
        v = props.get(key, "false").strip().lower()
        if v not in ("true", "false"):
            raise click.ClickException(f"{path}: {key}: {props[key]!r} is not true or false")
        return v == "true"
    if "listenPort" in props and not given("port"):
        try:
            port = int(props["listenPort"])
        except ValueError:
            raise click.ClickException(f"{path}: listenPort: {props['listenPort']!r} is not a number") from None
    if "kvConfigPath" in props and not given("kv_config_path"):
        kv_config_path = props["kvConfigPath"]
    if not given("order_message_enable"):
        order_message_enable = flag("orderMessageEnable")
    controller_cfg = None
    if flag("enableControllerInNamesrv"):
        from ..controller.config import ControllerConfig
        from ..controller.server import self_peer_port
        ctl_props = {k: v for k, v in props.items()
                     if k not in ("listenPort", "kvConfigPath", "orderMessageEnable",
                                  "enableControllerInNamesrv")}
        try:
            controller_cfg = ControllerConfig.from_properties(ctl_props)
            peer_port = self_peer_port(controller_cfg)
            controller_cfg.check_group()
        except ValueError as exc:
            raise click.ClickException(f"{path}: {exc}") from exc
        if peer_port is not None:
            controller_cfg.listenPort = peer_port
    return port, kv_config_path, order_message_enable, controller_cfg
