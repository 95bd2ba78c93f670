"""The name server's own settings: GET_NAMESRV_CONFIG (319) and UPDATE_NAMESRV_CONFIG (318), what
``mqadmin getNamesrvConfig`` / ``updateNamesrvConfig -k K -v V`` send (RocketMQ 4.9.7
``DefaultRequestProcessor.getConfig`` / ``updateConfig``).

Both bodies are Java properties text (``key=value`` lines) under ``NamesrvConfig`` /
``NettyServerConfig`` names: ``listenPort``, ``kvConfigPath``, ``orderMessageEnable``.
``orderMessageEnable`` changes live (routes start or stop carrying ``orderTopicConf``) until the
next restart; ``kvConfigPath`` / ``configStorePath`` answer NO_PERMISSION "Can not update config
path" as RocketMQ's; the listen port and unknown keys are refused with SYSTEM_ERROR naming them,
and nothing of such a request is applied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

LIVE = ("orderMessageEnable",)
PATHS = ("kvConfigPath", "configStorePath")


@dataclass
class NamesrvSettings:
    kv_config_path: str | None = None  # None: the KV config lives in memory only
    order_message_enable: bool = False
    listen_port: Callable[[], int | None] = lambda: None

    def to_properties(self) -> str:
        props = {"kvConfigPath": self.kv_config_path or "",
                 "orderMessageEnable": str(self.order_message_enable).lower()}
        port = self.listen_port()
        if port is not None:
            props["listenPort"] = str(port)
        return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


__all__ = ["NamesrvSettings"]
