"""What the gRPC proxy uses of the broker, and the checks every activity shares.

``BrokerPieces`` is filled by the broker's wiring: the store, the topic and consumer-offset
tables, the broker config, the executor hooks, the long-polling service and the client and
SQL92 filter registries. The proxy never
sees the ``Broker`` object. ``check_topic`` / ``check_group`` are the 5.x proxy's
``GrpcValidator`` rules with its status codes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from ..broker.state.subgroups import max_reconsume_times
from .convert import ValidationError
from .protocol import pb

SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%", "RMQ_SYS_", "SCHEDULE_TOPIC_XXXX",
                         "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")
_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 255


@dataclass
class BrokerPieces:
    store: Any  # MessageStore, open
    topics: Any  # TopicConfigManager
    offsets: Any  # ConsumerOffsetManager
    config: Any  # BrokerConfig (broker_name, cluster_name, max_reconsume_times, grpc_* ...)
    run: Callable[..., Awaitable[Any]]  # run a blocking store call on the executor
    put: Callable[..., Awaitable[Any]]  # run a put on the put thread
    put_message: Callable[[Any], Any]  # blocking put of one store Message (sets store host)
    hold: Any  # PullHoldService: wait(topic, queue_id, offset, timeout_s)
    delay_levels_ms: Sequence[int] = field(default_factory=tuple)
    transactions: Any = None  # broker.services.transaction.TransactionalMessageService, if running
    producers: Any = None  # ProducerManager: where the transaction check finds a producer
    subgroups: Any = None  # SubscriptionGroupManager: consumer groups (retryMaxTimes, enabled)
    consumers: Any = None  # ConsumerManager: where gRPC consumers show as online
    filters: Any = None  # ConsumerFilterRegistry: SQL92 subscriptions (bitmaps, retry filter)
    consumer_ids_changed: Callable[[str], None] | None = None  # a group gained or lost a client
    # the perm a topic's route carries (the topic's own, or what wipeWritePerm / addWritePerm
    # set at the name server beside the broker): what QueryRoute / QueryAssignment hand out
    route_perm: Callable[[Any], int] = lambda tc: tc.perm
    acl: Any = None  # broker.acl.service.PlainPermissionManager when aclEnable (proxy/acl.py)
    pop_service: Any = None  # broker.services.pop.PopService: the broker's one pop state

    def group_config(self, group: str) -> Any:
        """The group's subscription config, auto-created as RocketMQ does; raises
        CONSUMER_GROUP_NOT_FOUND when auto-creation is off, FORBIDDEN when consuming is off."""
        if self.subgroups is None:
            return None
        cfg = self.subgroups.ensure(group)
        if cfg is None:
            raise ValidationError(pb.CONSUMER_GROUP_NOT_FOUND,
                                  f"consumer group {group!r} does not exist")
        if not cfg.consume_enable:
            raise ValidationError(pb.FORBIDDEN, f"consumer group {group!r} cannot consume")
        return cfg

    def max_reconsume_times(self, group: str) -> int:
        """How often a message of ``group`` is retried (``subgroups.max_reconsume_times``)."""
        return max_reconsume_times(self.subgroups, group, self.config.max_reconsume_times)


def check_topic(name: str) -> None:
    if not name or not name.strip():
        raise ValidationError(pb.ILLEGAL_TOPIC, "topic name cannot be blank")
    if len(name) > MAX_TOPIC_LENGTH or not _NAME_RE.match(name):
        raise ValidationError(pb.ILLEGAL_TOPIC, f"topic name {name!r} is illegal: want 1.."
                              f"{MAX_TOPIC_LENGTH} chars of [%|a-zA-Z0-9_-]")
    if name.startswith(SYSTEM_TOPIC_PREFIXES):
        raise ValidationError(pb.ILLEGAL_TOPIC, f"cannot access system topic {name!r}")


def check_group(name: str) -> None:
    if not name or not name.strip():
        raise ValidationError(pb.ILLEGAL_CONSUMER_GROUP, "consumer group cannot be blank")
    if len(name) > MAX_GROUP_LENGTH or not _NAME_RE.match(name):
        raise ValidationError(pb.ILLEGAL_CONSUMER_GROUP,
                              f"consumer group {name!r} is illegal: want 1..{MAX_GROUP_LENGTH} "
                              f"chars of [%|a-zA-Z0-9_-]")
    if name.startswith("CID_RMQ_SYS_"):
        raise ValidationError(pb.ILLEGAL_CONSUMER_GROUP, f"cannot use system group {name!r}")
