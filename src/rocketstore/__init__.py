"""rocketstore: a Python message store byte-compatible with Apache RocketMQ 4.9."""
from .config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from .errors import (CorruptFileError, CorruptRecordError, DiskFullError, RecoveryError,
                     NotAStoreError, RocketStoreError, StoreClosedError, StoreError,
                     StoreLockedError)
from .format.message import Message, MessageExt
from .store.message_store import MessageStore
from .store.results import GetMessageResult, GetStatus, PutMessageResult, PutStatus

__all__ = [
    "ASYNC_FLUSH", "SYNC_FLUSH", "StoreConfig", "MessageStore", "Message", "MessageExt",
    "PutStatus", "GetStatus", "PutMessageResult", "GetMessageResult", "RocketStoreError",
    "StoreError", "StoreLockedError", "StoreClosedError", "CorruptFileError",
    "CorruptRecordError", "DiskFullError", "RecoveryError", "NotAStoreError",
]
