"""The broker and name server: RocketMQ 4.x remoting over the store (``rocketstore serve``).

    rocketstore serve --store data --port 10911 --namesrv-port 9876
    # any RocketMQ 4.x client: namesrv 127.0.0.1:9876

Checked with real clients: Apache's C++ client (PyPI ``rocketmq==0.4.4``: produce, pull,
push with committed offsets, retry through ``%RETRY%``, orderly produce/consume) and the
pure-JavaScript ``ali-ons@3.12.0`` (produce, push with oneway offset commits); see
``tests/broker/test_interop_*.py``; transactions with RocketMQ 4.9.7's Java
``TransactionMQProducer`` (``tests/broker/test_transaction.py``). Requests served: 10, 11, 12,
14, 15, 17, 29-38, 41, 42, 105, 106, 310, 320, and the broker sends 39 (CHECK_TRANSACTION_STATE)
and 40; anything else gets REQUEST_CODE_NOT_SUPPORTED. Not supported: SQL92 filters, ACL
(credentials are ignored), slaves/HA, the 5.x gRPC proxy protocol.

``controller.Broker`` wires the pieces; ``server`` is the asyncio I/O; ``namesrv``, ``send``,
``pull``, ``admin`` and ``transaction`` hold the request handlers; ``longpoll``, ``schedule``
and ``transaction`` run the long-polling, delay-level and transaction-check services;
``state`` and ``consumers`` keep broker state.
"""

from .config import BrokerConfig
from .controller import Broker

__all__ = ["Broker", "BrokerConfig"]
