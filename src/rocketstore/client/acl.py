"""Signed requests for brokers with ACL on (RocketMQ's ``SessionCredentials`` and
``AclClientRPCHook``).

    from rocketstore.client import Producer, SessionCredentials
    creds = SessionCredentials("RocketMQ", "12345678")
    with Producer("PG", "127.0.0.1:9876", credentials=creds) as p: ...

Every client class (``Producer``, ``PullConsumer``, ``PushConsumer``, ``TransactionProducer``,
``AdminClient`` and their ``Async*`` twins) takes ``credentials=``; each request it sends — to
the name server too, as RocketMQ's clients do — then carries ``AccessKey`` (``SecurityToken``)
and ``Signature`` (``remoting.signing``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..remoting.command import RemotingCommand
from ..remoting.signing import sign_request


@dataclass(frozen=True)
class SessionCredentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("SessionCredentials need an access key and a secret key")

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"

    @classmethod
    def from_env(cls) -> "SessionCredentials | None":
        """``ROCKETMQ_ACCESS_KEY`` / ``ROCKETMQ_SECRET_KEY`` (/ ``ROCKETMQ_SECURITY_TOKEN``) of
        the environment, or None when unset: how ``rocketstore``'s commands sign."""
        ak, sk = os.environ.get("ROCKETMQ_ACCESS_KEY"), os.environ.get("ROCKETMQ_SECRET_KEY")
        if not ak or not sk:
            return None
        return cls(ak, sk, os.environ.get("ROCKETMQ_SECURITY_TOKEN") or None)

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """``AclClientRPCHook.doBeforeRequest``: sign ``cmd`` in place."""
        return sign_request(cmd, self.access_key, self.secret_key, self.security_token)


__all__ = ["SessionCredentials"]
