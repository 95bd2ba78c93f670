"""Sans-IO codec of RocketMQ 4.x remoting: frames, headers, commands, codes.

Nothing here touches a socket, an event loop or a thread (a test enforces it); the broker and
the client bring their own I/O (see ``rocketstore.broker.server`` and
``rocketstore.client.transport``).
"""
from .codes import (FRAME_MAX_LENGTH, RPC_ONEWAY, RPC_TYPE_RESPONSE, SERIALIZE_JSON,
                    SERIALIZE_ROCKETMQ, LanguageCode, RequestCode, ResponseCode)
from .command import RemotingCommand, next_opaque, to_ext_str
from .connection import CLOSED, NEED_DATA, RemotingConnection
from .header import decode_header, encode_header, send_header_v1

__all__ = [
    "FRAME_MAX_LENGTH", "RPC_ONEWAY", "RPC_TYPE_RESPONSE", "SERIALIZE_JSON", "SERIALIZE_ROCKETMQ",
    "LanguageCode", "RequestCode", "ResponseCode", "RemotingCommand", "next_opaque",
    "to_ext_str", "CLOSED", "NEED_DATA", "RemotingConnection", "decode_header", "encode_header",
    "send_header_v1",
]
