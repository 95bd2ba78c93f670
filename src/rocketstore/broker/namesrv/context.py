"""``NamesrvContext``: what the name server's processors use.

The route table of registered brokers, the KV config, the name server's own settings and —
for ``rocketstore serve``, which runs a name server beside its broker — that broker
(``LocalBroker``: its config and topics) and the route perms wipeWritePerm / addWritePerm set on
it. ``rocketstore namesrv`` runs the same processors with no local broker. ``build`` fills the
defaults the way both commands need them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .kvconfig import KV_CONFIG_FILE, ORDER_TOPIC_CONFIG, KVConfigManager
from .routes import LocalBroker, LocalRoutePerms, RouteTable
from .settings import NamesrvSettings


@dataclass
class NamesrvContext:
    table: RouteTable
    kv: KVConfigManager
    settings: NamesrvSettings
    local: LocalBroker | None = None
    perms: LocalRoutePerms | None = None

    def order_conf(self, topic: str) -> str | None:
        return self.kv.get(ORDER_TOPIC_CONFIG, topic)

    def kv_changed(self, namespace: str) -> None:
        """The local broker takes the ORDER_TOPIC_CONFIG namespace as a registering broker
        takes it from the answer to REGISTER_BROKER."""
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        if self.local is not None and namespace == ORDER_TOPIC_CONFIG and order is not None:
            self.local.topics.update_order_topics(set(order))


def local_kv_config_path(local: LocalBroker) -> str:
    """Where ``rocketstore serve`` keeps its name server's ``kvConfig.json``: ``kvConfigPath``
    of ``--config``, else beside the broker's own state in ``<store>/config/``."""
    return local.config.kv_config_path or os.path.join(
        local.store_config.store_path_root_dir, "config", KV_CONFIG_FILE)


def build(local: LocalBroker | None, table: RouteTable | None = None,
          kv: KVConfigManager | None = None, settings: NamesrvSettings | None = None,
          perms: LocalRoutePerms | None = None) -> NamesrvContext:
    """The context of a name server; ``kv`` defaults to memory only, or ``local_kv_config_path``
    beside a local broker; ``settings`` to ``orderMessageEnable`` of the broker's config;
    ``perms`` are the local broker's route perms (shared with its gRPC routes)."""
    if kv is None:
        kv = KVConfigManager(local_kv_config_path(local) if local is not None else None)
    if settings is None:
        settings = NamesrvSettings(kv.path, bool(local is not None
                                                 and local.config.order_message_enable))
        if local is not None:
            cfg = local.config
            settings.listen_port = lambda: cfg.namesrv_port
    if perms is None and local is not None:
        perms = LocalRoutePerms()
    ctx = NamesrvContext(table if table is not None else RouteTable(), kv, settings, local, perms)
    ctx.kv_changed(ORDER_TOPIC_CONFIG)
    return ctx
