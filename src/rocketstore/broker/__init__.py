"""The broker and name server: RocketMQ 4.x remoting over the store (``rocketstore serve``).

    rocketstore serve --store data --port 10911 --namesrv-port 9876
    # any RocketMQ 4.x client: namesrv 127.0.0.1:9876

Checked with real clients: Apache's C++ client (PyPI ``rocketmq==0.4.4``: produce, pull,
push with committed offsets, retry through ``%RETRY%``, orderly produce/consume) and the
pure-JavaScript ``ali-ons@3.12.0`` (produce, push with oneway offset commits); see
``tests/broker/test_interop_*.py``; transactions with RocketMQ 4.9.7's Java
``TransactionMQProducer`` (``tests/broker/test_transaction.py``); RocketMQ 4.9.7's ``mqadmin``
(``tests/broker/test_mqadmin.py``). Requests served: 10, 11, 12, 14, 15, 17, 21, 25, 26, 28,
29-38, 41-43, 45, 46, 105, 106, 200-204, 206-208, 215, 222, 223, 300, 305, 307, 309, 310,
320, 321, 324, 325 on the broker (and 100-106, 205, 216, 219, 224, 304, 327 on the name
server, with 318/319 for its settings); the broker sends 39 (CHECK_TRANSACTION_STATE), 40, 220 (RESET_CONSUMER_CLIENT_OFFSET),
221 and 307/309 (asking a consumer for ``consumerStatus``) and 326
(PUSH_REPLY_MESSAGE_TO_CLIENT); anything else gets REQUEST_CODE_NOT_SUPPORTED. SQL92
subscriptions (``sql92``, ``filters``) and request-reply (``reply``) as RocketMQ 4.9.7 does
them; RocketMQ 5.x clients through ``rocketstore.proxy`` (``serve --grpc-port``); plain ACL
(``acl/``); master/slave replication (``replication``, the store's ``ha``).

Layout (one subpackage per subsystem; arrows run down this list, never up):

``wiring.Broker`` wires the pieces and ``server`` is the asyncio I/O;
``processors/`` the client requests (``send``, ``pull``, ``client``, ``locks``, ``sql92``,
``reply``, ``transaction``); ``admin/`` what ``mqadmin`` and the console ask (``views``
computes what the admin requests, the console and ``rocketstore topics|status|consumers``
report); ``namesrv/`` the name server (``routes``, ``kvconfig``, ``settings``, ``admin``) and
the broker's ``registration`` at outside name servers; ``acl/`` the plain ACL; ``services/``
the background services (the put ``writer``, ``longpoll``, ``schedule``, ``transaction``);
``state/`` what the broker knows besides messages (``topics`` with the topic rules, ``offsets``,
``subgroups``, ``filters``, ``consumers``, ``producers``, ``locks``, ``stats``, ``files``);
``workers/`` the protocol worker processes of ``serve --workers N`` and the writer's side of them.
"""
from typing import Any

from .config import BrokerConfig

__all__ = ["Broker", "BrokerConfig"]


def __getattr__(name: str) -> Any:
    """``Broker`` on first use: a worker process imports ``broker.workers`` without it."""
    if name == "Broker":
        from .wiring import Broker
        return Broker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
