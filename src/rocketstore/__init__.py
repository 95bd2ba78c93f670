"""rocketstore: a Python message store byte-compatible with Apache RocketMQ 4.9.

The names below are loaded on first use (PEP 562), so a process that only needs the client
(``rocketstore.client``), a Spark sink's responder or a CLI command does not import the store
engine, the SQL92 parser and numpy at start-up."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "ASYNC_FLUSH": ".config", "SYNC_FLUSH": ".config", "StoreConfig": ".config",
    "CorruptFileError": ".errors", "CorruptRecordError": ".errors", "DiskFullError": ".errors",
    "RecoveryError": ".errors", "NotAStoreError": ".errors", "RocketStoreError": ".errors",
    "StoreClosedError": ".errors", "StoreError": ".errors", "StoreLockedError": ".errors",
    "Message": ".format.message", "MessageExt": ".format.message",
    "MessageStore": ".store.message_store",
    "GetMessageResult": ".store.results", "GetStatus": ".store.results",
    "PutMessageResult": ".store.results", "PutStatus": ".store.results",
}

__all__ = [
    "ASYNC_FLUSH", "SYNC_FLUSH", "StoreConfig", "MessageStore", "Message", "MessageExt",
    "PutStatus", "GetStatus", "PutMessageResult", "GetMessageResult", "RocketStoreError",
    "StoreError", "StoreLockedError", "StoreClosedError", "CorruptFileError",
    "CorruptRecordError", "DiskFullError", "RecoveryError", "NotAStoreError",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rocketstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from .config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
    from .errors import (CorruptFileError, CorruptRecordError, DiskFullError, NotAStoreError,
                         RecoveryError, RocketStoreError, StoreClosedError, StoreError,
                         StoreLockedError)
    from .format.message import Message, MessageExt
    from .store.message_store import MessageStore
    from .store.results import GetMessageResult, GetStatus, PutMessageResult, PutStatus
