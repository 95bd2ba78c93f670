"""The rocketstore exception tree.

Expected outcomes (a full queue, an oversize message, an offset out of range) are *return values*
(``PutStatus``, ``GetStatus``); exceptions are reserved for misuse and for damage.

    RocketStoreError
    ├── StoreError                      a store directory that cannot be opened or used
    │   ├── StoreLockedError            another process holds <root>/lock
    │   ├── NotAStoreError              a read-only open of a directory that holds no store
    │   ├── StoreClosedError            the store was shut down
    │   ├── CorruptFileError(path, why) a file with the wrong size / name / content
    │   ├── RecoveryError               derived state cannot be reconciled
    │   └── DiskFullError
    ├── CorruptRecordError(offset, field, reason)   a CommitLog record that does not decode
    ├── ProtocolError -> LocalProtocolError | RemoteProtocolError (remoting)
    └── BrokerError(code)
"""
from __future__ import annotations


class RocketStoreError(Exception):
    """Base class of every rocketstore error."""


class StoreError(RocketStoreError):
    """The store directory cannot be opened or used."""


class StoreLockedError(StoreError):
    """Another process holds the store's lock file."""


class NotAStoreError(StoreError):
    """A read-only open (or a read-only command) was pointed at a directory that holds no store."""


class StoreClosedError(StoreError):
    """The store was shut down."""


class CorruptFileError(StoreError):
    """A file of the store has the wrong size, name or content."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class RecoveryError(StoreError):
    """Derived state (ConsumeQueue, index) cannot be reconciled with the CommitLog."""


class DiskFullError(StoreError):
    """No space left for a new mapped file."""


class CorruptRecordError(RocketStoreError):
    """A CommitLog record that does not decode."""

    def __init__(self, physical_offset: int, field: str, reason: str) -> None:
        super().__init__(f"record at offset {physical_offset}: {field}: {reason}")
        self.physical_offset = physical_offset
        self.field = field
        self.reason = reason


class ProtocolError(RocketStoreError):
    """A remoting protocol violation (abstract: use one of the two subclasses)."""

    def __new__(cls, *args: object, **kwargs: object) -> "ProtocolError":
        if cls is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError")
        return super().__new__(cls, *args, **kwargs)


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes the protocol does not allow."""


class BrokerError(RocketStoreError):
    """A broker answered with a non-success response code."""

    def __init__(self, code: int, remark: str | None = None) -> None:
        super().__init__(f"broker error {code}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark
