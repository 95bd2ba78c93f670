"""Broker-wide admin requests: runtime info (28), broker config get (26) and live update (25).

GET_BROKER_RUNTIME_INFO answers a ``KVTable`` (``{"table": {name: string}}``) with the names
RocketMQ 4.9.7 reports (``views.runtime_info``). GET_BROKER_CONFIG answers the broker's
and the store's settings as a Java properties text (``key=value`` lines, RocketMQ's camelCase
names) with the config data version (JSON) in the ``version`` header field. UPDATE_BROKER_CONFIG
takes a properties body and applies the keys that can change while the broker runs (``LIVE``
below: the clean, flush and transfer settings the store re-reads on every run, and the broker's
topic auto-creation and polling settings). Unlike RocketMQ, which silently ignores a key it
cannot apply, a key that is unknown or only read at start-up is refused with SYSTEM_ERROR and a
message that says which and why; nothing is applied from a request that has such a key. Changes
last until the broker restarts (put them in ``--config broker.conf`` to keep them).
"""
from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from ...config import parse_properties
from ...remoting import fastjson
from ...remoting.codes import ResponseCode
from ...remoting.command import RemotingCommand
from . import views
from ..state.limits import check_live_value

if TYPE_CHECKING:
    from ..contexts import AdminContext

# Java name -> (which config object, attribute); only these can change live.
LIVE: dict[str, tuple[str, str]] = {
    # store: read again on every clean / flush / get run
    "fileReservedTime": ("store", "file_reserved_time"),
    "deleteWhen": ("store", "delete_when"),
    "diskMaxUsedSpaceRatio": ("store", "disk_max_used_space_ratio"),
    "diskSpaceWarningLevelRatio": ("store", "disk_space_warning_level_ratio"),
    "diskSpaceCleanForciblyRatio": ("store", "disk_space_clean_forcibly_ratio"),
    "cleanFileForciblyEnable": ("store", "clean_file_forcibly_enable"),
    "deleteFileBatchMax": ("store", "delete_file_batch_max"),
    "flushIntervalCommitLog": ("store", "flush_interval_commitlog"),
    "flushCommitLogLeastPages": ("store", "flush_commitlog_least_pages"),
    "flushCommitLogThoroughInterval": ("store", "flush_commitlog_thorough_interval"),
    "flushIntervalConsumeQueue": ("store", "flush_interval_consume_queue"),
    "flushConsumeQueueLeastPages": ("store", "flush_consume_queue_least_pages"),
    "flushConsumeQueueThoroughInterval": ("store", "flush_consume_queue_thorough_interval"),
    "syncFlushTimeout": ("store", "sync_flush_timeout"),
    "maxMessageSize": ("store", "max_message_size"),
    "maxTransferBytesOnMessageInMemory": ("store", "max_transfer_bytes_on_message_in_memory"),
    "maxTransferCountOnMessageInMemory": ("store", "max_transfer_count_on_message_in_memory"),
    "maxTransferBytesOnMessageInDisk": ("store", "max_transfer_bytes_on_message_in_disk"),
    "maxTransferCountOnMessageInDisk": ("store", "max_transfer_count_on_message_in_disk"),
    "accessMessageInMemoryMaxRatio": ("store", "access_message_in_memory_max_ratio"),
    "defaultQueryMaxNum": ("store", "default_query_max_num"),
    # broker: read on every request
    "autoCreateTopicEnable": ("broker", "auto_create_topic_enable"),
    "defaultTopicQueueNums": ("broker", "default_topic_queue_nums"),
    "longPollingEnable": ("broker", "long_polling_enable"),
    "shortPollingTimeMills": ("broker", "short_polling_time_ms"),
    "flushConsumerOffsetInterval": ("broker", "flush_consumer_offset_interval_ms"),
}

# RocketMQ's names for our broker settings that differ from a plain camelCase of ours.
BROKER_NAMES = {"broker_name": "brokerName", "cluster_name": "brokerClusterName",
                "port": "listenPort", "host": "brokerIP1",
                "short_polling_time_ms": "shortPollingTimeMills",
                "flush_consumer_offset_interval_ms": "flushConsumerOffsetInterval",
                "channel_expired_timeout_ms": "channelExpiredTimeout"}
