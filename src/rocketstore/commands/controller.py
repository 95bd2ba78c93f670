"""``rocketstore controller --config controller.conf``: RocketMQ 5's controller.

Brokers in controller mode (RocketMQ 5's own with ``enableControllerMode=true`` and
``controllerAddr=HOST:PORT``) register, heartbeat and are given their roles here; mqadmin's
getSyncStateSet, getControllerMetaData, electMaster, cleanBrokerMetadata, getControllerConfig and
updateControllerConfig work against it. ``controller.conf`` takes RocketMQ's ControllerConfig keys
(``rocketstore.controller.config`` lists them). Decisions are fsynced under controllerStorePath
before they are answered, so a SIGKILLed controller comes back with them. Prints one ready line
(JSON with ``--json``), runs until SIGTERM or SIGINT, exits 0.
"""
from __future__ import annotations

import asyncio
import json
import logging
import sys

import click

from ._common import until_signalled


async def _run(cfg, as_json: bool, metrics_port: int | None) -> None:
    from ..controller import server

    try:
        running = await server.start(cfg)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(
            f"cannot load the controller's state from {cfg.controllerStorePath}: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(
            f"controller on {cfg.listenHost}:{cfg.listenPort} ({cfg.controllerStorePath}): "
            f"{exc.strerror or exc}") from exc
    svc, addr = running.service, running.address
    metrics = None
    if metrics_port is not None:
        from ..ops.controller_metrics import ControllerCollector
        from ..ops.metrics import MetricsServer, new_registry
        registry = new_registry()
        registry.register(ControllerCollector(svc))
        metrics = MetricsServer(registry, cfg.listenHost, metrics_port)
        try:
            metrics.start()
        except OSError as exc:
            await running.close()
            raise click.ClickException(
                f"metrics on {cfg.listenHost}:{metrics_port}: {exc.strerror or exc}") from exc
    groups = len(svc.state.groups)
    where = (f"etcd {cfg.etcdEndpoints}" if svc.group is not None else cfg.controllerStorePath)
    click.echo(json.dumps({"event": "ready", "controller": addr, "groups": groups,
                           "store": where, "replicated": svc.group is not None,
                           "metrics": metrics.url if metrics else None}) if as_json
               else f"rocketstore controller on {addr}, "
                    + (f"one of a group on {where} (campaigning for its lead)"
                       if svc.group is not None else
                       f"{groups} broker group(s) from {where}") + " (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        await until_signalled()
    finally:
        if metrics is not None:
            metrics.stop()
        await running.close()
    click.echo(json.dumps({"event": "stopped"}) if as_json else "stopped cleanly")


@click.command("controller")
@click.option("--config", "config_path", required=True, metavar="FILE",
              help="controller.conf: listenPort, controllerStorePath, enableElectUncleanMaster, "
                   "notifyBrokerRoleChanged, scanNotActiveBrokerInterval, ...")
@click.option("--port", type=int, default=None, help="Overrides listenPort (0 = any free).")
@click.option("--metrics-port", type=int, default=None,
              help="Serve Prometheus /metrics here (0 = any free): each group's master, epochs, "
                   "SyncStateSet, live replicas, last failover; whether this controller leads.")
@click.option("--log-level", default="WARNING", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable status lines.")
def command(config_path: str, port: int | None, metrics_port: int | None, log_level: str,
            as_json: bool) -> None:
    """Run RocketMQ 5's controller (SyncStateSet, master epochs, broker ids)."""
    from ..controller.config import ControllerConfig
    from ..logsafe import configure

    configure(getattr(logging, log_level.upper(), logging.WARNING))
    try:
        cfg = ControllerConfig.load(config_path)
        cfg.check_group()
    except OSError as exc:
        raise click.ClickException(f"cannot read {config_path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise click.ClickException(f"{config_path}: {exc}") from exc
    if port is not None:
        cfg.listenPort = port
    asyncio.run(_run(cfg, as_json, metrics_port))
