"""``rocketstore serve`` in controller mode (``enableControllerMode=true``): the broker takes its
id and role from the controller (``broker.replicas.ReplicasManager``) and serves it.

Theory of operation. The replica manager registers and learns the first role; the broker then
starts as that role — a master as SYNC_MASTER with brokerId 0, a slave as SLAVE with its
controller id, following the master's HA socket (listenPort + 1 of the master's address) — with
the store's auto-switch HA (``store.ha.autoswitch``). When the controller names another master
(a higher master epoch, pushed or polled) and names this slave, it is promoted in place
(``Broker.promote``: store and listeners kept; the HA client stops, a torn last message is
cut, a new epoch entry starts at the max offset, the master's handlers replace the slave
refusals, brokerId 0 is registered at once, then timer, delayed delivery, transaction checks
and pop revive start); a promotion that fails falls back to the restart below. Any other role
change stops the broker and starts it again in this process with the new role: a deposed
master comes back as a slave, a slave follows a new master. A slave whose CommitLog diverges
from the master's history is stopped, its tail set aside in ``<store>/quarantine/`` and cut
(``autoswitch.cut_tail``), and started again. Heartbeats to the controller go on throughout
(the replica manager lives outside the broker). ``--metrics-port`` / ``--console``
(``ops.OpsServices``) start with the first broker and follow each restarted one.

stdout (``--json``): the ``ready`` line once the first role runs, then a ``role`` line for
each change (an in-place promotion: ``promoted_in_place``, ``promotion_s`` and each step's
seconds in ``promotion_steps``), ``stopped`` at the end.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import sys
from typing import Any

import click

log = logging.getLogger(__name__)


def _say(as_json: bool, event: dict, text: str) -> None:
    click.echo(json.dumps(event) if as_json else text)
    sys.stdout.flush()


async def serve_controller_mode(store_cfg: Any, broker_cfg: Any, cm: Any, as_json: bool,
                                ops_ports: dict | None = None) -> None:
    from ..broker.replicas import ReplicasManager, epoch_cache_body, ha_address
    from ..broker.wiring import Broker
    from ..controller.codes import ControllerRequest as Q
    from ..store.ha.autoswitch import AutoSwitchSettings, cut_tail
    from ..store.ha.epoch import EpochCache

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker_cfg.worker_processes = 1  # one process: the store reopens on a role change
    root = store_cfg.store_path_root_dir
    rm = ReplicasManager(cm, broker_cfg.cluster_name, broker_cfg.broker_name,
                         broker_cfg.broker_addr, root)
    starting = loop.create_task(rm.start())
    stopping = loop.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        await rm.stop()
        _say(as_json, {"event": "stopped"}, "stopped cleanly")
        return
    from ..broker.replicas import IdentityMismatch
    try:
        starting.result()
    except IdentityMismatch as exc:
        await rm.stop()
        raise click.ClickException(str(exc)) from None
    truncate: list[int] = []
    cut = asyncio.Event()

    def on_truncate(point: int) -> None:  # from the HA client's thread
        def take() -> None:
            truncate.append(point)
            cut.set()
        loop.call_soon_threadsafe(take)

    async def epoch_cache(conn: Any, cmd: Any) -> Any:
        return cmd.response(0, body=epoch_cache_body(rm, rm.ha))

    first = True
    ops: Any = None  # --metrics-port / --console: started with the first broker, kept
    urls: dict[str, str] = {}
    want_ops = bool(ops_ports) and any(v is not None for v in (ops_ports or {}).values())
    while not stop.is_set():
        role = rm.role
        assert role is not None and rm.broker_id is not None
        rm.role_changed.clear()
        is_master = role.master_id == rm.broker_id
        master_ha = None if is_master else ha_address(role.master_addr)
        settings = AutoSwitchSettings(
            epoch_path=cm.epoch_path(root), broker_id=rm.broker_id, is_master=is_master,
            master_epoch=role.master_epoch,
            sync_state_set=set(rm.sync_state_set) if is_master else set(),
            master_ha_address=master_ha, all_ack_in_sync_state_set=cm.all_ack_in_sync_state_set,
            in_sync_replicas=cm.in_sync_replicas, min_in_sync_replicas=cm.min_in_sync_replicas,
            sync_from_last_file=cm.sync_from_last_file, async_learner=cm.async_learner,
            ha_max_time_slave_not_catchup=cm.ha_max_time_slave_not_catchup,
            on_truncate=on_truncate, on_expand=rm.expand_from_ha,
            on_slave_lost=rm.shrink_from_ha)
        scfg = dataclasses.replace(store_cfg, broker_role="SYNC_MASTER" if is_master else "SLAVE",
                                   ha_master_address=master_ha, controller_ha=settings)
        bcfg = dataclasses.replace(broker_cfg, broker_id=0 if is_master else rm.broker_id)
        broker = Broker(scfg, bcfg)
        if bcfg.grpc_port is not None:
            from ..proxy.attach import GrpcService
            broker.extensions.append(GrpcService(broker, bcfg.host, bcfg.grpc_port))
        broker.handler_wrappers.append(lambda h: {**h, int(Q.NOTIFY_BROKER_ROLE_CHANGED):
                                                  rm.notify_handler,
                                                  int(Q.GET_BROKER_EPOCH_CACHE): epoch_cache})
        if want_ops:
            if ops is None:
                try:  # metrics and console: opt-in, from the ``ops`` extra
                    from ..ops import OpsServices
                    ops = OpsServices(broker, host=bcfg.host, **(ops_ports or {}))
                except ImportError as exc:
                    await rm.stop()
                    raise click.ClickException(f"--metrics-port and --console need the ops "
                                               f"extra (pip install 'rocketstore[ops]'): {exc}")
            else:
                ops.attach(broker)
        cut.clear()
        truncate.clear()
        try:
            await broker.start()
        except OSError as exc:  # a port still held: the next role change tries again
            log.error("controller mode: broker start failed: %s", exc)
            if first:
                raise click.ClickException(f"cannot listen on {bcfg.host}:{bcfg.port}: {exc}")
            await asyncio.sleep(1.0)
            continue
        rm.ha = broker.store.ha
        if ops is not None:
            if not urls:
                try:
                    urls = ops.start()
                except OSError as exc:
                    await broker.stop()
                    await rm.stop()
                    raise click.ClickException(f"cannot serve metrics/console on {bcfg.host} "
                                               f"({ops_ports}): {exc.strerror or exc}") from exc
            else:
                ops.follow(broker)
        extra: dict = dict(urls)
        while True:
            event = {"event": "ready" if first else "role", "broker": bcfg.broker_addr,
                     "namesrv": bcfg.namesrv_addr if bcfg.namesrv_port is None
                     else f"{bcfg.host}:{bcfg.namesrv_port}",
                     "namesrv_listening": bcfg.namesrv_port is not None, "store": root,
                     "role": scfg.broker_role, "broker_id": bcfg.broker_id,
                     "controller_broker_id": rm.broker_id, "master_epoch": role.master_epoch,
                     "master": role.master_addr, "ha": broker.ha_server_addr,
                     "controller": rm.leader, **extra}
            if bcfg.grpc_port is not None:
                event["grpc"] = f"{bcfg.host}:{bcfg.grpc_port}"
            _say(as_json, event,
                 f"rocketstore broker on {bcfg.broker_addr} in controller mode: "
                 f"{scfg.broker_role} (controller id {rm.broker_id}, master epoch "
                 f"{role.master_epoch}), store {root}")
            first = False
            waits = {loop.create_task(stop.wait()), loop.create_task(rm.role_changed.wait()),
                     loop.create_task(cut.wait())}
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for t in pending:
                t.cancel()
            new_role = rm.role
            if stop.is_set() or truncate or not broker.is_slave or new_role is None \
                    or new_role.master_id != rm.broker_id:
                break
            # a slave named master: promoted in place (store and listeners kept)
            rm.role_changed.clear()
            role = new_role
            timings: dict[str, float] = {}
            t0 = loop.time()
            try:
                await broker.promote(role.master_epoch, set(rm.sync_state_set), timings)
            except Exception:  # noqa: BLE001 - the restart below is the way back
                log.exception("controller mode: in-place promotion failed; restarting as master")
                break
            log.warning("controller mode: promoted in place in %.3f s: %s",
                        loop.time() - t0, timings)
            scfg, bcfg = broker.store_config, broker.config
            extra = {**urls, "promoted_in_place": True,
                     "promotion_s": round(loop.time() - t0, 4), "promotion_steps": timings}
        rm.ha = None
        if not stop.is_set():
            broker.config.shutdown_grace_s = min(broker.config.shutdown_grace_s, 0.5)
        await broker.stop()
        if truncate and not stop.is_set():
            point = truncate[-1]
            ev = await loop.run_in_executor(None, cut_tail, scfg, point,
                                            f"diverged from master {role.master_addr} (epoch "
                                            f"{role.master_epoch}) after offset {point}")
            EpochCache(cm.epoch_path(root)).truncate_suffix_by_offset(point)
            log.warning("controller mode: CommitLog cut at %d%s", point,
                        f", {ev.bytes} byte(s) kept in {ev.path}" if ev is not None else "")
    if ops is not None:
        await loop.run_in_executor(None, ops.stop)
    await rm.stop()
    _say(as_json, {"event": "stopped"}, "stopped cleanly")
