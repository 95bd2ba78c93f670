"""``BrokerConfig``: the broker's own settings (RocketMQ ``BrokerConfig`` names, snake_cased).

The store's settings live in ``StoreConfig``; ``rocketstore serve --config broker.conf`` fills
both from one RocketMQ file (see ``commands.serve``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"  # bind address of both servers; also the advertised address
    port: int = 10911  # broker (listenPort)
    namesrv_port: int = 9876  # name server; 0 = pick a free port, None = no name server
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    auto_create_topic_enable: bool = True  # create an unknown topic on its first send
    default_topic_queue_nums: int = 4  # queues of an auto-created topic
    long_polling_enable: bool = True
    short_polling_time_ms: int = 1000  # hold of a suspended pull when long polling is off
    channel_expired_timeout_ms: int = 120_000  # heartbeat expiry of a consumer client
    max_reconsume_times: int = 16  # default when CONSUMER_SEND_MSG_BACK carries none
    flush_consumer_offset_interval_ms: int = 5000
    schedule_poll_interval_ms: int = 100
    executor_threads: int = 8  # threads running blocking store calls
    shutdown_grace_s: float = 5.0  # how long in-flight requests may take at shutdown
    # SQL92 filtering (RocketMQ's BrokerConfig names and defaults)
    enable_property_filter: bool = False  # serve SQL92 subscriptions at all
    enable_calc_filter_bit_map: bool = False  # a bloom bitmap per message in ConsumeQueue-ext
    expect_consumer_num_use_filter: int = 32
    max_error_rate_of_bloom_filter: int = 20  # percent
    filter_data_clean_time_span_ms: int = 24 * 3600 * 1000
    filter_support_retry: bool = False
    store_reply_message_enable: bool = True  # request-reply: keep replies in <cluster>_REPLY_TOPIC
    transaction_timeout_ms: int = 6_000  # transactionTimeOut: a half message's age before a check
    transaction_check_interval_ms: int = 60_000  # transactionCheckInterval
    transaction_check_max: int = 15  # transactionCheckMax: checks before it is given up
    reject_transaction_message: bool = False  # rejectTransactionMessage
    # transactionBatchEnable (ours): a SEND_BATCH_MESSAGE of half messages only and a batched
    # END_TRANSACTION are served (RocketMQ refuses both); clients read it in GET_BROKER_CONFIG
    transaction_batch_enable: bool = True
    # transactionPackEnable (ours): a half message may carry a batch (``RS_TXN_PACKED``), stored
    # as one half record and committed as its entries; clients read it in GET_BROKER_CONFIG
    transaction_pack_enable: bool = True
    recall_message_enable: bool = False  # recallMessageEnable: RECALL_MESSAGE (370) is served
    lite_pull_message_enable: bool = True  # litePullMessageEnable: LITE_PULL_MESSAGE (361) served
    grpc_port: int | None = None  # RocketMQ 5.x gRPC (rocketstore.proxy); None = off, 0 = any
    grpc_min_invisible_time_ms: int = 10_000  # minInvisibleTimeMillsForRecv of the 5.x proxy
    namesrv_addr: str | None = None  # outside name servers to register with ("h1:9876;h2:9876")
    register_name_server_period_ms: int = 30_000  # registerNameServerPeriod
    # the name server of ``serve``: NamesrvConfig's kvConfigPath / orderMessageEnable
    kv_config_path: str | None = None  # None: <store>/config/kvConfig.json
    order_message_enable: bool = False  # routes carry ORDER_TOPIC_CONFIG as orderTopicConf
    # plain ACL (broker.acl): aclEnable, the default file, how often the files are polled
    acl_enable: bool = False
    acl_plain_file: str | None = None  # None: <store>/conf/plain_acl.yml (+ conf/acl/*.yml)
    acl_watch_interval_ms: int = 5000
    # security limits (README "Security"); the broker.conf keys are in commands/serve.py
    acl_signature_window_s: int = 900  # gRPC: x-mq-date-time at most this far from our clock
    namesrv_acl_enable: bool = False  # the name server's write codes need an admin account
    server_channel_max_idle_s: int = 120  # serverChannelMaxIdleTimeSeconds: close idle channels
    server_frame_read_timeout_s: float = 30.0  # a frame begun but not finished in this time
    server_max_connections: int = 4096  # per listening port (remoting, console, metrics)
    server_max_connections_per_client: int = 1024  # per client address on one port
    worker_processes: int = 1  # serverWorkerProcesses: broker processes (the writer + N-1 workers)
    fast_sends: bool = True  # serverFastSends: plain sends skip the send processor (workers.local)
    http_allowed_hosts: str = ""  # Host values the console/metrics answer, beyond the defaults
    # master/slave (the role and HA keys are the store's: StoreConfig.broker_role ...)
    broker_id: int = 0  # brokerId: 0 for masters, > 0 for a slave
    slave_read_enable: bool = False  # slaveReadEnable: suggestWhichBrokerId sends slow readers to slave 1
    broker_ip2: str | None = None  # brokerIP2: the host of the HA address registered (default host)

    @property
    def broker_addr(self) -> str:
        return f"{self.host}:{self.port}"
