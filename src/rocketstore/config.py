"""Store configuration: RocketMQ's ``MessageStoreConfig`` names in snake_case, same defaults.

``StoreConfig.from_properties("broker.conf")`` reads RocketMQ's camelCase keys
(``storePathRootDir``, ``mappedFileSizeCommitLog``, ``flushDiskType`` …); unknown keys are kept in
``extra`` so a broker config file can be shared with the broker layer.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


@dataclass
class StoreConfig:
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    store_path_commit_log: str | None = None
    mapped_file_size_commitlog: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    message_index_enable: bool = True
    max_message_size: int = 4 * 1024 * 1024
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commitlog: int = 500  # ms
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval: int = 10_000  # ms
    flush_interval_consume_queue: int = 1000  # ms
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000  # ms
    sync_flush_timeout: int = 5000  # ms
    file_reserved_time: int = 72  # hours
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000  # ms
    delete_file_batch_max: int = 10
    check_crc_on_recover: bool = True
    store_host: str = "127.0.0.1:10911"
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    generate_uniq_key: bool = True  # set UNIQ_KEY on puts that carry none, as the broker does
    reput_batch_bytes: int = 4 * 1024 * 1024
    enable_consume_queue_ext: bool = False  # ConsumeQueue-ext units (tagsCode, time, SQL92 bitmap)
    mapped_file_size_consume_queue_ext: int = 48 * 1024 * 1024
    bit_map_length_consume_queue_ext: int = 64
    # open without the lock and write nothing: files are mapped copy-on-write, recovery and
    # dispatch of a tail happen in memory only (``MessageStore.open_read_only``)
    read_only: bool = False
    # descriptors (a descriptor and a mapping count one each) the process keeps for idle
    # ConsumeQueue files; past it, those used longest ago are closed (``store.lazy_file``)
    max_open_consume_queue_files: int = 256
    # RocketMQ 5's timer store (store/timer/): TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000  # rounded down to 100, 200, 500 or 1000, as RocketMQ does
    timer_roll_window_slot: int = 3600 * 24 * 2
    timer_max_delay_sec: int = 3600 * 24 * 3
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    timer_flush_interval_ms: int = 1000
    timer_congest_num_each_slot: int = 2**31 - 1
    # master/slave replication (RocketMQ 4.9 MessageStoreConfig names and defaults; store/ha)
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    ha_listen_port: int | None = None  # None: no HA socket (serve sets listenPort + 1)
    ha_master_address: str | None = None  # slave: a fixed "host:port" of the master's HA socket
    ha_send_heartbeat_interval: int = 5000  # ms
    ha_housekeeping_interval: int = 20_000  # ms
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3000  # ms: a SYNC_MASTER put's wait for the slave
    # rocketstore's own: a slave that reports offset 0 gets the master's whole history (from
    # its oldest file) instead of RocketMQ's "start of the last file"; off = RocketMQ's behaviour
    ha_full_catch_up: bool = False
    ha_bind_host: str = "0.0.0.0"
    # controller mode (RocketMQ 5's auto-switch HA): a store.ha.autoswitch.AutoSwitchSettings
    # the broker's replica manager fills in; None = the 4.9 HA above
    controller_ha: Any = None
    # the tiered store (store/tier/): None = off unless broker.conf's messageStorePlugIn names
    # RocketMQ's TieredMessageStore (then ``TierConfig.from_conf(extra)``); see ``tier_config``
    tier: "TierConfig | None" = None
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(f"flushDiskType={self.flush_disk_type} (flush_disk_type): use "
                             f"ASYNC_FLUSH or SYNC_FLUSH")
        for name in ("mapped_file_size_commitlog", "mapped_file_size_consume_queue",
                     "max_hash_slot_num", "max_index_num", "max_message_size"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{conf_key(name)}={getattr(self, name)} ({name}): must be "
                                 "positive")
        self.store_path_root_dir = os.fspath(self.store_path_root_dir)
        self.timer_precision_ms = round_timer_precision(int(self.timer_precision_ms))
        if int(self.mapped_file_size_timer_log) < 52 + 16:  # one timerlog unit and a blank
            raise ValueError("mapped_file_size_timer_log must be at least 68")
        if self.broker_role not in BROKER_ROLES:
            raise ValueError(f"brokerRole must be one of {', '.join(BROKER_ROLES)}, not {self.broker_role!r}")

    # -- derived values (RocketMQ's getters) ----------------------------------------------------
    @property
    def commitlog_dir(self) -> str:
        return self.store_path_commit_log or os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def cq_file_size(self) -> int:
        """``getMappedFileSizeConsumeQueue``: rounded up to a multiple of 20."""
        return -(-self.mapped_file_size_consume_queue // 20) * 20

    @property
    def max_used_ratio(self) -> float:
        return min(95, max(10, self.disk_max_used_space_ratio)) / 100.0

    @property
    def warning_ratio(self) -> float:
        return min(0.90, max(0.35, self.disk_space_warning_level_ratio / 100.0))

    @property
    def clean_forcibly_ratio(self) -> float:
        return min(0.85, max(0.30, self.disk_space_clean_forcibly_ratio / 100.0))

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    def tier_config(self) -> "TierConfig | None":
        """The tier this store feeds: ``tier`` if set, else broker.conf's tier keys when
        ``messageStorePlugIn`` names ``TieredMessageStore``, else None."""
        if self.tier is not None:
            return self.tier
        if self.extra.get("messageStorePlugIn", "").strip() == TIERED_MESSAGE_STORE:
            return TierConfig.from_conf(self.extra)
        return None

    def replace(self, **changes: Any) -> "StoreConfig":
        return dataclasses.replace(self, **changes)

    # -- the fields by component (read-only views; see ``COMPONENTS``) --------------------------
    @property
    def files(self) -> "ComponentConfig":
        return ComponentConfig(self, "files")

    @property
    def flush(self) -> "ComponentConfig":
        return ComponentConfig(self, "flush")

    @property
    def clean(self) -> "ComponentConfig":
        return ComponentConfig(self, "clean")

    @property
    def index(self) -> "ComponentConfig":
        return ComponentConfig(self, "index")

    @property
    def consume_queue_ext(self) -> "ComponentConfig":
        return ComponentConfig(self, "consume_queue_ext")

    @property
    def reads(self) -> "ComponentConfig":
        return ComponentConfig(self, "reads")

    @property
    def puts(self) -> "ComponentConfig":
        return ComponentConfig(self, "puts")

    @property
    def timer(self) -> "ComponentConfig":
        return ComponentConfig(self, "timer")

    @property
    def ha(self) -> "ComponentConfig":
        return ComponentConfig(self, "ha")

    @property
    def tiered(self) -> "ComponentConfig":
        return ComponentConfig(self, "tiered")

    # -- RocketMQ property files ----------------------------------------------------------------
    @classmethod
    def from_properties(cls, path: str, **overrides: Any) -> "StoreConfig":
        """Read a RocketMQ ``broker.conf`` (``key=value``, camelCase keys, ``#`` comments)."""
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        with open(path, encoding="utf-8") as fh:
            for raw in fh:
                line = raw.strip()
                if not line or line[0] in "#!":
                    continue
                key, _, value = _split(line)
                name = _snake(key)
                alias = _ALIASES.get(name, name)
                if alias in fields and alias != "extra":
                    values[alias] = _coerce(fields[alias].type, value, key)
                else:
                    extra[key] = value
        values.update(overrides)
        cfg = cls(**values)
        cfg.extra.update(extra)
        return cfg


TIERED_MESSAGE_STORE = "org.apache.rocketmq.tieredstore.TieredMessageStore"
POSIX_PROVIDER = "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"
# tieredStorageLevel, by RocketMQ's number too (TieredStorageLevel.valueOf(int))
STORAGE_LEVELS = ("DISABLE", "NOT_IN_DISK", "NOT_IN_MEM", "FORCE")


@dataclass
class TierConfig:
    """RocketMQ 5's tiered-store keys (``org.apache.rocketmq.tieredstore.MessageStoreConfig``),
    same names in snake_case and same defaults except the provider (posix, not memory).
    ``backend``: ``"posix"`` or ``"s3"`` (``tieredBackendServiceProvider``); ``file_path``: the
    posix base directory or the key prefix inside the bucket. ``secret`` fields stay out of
    ``repr``."""

    file_path: str = ""
    backend: str = "posix"
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    storage_level: str = "NOT_IN_DISK"  # DISABLE | NOT_IN_DISK | NOT_IN_MEM | FORCE
    file_reserved_time: int = 72  # hours
    commitlog_max_size: int = 1 << 30  # tieredStoreCommitLogMaxSize
    consume_queue_max_size: int = 100 << 20  # tieredStoreConsumeQueueMaxSize
    group_commit_timeout: int = 30_000  # ms: a queue's pending messages go up at least this often
    group_commit_count: int = 4096
    group_commit_size: int = 4 << 20
    index_max_hash_slot_num: int = 5_000_000  # tieredStoreIndexFileMaxHashSlotNum
    index_max_index_num: int = 20_000_000  # tieredStoreIndexFileMaxIndexNum
    index_rolling_idle_interval: int = 3 * 3600 * 1000  # ms, tieredStoreIndexFileRollingIdleInterval
    object_store_endpoint: str = ""
    object_store_bucket: str = ""
    object_store_access_key: str = field(default="", repr=False)
    object_store_secret_key: str = field(default="", repr=False)
    object_store_region: str = ""
    # ours (RocketMQ has one tieredStoreFileReservedTime, #8129 asks for this): "topic:hours,..."
    topic_reserved_time: str = ""  # tieredStoreTopicReservedTime
    read_ahead_enable: bool = True  # readAheadCacheEnable
    read_ahead_count: int = 4096  # readAheadMessageCountThreshold
    read_ahead_size: int = 16 << 20  # readAheadMessageSizeThreshold
    read_ahead_expire: int = 15_000  # ms, readAheadCacheExpireDuration
    object_store_timeout: float = 30.0  # s a call may take (connect and request)
    object_store_attempts: int = 5  # tries of each call, with backoff, before it is an error

    _KEYS = {  # broker.conf key -> field
        "tieredStoreFilePath": "file_path", "brokerClusterName": "broker_cluster_name",
        "brokerName": "broker_name", "tieredStorageLevel": "storage_level",
        "tieredStoreFileReservedTime": "file_reserved_time",
        "tieredStoreCommitLogMaxSize": "commitlog_max_size",
        "tieredStoreConsumeQueueMaxSize": "consume_queue_max_size",
        "tieredStoreGroupCommitTimeout": "group_commit_timeout",
        "tieredStoreGroupCommitCount": "group_commit_count",
        "tieredStoreGroupCommitSize": "group_commit_size",
        "tieredStoreIndexFileMaxHashSlotNum": "index_max_hash_slot_num",
        "tieredStoreIndexFileMaxIndexNum": "index_max_index_num",
        "tieredStoreIndexFileRollingIdleInterval": "index_rolling_idle_interval",
        "objectStoreEndpoint": "object_store_endpoint", "objectStoreBucket": "object_store_bucket",
        "objectStoreAccessKey": "object_store_access_key",
        "objectStoreSecretKey": "object_store_secret_key", "objectStoreRegion": "object_store_region",
        "tieredStoreTopicReservedTime": "topic_reserved_time",
        "readAheadCacheEnable": "read_ahead_enable",
        "readAheadMessageCountThreshold": "read_ahead_count",
        "readAheadMessageSizeThreshold": "read_ahead_size",
        "readAheadCacheExpireDuration": "read_ahead_expire",
        "objectStoreRequestTimeout": "object_store_timeout",
        "objectStoreMaxAttempts": "object_store_attempts",
    }

    def __post_init__(self) -> None:
        if self.backend not in ("posix", "s3"):
            raise ValueError(f"tieredBackendServiceProvider must be {POSIX_PROVIDER} or s3, "
                             f"not {self.backend!r}")
        if self.backend == "posix" and not self.file_path:
            raise ValueError("tieredStoreFilePath (the posix tier's base directory) is required")
        if self.backend == "s3" and not self.object_store_bucket:
            raise ValueError("objectStoreBucket is required for the s3 tier")
        if self.commitlog_max_size <= 0 or self.consume_queue_max_size < 20:
            raise ValueError("tier file sizes must be positive")
        if self.storage_level not in STORAGE_LEVELS:
            raise ValueError(f"tieredStorageLevel must be one of {', '.join(STORAGE_LEVELS)}, "
                             f"not {self.storage_level!r}")
        self.topic_reserved_hours()  # a bad value is an error now, not at the first clean-up
        if self.index_max_hash_slot_num <= 0 or self.index_max_index_num <= 1:
            raise ValueError("tieredStoreIndexFileMaxHashSlotNum and tieredStoreIndexFileMaxIndexNum "
                             "must be positive")

    def topic_reserved_hours(self) -> dict[str, int]:
        """``tieredStoreTopicReservedTime``: ``topic:hours`` pairs, comma-separated."""
        out: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in self.topic_reserved_time.split(","))):
            topic, sep, hours = part.rpartition(":")
            if not sep or not topic.strip() or not hours.strip().isdigit():
                raise ValueError(f"tieredStoreTopicReservedTime: {part!r} is not topic:hours")
            out[topic.strip()] = int(hours)
        return out

    @classmethod
    def from_conf(cls, conf: dict[str, str]) -> "TierConfig":
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        for key, name in cls._KEYS.items():
            if key in conf:
                t = types[name]
                if t in (bool, "bool"):
                    values[name] = conf[key].strip().lower() == "true"
                else:
                    values[name] = int(conf[key]) if t in (int, "int") else \
                        float(conf[key]) if t in (float, "float") else conf[key].strip()
        level = str(values.get("storage_level", "NOT_IN_DISK"))
        if level.isdigit():  # RocketMQ accepts the level's number as well
            values["storage_level"] = STORAGE_LEVELS[int(level)] if int(level) < 4 else "DISABLE"
        provider = conf.get("tieredBackendServiceProvider", POSIX_PROVIDER).strip()
        if provider in (POSIX_PROVIDER, "posix"):
            values["backend"] = "posix"
        elif provider.lower() in ("s3", "org.apache.rocketmq.tieredstore.provider.s3.s3filesegment"):
            values["backend"] = "s3"
        else:
            raise ValueError(f"tieredBackendServiceProvider {provider!r}: rocketstore serves "
                             f"{POSIX_PROVIDER} and s3")
        return cls(**values)


