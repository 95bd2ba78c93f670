"""A Python client of RocketMQ 4.x remoting (works against rocketstore's broker and RocketMQ's).

    from rocketstore.client import Producer, PullConsumer, PushConsumer
    with Producer("PG", "127.0.0.1:9876") as p:
        r = p.send("TopicTest", b"hello", tags="TagA", keys=["k1"])
        reply = p.request("Service", b"ping", timeout_s=3)   # request-reply (a consumer answers
                                                              # with Producer.reply(msg, body))

Blocking classes run on a shared background event loop; ``Async*`` classes are the same code
for asyncio programs.
"""
from .acl import SessionCredentials
from .admin import AdminClient, AsyncAdminClient
from .consumer import (AsyncPullConsumer, MessageSelector, PullConsumer, PullResult,
                       decode_messages)
from .instance import ClientInstance, MessageQueue
from .producer import AsyncProducer, Producer, SendResult
from .push import AsyncPushConsumer, PushConsumer, allocate_average
from .transaction import (AsyncTransactionProducer, LocalTransactionState, TransactionProducer,
                          TransactionSendResult)

__all__ = ["AsyncProducer", "Producer", "SendResult", "AsyncPullConsumer", "PullConsumer",
           "AdminClient", "AsyncAdminClient", "PullResult", "MessageSelector",
           "AsyncPushConsumer", "PushConsumer", "ClientInstance", "MessageQueue",
           "allocate_average", "decode_messages", "AsyncTransactionProducer",
           "LocalTransactionState", "TransactionProducer", "TransactionSendResult",
           "SessionCredentials"]
