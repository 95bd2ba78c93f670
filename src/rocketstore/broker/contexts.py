"""What each kind of processor is given: narrow, typed contexts, built once by the wiring.

A processor is a module-level ``async def name(ctx, conn, cmd) -> RemotingCommand | None``
(``conn``: the connection the request came on, for its peer address and for the clients that
answer back; ``cmd``: the request). It sees only its context: the state tables and services its
kind of request uses, never the ``Broker``. ``requests`` maps each request code to one
processor and names the context it takes; the wiring builds the contexts (``build``) and
that table once, at start.

    context        processors                                      what it holds
    SendContext    processors.send, .reply, .transaction           topics, puts, stats, producers,
                                                                    transactions
    PullContext    processors.pull, .sql92                          topics, offsets, consumers,
                                                                    filters, hold, stats
    ClientContext  processors.client, .locks                        topics, offsets, consumers,
                                                                    producers, filters, subgroups,
                                                                    locks, client events
    AdminContext   admin.topics, .groups, .runtime, .consumers      every table, read and written
                                                                    on an operator's request
    AclContext     acl.service                                      the permission manager
    PopContext     processors.pop                                   topics, offsets, subgroups,
                                                                    hold, the pop service (one
                                                                    POP state, the gRPC door's too)
    AssignmentContext processors.assignment                        topics, subgroups, consumers,
                                                                    request modes, the cluster's
                                                                    route of a topic

Every context carries ``run`` (a blocking call on the store executor) and the configs it reads.
The name server's processors take ``namesrv.context.NamesrvContext`` (the name server is its own
subsystem: ``rocketstore namesrv`` runs it without a broker).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

if TYPE_CHECKING:
    from ..config import StoreConfig
    from ..store.message_store import MessageStore
    from .config import BrokerConfig
    from .services.longpoll import PullHoldService
    from .services.pop import PopService
    from .services.puts import Puts
    from .services.transaction import TransactionalMessageService
    from .state.consumers import ConsumerManager
    from .state.filters import ConsumerFilterRegistry
    from .state.locks import RebalanceLockManager
    from .state.offsets import ConsumerOffsetManager, DelayOffsetStore
    from .state.producers import ProducerManager
    from .state.request_modes import MessageRequestModes
    from .state.stats import BrokerStats
    from .state.subgroups import SubscriptionGroupManager
    from .state.topics import TopicConfigManager

Run = Callable[..., Awaitable[Any]]  # run a blocking call on the store executor


@dataclass
class ClientEvents:
    """What the broker does when a consumer group gains or loses clients."""
    ids_changed: Callable[[str], None]  # tell the group's clients to rebalance (code 40)
    group_changed: Callable[[str], None]  # a group lost clients: its SQL92 filters may go
    # an admin changed the topic table: register at the name servers now (answered when they did)
    topics_changed: Callable[[], Awaitable[Any]] | None = None

    def changed(self, group: str) -> None:
        """A group gained or lost a client: both of the above."""
        self.ids_changed(group)
        self.group_changed(group)


@dataclass
class SendContext:
    store: MessageStore
    store_config: StoreConfig
    config: BrokerConfig
    topics: TopicConfigManager
    puts: Puts
    stats: BrokerStats
    producers: ProducerManager
    transactions: TransactionalMessageService | None
    run: Run


@dataclass
class PullContext:
    store: MessageStore
    config: BrokerConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    filters: ConsumerFilterRegistry
    hold: PullHoldService
    stats: BrokerStats
    run: Run
    # master/slave: the groups' brokerId / whichBrokerWhenConsumeSlowly (suggestWhichBrokerId)
    subgroups: SubscriptionGroupManager | None = None
    is_slave: bool = False


@dataclass
class ClientContext:
    store: MessageStore
    config: BrokerConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    filters: ConsumerFilterRegistry
    subgroups: SubscriptionGroupManager
    locks: RebalanceLockManager
    events: ClientEvents
    run: Run


@dataclass
class AdminContext:
    store: MessageStore
    store_config: StoreConfig
    config: BrokerConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    delay_offsets: DelayOffsetStore
    consumers: ConsumerManager
    producers: ProducerManager
    subgroups: SubscriptionGroupManager
    stats: BrokerStats
    run: Run
    config_version: Any  # admin.runtime.ConfigVersion: bumped by every live config update


@dataclass
class AclContext:
    store_config: StoreConfig
    config: BrokerConfig
    run: Run
    acl: Any = None  # acl.service.PlainPermissionManager, once started (aclEnable)

    @property
    def store_host(self) -> str:
        return self.store_config.store_host


@dataclass
class PopContext:
    store: MessageStore
    config: BrokerConfig
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    subgroups: SubscriptionGroupManager
    filters: ConsumerFilterRegistry
    hold: PullHoldService
    service: PopService
    run: Run
    # pops held now, per (topic, group, queue id): what POLLING_INFO answers
    polling: dict = field(default_factory=dict)
    # ACK_MESSAGEs waiting for the one store call that settles them together (processors.pop)
    acks: list = field(default_factory=list)
    ack_task: Any = None


@dataclass
class AssignmentContext:
    """RocketMQ 5's server-side rebalance (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE)."""
    topics: TopicConfigManager
    subgroups: SubscriptionGroupManager
    consumers: ConsumerManager
    modes: MessageRequestModes
    # topic -> [(broker name, readable queues)] across the cluster (the name servers' route),
    # None when no name server knows the topic
    route_queues: Callable[[str], Awaitable[list[tuple[str, int]] | None]]
    run: Run
    default_mode: str = "PULL"  # defaultMessageRequestMode
    default_pop_share_queue_num: int = -1  # defaultPopShareQueueNum
    server_load_balancer_enable: bool = True  # serverLoadBalancerEnable