# the tiered store's broker.conf keys (``serve`` knows them)
TIER_CONF_KEYS = (*TierConfig._KEYS, "tieredBackendServiceProvider", "messageStorePlugIn")


# Which component reads which field. The fields keep RocketMQ's names (``broker.conf`` keys in
# camelCase, constructor keywords in snake_case); a component's view only groups them, so the
# flush settings are ``cfg.flush`` and a reader sees at once what belongs to which service.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "files": ("store_path_root_dir", "store_path_commit_log", "mapped_file_size_commitlog",
              "mapped_file_size_consume_queue", "check_crc_on_recover", "read_only",
              "max_open_consume_queue_files"),
    "flush": ("flush_disk_type", "flush_interval_commitlog", "flush_commitlog_least_pages",
              "flush_commitlog_thorough_interval", "flush_interval_consume_queue",
              "flush_consume_queue_least_pages", "flush_consume_queue_thorough_interval",
              "sync_flush_timeout"),
    "clean": ("file_reserved_time", "delete_when", "disk_max_used_space_ratio",
              "disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio",
              "clean_file_forcibly_enable", "clean_resource_interval", "delete_file_batch_max"),
    "index": ("message_index_enable", "max_hash_slot_num", "max_index_num", "default_query_max_num"),
    "consume_queue_ext": ("enable_consume_queue_ext", "mapped_file_size_consume_queue_ext",
                          "bit_map_length_consume_queue_ext"),
    "reads": ("max_msgs_num_batch", "max_transfer_bytes_on_message_in_memory",
              "max_transfer_count_on_message_in_memory", "max_transfer_bytes_on_message_in_disk",
              "max_transfer_count_on_message_in_disk", "access_message_in_memory_max_ratio"),
    "puts": ("max_message_size", "store_host", "message_delay_level", "generate_uniq_key",
             "reput_batch_bytes"),
    "timer": ("timer_wheel_enable", "timer_precision_ms", "timer_roll_window_slot",
              "timer_max_delay_sec", "mapped_file_size_timer_log", "timer_flush_interval_ms",
              "timer_congest_num_each_slot"),
    "ha": ("broker_role", "ha_listen_port", "ha_master_address", "ha_send_heartbeat_interval",
           "ha_housekeeping_interval", "ha_transfer_batch_size", "ha_slave_fallbehind_max",
           "slave_timeout", "ha_full_catch_up", "ha_bind_host", "controller_ha"),
    "tiered": ("tier",),  # the tiered store's own keys live in TierConfig
}
_CAMEL_EXCEPTIONS = {v: k for k, v in {  # RocketMQ spells these "CommitLog" / "CRC"
    "mapped_file_size_commit_log": "mapped_file_size_commitlog",
    "flush_interval_commit_log": "flush_interval_commitlog",
    "flush_commit_log_least_pages": "flush_commitlog_least_pages",
    "flush_commit_log_thorough_interval": "flush_commitlog_thorough_interval",
}.items()}


