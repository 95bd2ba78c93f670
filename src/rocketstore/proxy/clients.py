"""gRPC clients in the broker's client registries (``broker.consumers`` / ``broker.producers``).

Theory of operation: a 5.x consumer never sends HEART_BEAT; it identifies itself with metadata
headers (``x-mq-client-id``, ``x-mq-language``, ``x-mq-client-version``), sends its group and
subscriptions once in the Telemetry ``Settings`` and then a ``HeartbeatRequest`` every 10 s. As
the 5.x proxy's ``ClientActivity`` does, each of these registers the client in the *broker's*
``ConsumerManager`` — the one table remoting heartbeats fill — as a ``ClientChannelInfo`` of its
client id, language and version, with the consume type of its client type (SimpleConsumer:
CONSUME_ACTIVELY, PushConsumer: CONSUME_PASSIVELY), CLUSTERING, CONSUME_FROM_LAST_OFFSET and the
``SubscriptionData`` of each subscription entry. So ``GET_CONSUMER_CONNECTION_LIST``,
``GET_CONSUME_STATS``, ``rocketstore consumers`` and the console see gRPC and remoting consumers
alike. The SQL92 subscriptions go to the broker's filter registry too (RocketMQ's REGISTER
event), so ``enableCalcFilterBitMap`` bitmaps cover gRPC groups.

A client leaves the registry as in RocketMQ 5: on ``NotifyClientTermination``, or when its
heartbeats stop for ``channelExpiredTimeout`` (the broker's housekeeping scan). A Telemetry
stream that ends does not unregister a consumer (a 5.x client reopens it and keeps
heartbeating); the registry entry then points at the newest stream.

The connection object the registry keeps is the client's ``TelemetryChannel`` (it has ``peer``
and ``notify``); before a client opened one, a closed stand-in with its address.
"""
from __future__ import annotations

import re
import time
from typing import Any

from ..broker.state.topics import RETRY_PREFIX, ensure_topic
from .convert import ValidationError
from .pieces import BrokerPieces, check_group
from .protocol import pb
from .telemetry import TelemetryChannel, peer_address

LANGUAGE_HEADER = "x-mq-language"
VERSION_HEADER = "x-mq-client-version"
CONSUME_TYPES = {pb.SIMPLE_CONSUMER: "CONSUME_ACTIVELY", pb.PUSH_CONSUMER: "CONSUME_PASSIVELY"}
# MQVersion.Version ordinals: V5_0_0 is 413, each later x.y.z adds a SNAPSHOT and a release;
# a version the broker cannot name is reported as the broker's own (as ClientActivity does)
V5_0_0 = 413
CURRENT_VERSION = V5_0_0 + 2 * 33  # V5_3_3
LANGUAGE_CODES = frozenset({"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY",
                            "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS"})
_LANGUAGE_ALIASES = {"GOLANG": "GO", "DOT_NET": "DOTNET", "CSHARP": "DOTNET", "C#": "DOTNET",
                     "NODEJS": "NODE_JS", "NODE": "NODE_JS", "C++": "CPP"}
_VERSION_RE = re.compile(r"^V?(\d+)[._](\d+)[._](\d+)$", re.IGNORECASE)


def version_ordinal(version: str | None) -> int:
    """A client's ``x-mq-client-version`` (``5.1.2`` or ``V5_1_2``) as an MQVersion ordinal."""
    m = _VERSION_RE.match((version or "").strip())
    if m:
        major, minor, patch = (int(g) for g in m.groups())
        if major == 5 and minor < 10 and patch < 10:
            return V5_0_0 + 2 * (10 * minor + patch)
    return CURRENT_VERSION


