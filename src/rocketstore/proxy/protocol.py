"""The RocketMQ 5.x gRPC messages and service stubs, compiled from ``messaging.proto``.

Theory of operation: ``messaging.proto`` is rocketstore's own description of the subset of
``apache.rocketmq.v2`` it serves (same package, service and field numbers as the published
protocol, so every 5.x client talks to it). It is compiled in memory by ``grpcio-tools`` the
first time this module is imported (about 50 ms) — no generated code is kept in the tree and
nothing is generated at install time. ``pb`` holds the message classes, ``services`` the
servicer base class and ``add_MessagingServiceServicer_to_server``.

The message full names live in protobuf's default descriptor pool, so a process that also
imports another copy of ``apache.rocketmq.v2`` (a 5.x client library) must keep the two apart;
the server process never imports a client.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

_PROTO_DIR = os.path.dirname(os.path.abspath(__file__))
_PROTO_FILE = "rocketstore_messaging.proto"
_lock = threading.Lock()


def _load() -> tuple[Any, Any]:
    import grpc  # grpcio; protos_and_services needs grpcio-tools as well

    with _lock:
        added = _PROTO_DIR not in sys.path
        if added:
            sys.path.insert(0, _PROTO_DIR)
        try:
            return grpc.protos_and_services(_PROTO_FILE)
        finally:
            if added:
                sys.path.remove(_PROTO_DIR)


pb, services = _load()
Code = pb.Code


def status(code: int = pb.OK, message: str | None = None) -> Any:
    if message is None:
        message = pb.Code.Name(code)
    return pb.Status(code=code, message=message)


def duration_ms(d: Any) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def to_duration(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(t: Any) -> int:
    return t.seconds * 1000 + t.nanos // 1_000_000


def to_timestamp(ms: int) -> Any:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