def conf_key(name: str) -> str:
    """The ``broker.conf`` key of a ``StoreConfig`` field (``flush_disk_type`` -> ``flushDiskType``)."""
    head, *rest = _CAMEL_EXCEPTIONS.get(name, name).split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


class ComponentConfig:
    """A read-only view of the ``StoreConfig`` fields one component reads (``COMPONENTS``),
    under the same names: ``cfg.flush.flush_interval_commitlog``. It reads through to the
    config, so a change to the config (the store adopts saved file sizes in place) shows."""

    __slots__ = ("_cfg", "component")

    def __init__(self, cfg: StoreConfig, component: str) -> None:
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "component", component)

    def __getattr__(self, name: str) -> Any:
        if name in COMPONENTS[self.component]:
            return getattr(self._cfg, name)
        raise AttributeError(f"the {self.component} config has no {name!r} "
                             f"(it has {', '.join(COMPONENTS[self.component])})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the {self.component} config is a read-only view; "
                             "change the StoreConfig (cfg.replace(...))")

    def as_dict(self) -> dict[str, Any]:
        return {n: getattr(self._cfg, n) for n in COMPONENTS[self.component]}

    def conf_keys(self) -> dict[str, Any]:
        """The component's settings as ``broker.conf`` keys."""
        return {conf_key(n): v for n, v in self.as_dict().items()}

    def __repr__(self) -> str:
        return f"<{self.component} config {self.as_dict()!r}>"


def round_timer_precision(ms: int) -> int:
    """``MessageStoreConfig.setTimerPrecisionMs``: the largest of 100/200/500/1000 not above
    ``ms`` (100 below that)."""
    candidates = (100, 200, 500, 1000)
    for lo, hi in zip(candidates, candidates[1:]):
        if ms < hi:
            return lo
    return candidates[-1]


_ALIASES = {
    "mapped_file_size_commit_log": "mapped_file_size_commitlog",
    "flush_interval_commit_log": "flush_interval_commitlog",
    "flush_commit_log_least_pages": "flush_commitlog_least_pages",
    "flush_commit_log_thorough_interval": "flush_commitlog_thorough_interval",
}


def _split(line: str) -> tuple[str, str, str]:
    m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
    if not m:
        raise ValueError(f"cannot parse property line {line!r}")
    return m.group(1), "=", m.group(2).strip()


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _coerce(typ: Any, value: str, key: str) -> Any:
    t = str(typ)
    try:
        if t == "bool":
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        if t in ("int", "int | None"):
            return int(value)
    except ValueError as exc:
        raise ValueError(f"{key}: cannot read {value!r} as {t}") from exc
    return value


_PROPERTY_LINE = re.compile(r"([^=:\s]+)\s*[=:\s]\s*(.*)$")


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` for the simple ``key=value`` lines mqadmin sends."""
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = _PROPERTY_LINE.match(line)
        if not m:
            raise ValueError(f"cannot read property line {line!r}")
        out[m.group(1)] = m.group(2).strip()
    return out
