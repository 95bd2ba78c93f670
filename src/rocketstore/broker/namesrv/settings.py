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
from typing import Any, Callable

from ...remoting.codes import RequestCode, ResponseCode
from ...remoting.command import RemotingCommand
from ...config import parse_properties

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


def handlers(settings: NamesrvSettings) -> dict[int, Any]:
    async def get_config(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=settings.to_properties().encode("utf-8"))

    async def update_config(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        try:
            props = parse_properties((cmd.body or b"").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=f"string2Properties error: {exc}")
        if any(k in props for k in PATHS):
            return cmd.response(ResponseCode.NO_PERMISSION, remark="Can not update config path")
        refused = sorted(k for k in props if k not in LIVE)
        if refused:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark=f"name server settings that cannot change live: "
                                       f"{', '.join(refused)} (can: {', '.join(LIVE)})")
        value = props.get("orderMessageEnable")
        if value is not None:
            if value.lower() not in ("true", "false"):
                return cmd.response(ResponseCode.SYSTEM_ERROR,
                                    remark=f"orderMessageEnable must be true or false, not {value!r}")
            settings.order_message_enable = value.lower() == "true"
        return cmd.response(ResponseCode.SUCCESS)

    return {RequestCode.GET_NAMESRV_CONFIG: get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: update_config}


__all__ = ["NamesrvSettings", "handlers"]
