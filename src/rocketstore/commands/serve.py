"""``rocketstore serve``: a name server and a broker speaking RocketMQ 4.x remoting.

Theory of operation: settings come from defaults, then a RocketMQ ``broker.conf`` (store keys to
``StoreConfig``, broker keys such as ``listenPort`` / ``brokerName`` to ``BrokerConfig``), then
the command line. With ``--namesrv "h1:9876;h2:9876"`` (or ``namesrvAddr`` in the config) the
broker registers with those (``broker.registration``) and joins their cluster; the embedded name
server is then started only when ``--namesrv-port`` is given explicitly (it knows its own broker
directly, so an address naming it is not registered with twice). Without either, the embedded
name server listens on 9876. The process prints one ready line (JSON with ``--json``) once every
port listens, naming only ports that really listen; it runs until SIGTERM or SIGINT, then
shuts down gracefully (``Broker.stop``) and exits 0.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys

import click

from ._common import store_option


def _store_config(store_dir: str, conf: str | None, options: tuple[str, ...],
                  delay_levels: str | None, flush: str | None):
    from ..config import StoreConfig

    fields = {f.name: f for f in dataclasses.fields(StoreConfig)}
    overrides: dict = {"store_path_root_dir": store_dir}
    for opt in options:
        key, sep, value = opt.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields or key == "extra":
            raise click.BadParameter(f"{opt!r}: want NAME=VALUE with a StoreConfig field name",
                                     param_hint="--store-option")
        t = str(fields[key].type)
        if t == "int":
            overrides[key] = int(value)
        elif t == "bool":
            overrides[key] = value.lower() in ("1", "true", "yes")
        else:
            overrides[key] = value
    if delay_levels:
        overrides["message_delay_level"] = delay_levels
    if flush:
        overrides["flush_disk_type"] = flush
    if conf:
        return StoreConfig.from_properties(conf, **overrides), "store_host" in overrides
    return StoreConfig(**overrides), "store_host" in overrides


def _bool(v: str) -> bool:
    return v.strip().lower() == "true"


# broker.conf keys the broker itself reads (the store's keys go to StoreConfig)
def _worker_count(option: int | None, conf: str | None) -> int:
    """``--workers`` / ``serverWorkerProcesses`` (the command line wins): the number of broker
    processes — the writer and N - 1 protocol workers (docs/DESIGN.md, "Speed"); by default one
    per core; 1 = one process, as before."""
    where, value = ("--workers", option) if option is not None else ("--config", conf)
    if value is None:
        return max(1, os.cpu_count() or 1)
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"serverWorkerProcesses={value!r} is not a number",
                                 param_hint=where) from None
    if not 1 <= n <= 256:
        raise click.BadParameter(f"{n} worker processes: use 1 (one process) to 256",
                                 param_hint=where)
    return n


_CONF_KEYS = {"listenPort": ("port", int), "brokerName": ("broker_name", str),
              "brokerClusterName": ("cluster_name", str),
              "autoCreateTopicEnable": ("auto_create_topic_enable", lambda v: v.lower() == "true"),
              "defaultTopicQueueNums": ("default_topic_queue_nums", int),
              "longPollingEnable": ("long_polling_enable", lambda v: v.lower() == "true"),
              "shortPollingTimeMills": ("short_polling_time_ms", int),
              "channelExpiredTimeout": ("channel_expired_timeout_ms", int),
              "flushConsumerOffsetInterval": ("flush_consumer_offset_interval_ms", int),
              "transactionTimeOut": ("transaction_timeout_ms", int),
              "transactionCheckInterval": ("transaction_check_interval_ms", int),
              "transactionCheckMax": ("transaction_check_max", int),
              "rejectTransactionMessage": ("reject_transaction_message",
                                           lambda v: v.lower() == "true"),
              "recallMessageEnable": ("recall_message_enable", _bool),
              "litePullMessageEnable": ("lite_pull_message_enable", _bool),
              "transactionBatchEnable": ("transaction_batch_enable", _bool),
              "transactionPackEnable": ("transaction_pack_enable", _bool),
              "grpcServerPort": ("grpc_port", int),
              "minInvisibleTimeMillsForRecv": ("grpc_min_invisible_time_ms", int),
              "namesrvAddr": ("namesrv_addr", str),
              "registerNameServerPeriod": ("register_name_server_period_ms", int),
              "enablePropertyFilter": ("enable_property_filter", _bool),
              "enableCalcFilterBitMap": ("enable_calc_filter_bit_map", _bool),
              "expectConsumerNumUseFilter": ("expect_consumer_num_use_filter", int),
              "maxErrorRateOfBloomFilter": ("max_error_rate_of_bloom_filter", int),
              "filterDataCleanTimeSpan": ("filter_data_clean_time_span_ms", int),
              "filterSupportRetry": ("filter_support_retry", _bool),
              "storeReplyMessageEnable": ("store_reply_message_enable", _bool),
              "kvConfigPath": ("kv_config_path", str),
              "orderMessageEnable": ("order_message_enable", _bool),
              "aclEnable": ("acl_enable", _bool), "aclPlainFile": ("acl_plain_file", str),
              "aclFileWatchInterval": ("acl_watch_interval_ms", int),
              # security limits (README "Security")
              "aclSignatureWindowSeconds": ("acl_signature_window_s", int),
              "namesrvAclEnable": ("namesrv_acl_enable", _bool),
              "serverChannelMaxIdleTimeSeconds": ("server_channel_max_idle_s", int),
              "serverFrameReadTimeoutSeconds": ("server_frame_read_timeout_s", float),
              "serverMaxConnections": ("server_max_connections", int),
              "serverMaxConnectionsPerClient": ("server_max_connections_per_client", int),
              "httpAllowedHosts": ("http_allowed_hosts", str),
              "brokerId": ("broker_id", int), "slaveReadEnable": ("slave_read_enable", _bool),
              "brokerIP2": ("broker_ip2", str),
              "serverFastSends": ("fast_sends", _bool)}


# keys of our own (not RocketMQ's) that broker.conf may hold
_OWN_KEYS = ("serverWorkerProcesses", "serverFastSends", "kvConfigPath", "grpcServerPort",
             "minInvisibleTimeMillsForRecv", "transactionBatchEnable",
             "transactionPackEnable")


def _warn_unknown_keys(conf: str, extra: dict) -> None:
    """One warning per broker.conf key nobody reads, with the nearest known key."""
    from ..broker.conf_keys import unknown_keys
    from ..config import TIER_CONF_KEYS
    from ..broker.replicas import ControllerModeConfig
    for key, near in unknown_keys(extra, (*_CONF_KEYS, *_OWN_KEYS, *TIER_CONF_KEYS,
                                          *ControllerModeConfig.KEYS)):
        hint = f" (did you mean {near!r}?)" if near else ""
        click.echo(f"warning: {conf}: unknown key {key!r} ignored{hint}", err=True)


# RocketMQ keys that switch the broker into a mode rocketstore's broker does not run: refused
# rather than ignored, since running as a plain broker instead would mislead the operator (a
# group that believes it fails over automatically, or a DLedger CommitLog that is not there)
_UNSERVED_MODES = {
    "enableDLegerCommitLog": "a DLedger CommitLog is not supported; use controller mode "
                             "(enableControllerMode, controllerAddr) or master/slave "
                             "(brokerRole, brokerId, haMasterAddress)",
}


def _refuse_unserved_modes(conf: str, extra: dict) -> None:
    for key, why in _UNSERVED_MODES.items():
        value = str(extra.get(key, "false")).strip().lower()
        if value == "true":
            raise click.BadParameter(f"{key}=true: {why}", param_hint=f"--config {conf}")


JAVA_INT_MAX = 2**31 - 1
# StoreConfig fields that size a file (RocketMQ holds them in Java ints): 1 .. JAVA_INT_MAX
_FILE_SIZES = ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
               "mapped_file_size_consume_queue_ext", "mapped_file_size_timer_log",
               "max_hash_slot_num", "max_index_num", "max_message_size", "ha_transfer_batch_size")


def _check_limits(store_cfg, broker_cfg) -> None:
    """Every port (with the HA port listenPort + 1 and the fast port listenPort - 2) and every
    number that sizes a file or a socket read, checked before the store is opened, each refusal
    naming the option and the broker.conf key."""
    from ..config import conf_key

    def bad(where: str, msg: str) -> None:
        raise click.BadParameter(msg, param_hint=where)

    port = broker_cfg.port
    if not isinstance(port, int) or not (port == 0 or 3 <= port <= 65534):
        bad("--port / listenPort", f"{port}: a broker port is 3 to 65534 (its HA port is "
            "listenPort + 1 and its fast port listenPort - 2, each 1 to 65535), or 0 for any "
            "free port")
    for where, value in (("--namesrv-port", broker_cfg.namesrv_port),
                         ("--grpc-port / grpcServerPort", broker_cfg.grpc_port)):
        if value is not None and not 0 <= value <= 65535:
            bad(where, f"{value}: a port is 0 to 65535 (0 = any free port)")
    master = store_cfg.ha_master_address
    if master:
        host, sep, p = master.rpartition(":")
        if not sep or not host or not p.isdigit() or not 1 <= int(p) <= 65535:
            bad("--config (haMasterAddress)", f"{master!r}: want HOST:PORT, a port 1 to 65535")
    for name in _FILE_SIZES:
        value = getattr(store_cfg, name)
        if not 1 <= int(value) <= JAVA_INT_MAX:
            bad(f"--config ({conf_key(name)}) / -o {name}",
                f"{value}: must be 1 to {JAVA_INT_MAX} (a Java int, as RocketMQ reads it)")
    for key, (name, conv) in _CONF_KEYS.items():
        value = getattr(broker_cfg, name, None)
        if conv is int and isinstance(value, int) and name not in ("port", "grpc_port") \
                and not 0 <= value <= JAVA_INT_MAX:
            bad(f"--config ({key})", f"{value}: must be 0 to {JAVA_INT_MAX}")


async def _serve(store_cfg, broker_cfg, as_json: bool, ops_ports: dict | None = None) -> None:
    from ..broker.wiring import Broker

    broker = Broker(store_cfg, broker_cfg)
    if broker_cfg.grpc_port is not None:  # RocketMQ 5.x clients: started with the broker
        from ..proxy.attach import GrpcService
        broker.extensions.append(GrpcService(broker, broker_cfg.host, broker_cfg.grpc_port))
    ops = None
    if ops_ports and any(v is not None for v in ops_ports.values()):
        try:  # metrics and console: opt-in, from the ``ops`` extra
            from ..ops import OpsServices
            ops = OpsServices(broker, host=broker_cfg.host, **ops_ports)
        except ImportError as exc:
            raise click.ClickException(f"--metrics-port and --console need the ops extra "
                                       f"(pip install 'rocketstore[ops]'): {exc}") from exc
    from ..broker.acl.address import AclError
    try:
        await broker.start()
    except AclError as exc:  # aclEnable=true and a plain_acl.yml that does not parse
        raise click.ClickException(f"ACL configuration: {exc}") from exc
    except OSError as exc:  # port in use, address not available...
        raise click.ClickException(
            f"cannot listen on {broker_cfg.host} (broker port {broker_cfg.port}, name server "
            f"port {broker_cfg.namesrv_port}"
            + (f", gRPC port {broker_cfg.grpc_port}" if broker_cfg.grpc_port is not None else "")
            + f"): {exc.strerror or exc}") from exc
    ready = {"event": "ready", "broker": f"{broker_cfg.host}:{broker_cfg.port}",
             "namesrv": (f"{broker_cfg.host}:{broker_cfg.namesrv_port}"
                         if broker_cfg.namesrv_port is not None else broker_cfg.namesrv_addr),
             "namesrv_listening": broker_cfg.namesrv_port is not None,
             "store": store_cfg.store_path_root_dir,
             "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0]}
    if broker_cfg.grpc_port is not None:
        ready["grpc"] = f"{broker_cfg.host}:{broker_cfg.grpc_port}"
    if broker.registration is not None:
        ready["registers_with"] = list(broker.registration.addrs)
    ready["role"] = store_cfg.broker_role
    ready["broker_id"] = broker_cfg.broker_id
    if broker.ha_server_addr:
        ready["ha"] = broker.ha_server_addr
    if broker.fast_port is not None:
        ready["fast"] = f"{broker_cfg.host}:{broker.fast_port}"
    if broker.workers is not None:
        ready["workers"] = broker.workers.pids()
    if ops is not None:
        try:
            ready.update(ops.start())
        except OSError as exc:
            await broker.stop()
            raise click.ClickException(f"cannot serve metrics/console on {broker_cfg.host} "
                                       f"({ops_ports}): {exc.strerror or exc}") from exc
    stop = asyncio.Event()  # handlers first: a SIGTERM right after "ready" stops cleanly
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if as_json:
        click.echo(json.dumps(ready))
    else:
        grpc_note = f", gRPC on {ready['grpc']}" if "grpc" in ready else ""
        if "ha" in ready:
            grpc_note += f", {ready['role']} (brokerId {ready['broker_id']}) HA on {ready['ha']}"
        ns_note = (f", name server on {ready['namesrv']}" if ready["namesrv_listening"]
                   else "")
        reg = ready.get("registers_with")
        reg_note = f", registered with name server {';'.join(reg)}" if reg else ""
        n = len(ready.get("workers") or ())  # the writer runs the store; n protocol workers
        workers = (f" (writer + {n} worker process{'es' if n != 1 else ''})" if n
                   else " (one process)")
        click.echo(f"rocketstore broker on {ready['broker']}{workers}{ns_note}{grpc_note}{reg_note}, "
                   f"store {ready['store']} (Ctrl-C to stop)")
        for name in ("metrics", "console"):
            if name in ready:
                click.echo(f"{name}: {ready[name]}")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        if ops is not None:
            await loop.run_in_executor(None, ops.stop)
        await broker.stop()
    if as_json:
        click.echo(json.dumps({"event": "stopped"}))
    else:
        click.echo("stopped cleanly")


@click.command("serve")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address both servers bind to and the broker advertises.")
@click.option("--port", type=int, default=None,
              help="Broker port; 0 = any free port. [default: listenPort of --config, or 10911]")
@click.option("--namesrv-port", default=None, type=int,
              help="Start the embedded name server on this port (0 = any), also when "
                   "--namesrv / namesrvAddr names others (the broker registers with all). "
                   "[default: 9876 unless --namesrv / namesrvAddr is given]")
@click.option("--namesrv", "namesrv_addr", default=None, metavar="HOST:PORT;HOST:PORT",
              help="Register with these outside name servers (RocketMQ's or ours); without "
                   "--namesrv-port no name server is started. "
                   "[default: namesrvAddr of --config]")
@click.option("--broker-name", default=None, help="[default: brokerName of --config, or broker-a]")
@click.option("--config", "conf", type=click.Path(exists=True, dir_okay=False),
              help="A RocketMQ broker.conf (camelCase keys): store settings and listenPort, "
                   "brokerName, brokerClusterName, autoCreateTopicEnable, defaultTopicQueueNums.")
@click.option("--store-option", "-o", "options", multiple=True, metavar="NAME=VALUE",
              help="A StoreConfig field, e.g. -o mapped_file_size_commitlog=1048576.")
@click.option("--flush-disk-type", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]))
@click.option("--message-delay-level", help='Delay levels, e.g. "1s 5s 10s 30s 1m".')
@click.option("--auto-create-topic/--no-auto-create-topic", default=None,
              help="Create an unknown topic on its first send (never on a lookup). [default: on]")
@click.option("--default-topic-queue-nums", type=int, default=None,
              help="Queues of an auto-created topic. [default: 4]")
@click.option("--max-reconsume-times", default=16, show_default=True, type=int)
@click.option("--grpc-port", type=int, default=None, is_flag=False, flag_value=8081,
              help="Serve RocketMQ 5.x clients over gRPC on this port (8081 when given "
                   "without a value; 0 = any free port). [default: off]")
@click.option("--log-level", default="WARNING", show_default=True)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics at http://HOST:PORT/metrics (0 = any free port).")
@click.option("--console", "console_port", type=click.IntRange(0, 65535), default=None,
              metavar="PORT", help="Serve the web console at http://HOST:PORT/ (0 = any).")
@click.option("--workers", type=int, default=None,
              help="Broker processes sharing the ports (broker.conf serverWorkerProcesses). "
                   "The writer plus N-1 protocol workers; default: one per core; 1 = one "
                   "process.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable status lines.")
def command(store_dir, host, port, namesrv_port, namesrv_addr, broker_name, conf, options, flush_disk_type,
            message_delay_level, auto_create_topic, default_topic_queue_nums,
            max_reconsume_times, grpc_port, log_level, metrics_port, console_port,
            as_json, workers=None) -> None:
    """Serve the store to RocketMQ clients: name server + broker in one process."""
    from ..broker.config import BrokerConfig

    from ..logsafe import configure
    configure(getattr(logging, log_level.upper(), logging.WARNING))  # client values escaped
    store_cfg, host_given = _store_config(store_dir, conf, options, message_delay_level,
                                          flush_disk_type)
    broker_cfg = BrokerConfig(host=host, max_reconsume_times=max_reconsume_times)
    for key, (name, conv) in _CONF_KEYS.items():  # broker.conf first, the command line wins
        if key in store_cfg.extra:
            try:
                setattr(broker_cfg, name, conv(store_cfg.extra[key]))
            except ValueError as exc:
                raise click.BadParameter(f"{key}={store_cfg.extra[key]!r}: {exc}",
                                         param_hint="--config") from exc
    broker_cfg.worker_processes = _worker_count(workers,
                                                store_cfg.extra.get("serverWorkerProcesses"))
    if conf:
        _warn_unknown_keys(conf, store_cfg.extra)
        _refuse_unserved_modes(conf, store_cfg.extra)
    for name, value in (("port", port), ("broker_name", broker_name),
                        ("namesrv_addr", namesrv_addr),
                        ("auto_create_topic_enable", auto_create_topic),
                        ("default_topic_queue_nums", default_topic_queue_nums),
                        ("grpc_port", grpc_port)):
        if value is not None:
            setattr(broker_cfg, name, value)
    broker_cfg.namesrv_port = namesrv_port if namesrv_port is not None else 9876
    if broker_cfg.namesrv_addr:  # join a cluster: our own name server only when asked for
        from ..broker.namesrv.registration import parse_namesrv_addrs
        try:
            parse_namesrv_addrs(broker_cfg.namesrv_addr)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--namesrv") from exc
        if namesrv_port is None:
            broker_cfg.namesrv_port = None
    if not host_given:
        store_cfg.store_host = f"{host}:{broker_cfg.port}"
    controller_mode = None
    if str(store_cfg.extra.get("enableControllerMode", "false")).strip().lower() == "true":
        from ..broker.replicas import ControllerModeConfig
        try:  # the controller gives the id and the role: brokerId / brokerRole are not read
            controller_mode = ControllerModeConfig.from_conf(store_cfg.extra)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--config") from exc
        if not broker_cfg.port:
            raise click.BadParameter("controller mode needs a fixed listenPort (the controller "
                                     "knows each replica by its address)",
                                     param_hint="--port / listenPort")
        broker_cfg.broker_id = 0  # until the controller gives one (brokerId=-1 is not read)
    else:
        from ..broker.replication import check_role
        try:  # RocketMQ's BrokerStartup: masters are id 0, a slave's id must be > 0
            broker_cfg.broker_id = check_role(store_cfg.broker_role, broker_cfg.broker_id)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--config (brokerId)") from exc
    _check_limits(store_cfg, broker_cfg)  # before anything touches the store
    # as RocketMQ 4.9.7's BrokerStartup: the HA socket is always listenPort + 1
    store_cfg.ha_listen_port = broker_cfg.port + 1 if broker_cfg.port else 0
    store_cfg.ha_bind_host = host
    from ..broker.eventloop import run as run_loop  # uvloop when installed
    from ..broker.eventloop import tune_gc
    tune_gc()
    if controller_mode is not None:
        from .serve_controller import serve_controller_mode
        run_loop(serve_controller_mode(store_cfg, broker_cfg, controller_mode, as_json,
                                       {"metrics_port": metrics_port,
                                        "console_port": console_port}))
        return
    run_loop(_serve(store_cfg, broker_cfg, as_json,
                    {"metrics_port": metrics_port, "console_port": console_port}))
