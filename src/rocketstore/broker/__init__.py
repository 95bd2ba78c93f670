"""The broker and name server: RocketMQ 4.x remoting over the store (``rocketstore serve``).

``controller.Broker`` wires the pieces; ``server`` is the asyncio I/O; ``namesrv``, ``send``,
``pull`` and ``admin`` hold the request handlers; ``longpoll`` and ``schedule`` are the
long-polling and delay-level services; ``state`` and ``consumers`` keep broker state.
"""

from .config import BrokerConfig
from .controller import Broker

__all__ = ["Broker", "BrokerConfig"]