def language_of(meta: dict[str, str], settings: Any = None) -> str:
    """The client's ``x-mq-language`` (else its settings' user agent) as a RocketMQ
    ``LanguageCode`` name — what mqadmin and 4.x tools can read: ``GOLANG`` is ``GO``,
    ``DOT_NET`` ``DOTNET``; a language RocketMQ has no name for is ``OTHER``."""
    language = (meta.get(LANGUAGE_HEADER) or "").strip().upper()
    if not language and settings is not None and settings.HasField("user_agent") and \
            settings.user_agent.language:
        language = pb.Language.Name(settings.user_agent.language)
    language = _LANGUAGE_ALIASES.get(language, language)
    return language if language in LANGUAGE_CODES else "OTHER"


def subscription_json(entry: Any, sub_version: int) -> dict:
    """One ``SubscriptionEntry`` as the ``SubscriptionData`` a 4.x heartbeat carries
    (``FilterAPI.build``)."""
    expr = entry.expression.expression
    if entry.expression.type == pb.SQL:
        return {"topic": entry.topic.name, "subString": expr, "expressionType": "SQL92",
                "subVersion": sub_version}
    expr = expr.strip() or "*"
    return {"topic": entry.topic.name, "subString": expr, "expressionType": "TAG",
            "subVersion": sub_version}


class GrpcClients:
    """What the gRPC activities tell the broker's registries about one client at a time."""

    def __init__(self, pieces: BrokerPieces) -> None:
        self.p = pieces
        self._sub_versions: dict[str, int] = {}  # client id -> time its settings arrived

    def _connection(self, channel: TelemetryChannel | None, client_id: str, peer: str,
                    meta: dict[str, str]) -> Any:
        if channel is not None:
            return channel
        stand_in = TelemetryChannel(client_id, peer_address(peer), language_of(meta),
                                    version_ordinal(meta.get(VERSION_HEADER)))
        stand_in.closed = True
        return stand_in

    def consumer_registered(self, client_id: str, meta: dict[str, str], peer: str,
                            channel: TelemetryChannel | None, group: str, client_type: int,
                            settings: Any, *, from_settings: bool) -> None:
        """Settings (``from_settings``) or a heartbeat of a consumer of ``group``."""
        consumers = self.p.consumers
        if consumers is None or not group:
            return
        try:
            check_group(group)
        except ValidationError:
            return
        if from_settings or client_id not in self._sub_versions:
            self._sub_versions[client_id] = int(time.time() * 1000)
        version = self._sub_versions[client_id]
        subs = []
        if settings is not None and settings.HasField("subscription") and \
                settings.subscription.group.name == group:
            subs = [subscription_json(e, version) for e in settings.subscription.subscriptions
                    if e.topic.name]
            if client_type not in CONSUME_TYPES and settings.HasField("client_type"):
                client_type = settings.client_type
        data = {"groupName": group,
                "consumeType": CONSUME_TYPES.get(client_type, "CONSUME_ACTIVELY"),
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": subs}
        changed = consumers.register(data, client_id,
                                     self._connection(channel, client_id, peer, meta),
                                     language=language_of(meta, settings),
                                     version=version_ordinal(meta.get(VERSION_HEADER)))
        if from_settings or changed:  # as a 4.x heartbeat: the group's retry topic exists,
            try:                        # so tools that find a group by it (mqadmin) do
                ensure_topic(self.p.topics, self.p.config, RETRY_PREFIX + group, 1)
            except ValueError:
                pass
        if self.p.filters is not None and (from_settings or changed) and subs:
            self.p.filters.register_group(group, subs)
        if changed and self.p.consumer_ids_changed is not None:
            self.p.consumer_ids_changed(group)

    def consumer_gone(self, client_id: str, group: str | None) -> None:
        """NotifyClientTermination: the client leaves ``group`` (every group without one)."""
        consumers = self.p.consumers
        self._sub_versions.pop(client_id, None)
        if consumers is None:
            return
        groups = [group] if group else [g for g in consumers.group_names()
                                        if client_id in consumers.client_ids(g)]
        for g in groups:
            if consumers.unregister(g, client_id) and self.p.consumer_ids_changed is not None:
                self.p.consumer_ids_changed(g)

    def forget(self, client_id: str) -> None:
        self._sub_versions.pop(client_id, None)


def metadata_of(context: Any) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}

