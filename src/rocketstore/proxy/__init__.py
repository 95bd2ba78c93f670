"""RocketMQ 5.x clients over gRPC (``apache.rocketmq.v2.MessagingService``).

``rocketstore serve --grpc-port 8081`` serves the Java 5, Go, C#, Node.js and Python 5.x
clients over the same store, topics and consumer offsets as the 4.x remoting port: a message
sent on one protocol is read on the other with the same message id (its ``UNIQ_KEY``).

Modules: ``protocol`` (messages compiled from our own ``rocketstore_messaging.proto``),
``convert`` (gRPC message <-> store message), ``service`` (route, heartbeat, send, telemetry
settings), ``consume`` (receive / ack / change invisible duration / dead-letter and the revive
service), ``pop`` (the durable pop checkpoints on the ``rmq_sys_REVIVE_LOG_<cluster>`` topic),
``clients`` (gRPC clients in the broker's consumer and producer registries), ``server``
(``GrpcProxy``: lifecycle). Receives filter by tag or SQL92 (the broker's evaluator). Not
served: PullMessage / UpdateOffset / GetOffset / QueryOffset (the 5.x PullConsumer),
RecallMessage and lite topics.
"""
from .pieces import BrokerPieces
from .server import GrpcProxy

__all__ = ["BrokerPieces", "GrpcProxy"]