STORE_NAMES = {"mapped_file_size_commitlog": "mappedFileSizeCommitLog",
               "flush_interval_commitlog": "flushIntervalCommitLog",
               "flush_commitlog_least_pages": "flushCommitLogLeastPages",
               "flush_commitlog_thorough_interval": "flushCommitLogThoroughInterval",
               "store_path_commit_log": "storePathCommitLog"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def java_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def all_configs(broker_config: Any, store_config: Any) -> dict[str, str]:
    """Every setting under RocketMQ's name (GET_BROKER_CONFIG's body, as a dict)."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(broker_config):
        out[BROKER_NAMES.get(f.name, camel(f.name))] = java_value(getattr(broker_config, f.name))
    out["namesrvAddr"] = java_value(getattr(broker_config, "namesrv_addr", None) or "")
    for f in dataclasses.fields(store_config):
        if f.name == "extra":
            continue
        out[STORE_NAMES.get(f.name, camel(f.name))] = java_value(getattr(store_config, f.name))
    out["storePathCommitLog"] = store_config.commitlog_dir
    out["brokerRole"] = "ASYNC_MASTER" if not store_config.sync_flush else "SYNC_MASTER"
    out["brokerId"] = "0"
    for k, v in (getattr(store_config, "extra", None) or {}).items():
        out.setdefault(k, str(v))
    return out


def coerce(current: Any, value: str, key: str) -> Any:
    if isinstance(current, bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{key} must be true or false, not {value!r}")
        return value.lower() == "true"
    if isinstance(current, int):
        try:
            return int(value)
        except ValueError as exc:
            raise ValueError(f"{key} must be an integer, not {value!r}") from exc
    if isinstance(current, float):
        return float(value)
    return value


class ConfigVersion:
    """RocketMQ's ``DataVersion`` of the configuration, bumped by every live update."""

    def __init__(self) -> None:
        self.counter = 0
        self.timestamp = int(time.time() * 1000)
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.counter += 1
            self.timestamp = int(time.time() * 1000)

    def json(self) -> str:
        return json.dumps({"counter": self.counter, "timestamp": self.timestamp},
                          separators=(",", ":"))


def apply_update(props: dict[str, str], broker_config: Any, store_config: Any) -> dict[str, Any]:
    """Validate every key first, then apply them all; returns {key: new value}."""
    targets = {"broker": broker_config, "store": store_config}
    plan = []
    for key, value in props.items():
        if key not in LIVE:
            known = key in all_configs(broker_config, store_config)
            why = "is read only at start-up (set it in --config broker.conf)" if known \
                else "is not a setting of this broker"
            raise ValueError(f"{key} cannot be changed while the broker runs: it {why}")
        which, attr = LIVE[key]
        obj = targets[which]
        new = coerce(getattr(obj, attr), value, key)
        if isinstance(new, int) and not isinstance(new, bool) and new < 0:
            raise ValueError(f"{key} must not be negative")
        check_live_value(key, new, store_config)  # state.limits: each key's range
        if key == "deleteWhen" and not re.fullmatch(r"\d{1,2}(;\d{1,2})*", new):
            raise ValueError(f"deleteWhen must be hours like 04 or 04;16, not {new!r}")
        plan.append((obj, attr, key, new))
    for obj, attr, _, new in plan:
        setattr(obj, attr, new)
    return {key: new for _, _, key, new in plan}


async def runtime_info(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    table = await ctx.run(views.runtime_info, ctx.store, ctx.store_config,
                             ctx.config, ctx.stats)
    return cmd.response(ResponseCode.SUCCESS,
                        body=fastjson.dumps({"table": table}).encode("utf-8"))


async def get_config(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    cfgs = all_configs(ctx.config, ctx.store_config)
    text = "".join(f"{k}={v}\n" for k, v in cfgs.items())
    return cmd.response(ResponseCode.SUCCESS, {"version": ctx.config_version.json()},
                        body=text.encode("utf-8"))


async def update_config(ctx: AdminContext, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    if not cmd.body:
        return cmd.response(ResponseCode.SUCCESS)
    try:
        props = parse_properties(cmd.body.decode("utf-8"))
        apply_update(props, ctx.config, ctx.store_config)
    except (ValueError, UnicodeDecodeError) as exc:
        return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
    ctx.config_version.bump()
    return cmd.response(ResponseCode.SUCCESS)


__all__ = ["LIVE", "all_configs", "apply_update", "parse_properties"]
