"""The broker's part of master/slave replication (the bytes move in ``store/ha``): roles,
what a slave refuses, ``suggestWhichBrokerId`` and ``SlaveSynchronize``.

Theory of operation (RocketMQ 4.9.7's ``BrokerController``, ``SlaveSynchronize`` and
processors). A SLAVE (``brokerRole=SLAVE``, ``brokerId`` > 0) serves pulls, queries and admin
reads, and refuses:

| request                                              | answer                                  |
|------------------------------------------------------|-----------------------------------------|
| SEND_MESSAGE 10 / SEND_MESSAGE_V2 310 / BATCH 320    | 14 SERVICE_NOT_AVAILABLE (RocketMQ's remark) |
| CONSUMER_SEND_MSG_BACK 36                            | 1 SYSTEM_ERROR, remark SERVICE_NOT_AVAILABLE |
| END_TRANSACTION 37                                   | 11 SLAVE_NOT_AVAILABLE                  |
| UPDATE_AND_CREATE_TOPIC 17, DELETE_TOPIC_IN_BROKER 215, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200, DELETE_SUBSCRIPTIONGROUP 207 | 1 SYSTEM_ERROR "Can't modify topic or subscription group from slave broker, ..." |

``services.slave_sync.SlaveSynchronize`` runs on a slave 3 s after start and then every 10 s while its master's
remoting address is known (from the name server's register answer, else derived from
``haMasterAddress``): GET_ALL_TOPIC_CONFIG (21) from the master's fast port (listenPort - 2,
falling back to the main port), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45) and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201). Topic and subscription tables are replaced when the
master's data version changed, consumer offsets are merged (the master's entries win), delay
offsets are taken as they are. A failed call is logged and the next one still runs.
"""
from __future__ import annotations

import json
from typing import Any

from ..remoting.codes import SEND_REQUEST_CODES, RequestCode, ResponseCode
from ..remoting.command import RemotingCommand

MASTER_ID = 0
SLAVE_SEND_REMARK = ("service not available now. It may be caused by one of the following reasons: "
                     "the broker's disk is full [...], messages are put to the slave, message store "
                     "has been shut down, etc.")
SLAVE_MODIFY_REMARK = ("Can't modify topic or subscription group from slave broker, please execute it "
                       "from master broker.")

_MODIFY_CODES = (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP)


def check_role(role: str, broker_id: int) -> int:
    """RocketMQ's BrokerStartup: masters are id 0; a slave's id must be > 0 (ValueError)."""
    if role in ("ASYNC_MASTER", "SYNC_MASTER"):
        return MASTER_ID
    if broker_id <= 0:
        raise ValueError("Slave's brokerId must be > 0")
    return broker_id


def slave_handlers(handlers: dict[int, Any]) -> dict[int, Any]:
    """A slave's request table: the refusals above in front of the master's handlers."""
    out = dict(handlers)

    def refuse(code: int, remark: str | None) -> Any:
        async def handler(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(code, remark=remark)
        return handler
    for c in SEND_REQUEST_CODES:
        out[c] = refuse(ResponseCode.SERVICE_NOT_AVAILABLE, SLAVE_SEND_REMARK)
    out[RequestCode.CONSUMER_SEND_MSG_BACK] = refuse(ResponseCode.SYSTEM_ERROR, "SERVICE_NOT_AVAILABLE")
    out[RequestCode.END_TRANSACTION] = refuse(ResponseCode.SLAVE_NOT_AVAILABLE, None)
    for c in _MODIFY_CODES:
        out[c] = refuse(ResponseCode.SYSTEM_ERROR, SLAVE_MODIFY_REMARK)
    return out


def suggest_broker_id(slave_read_enable: bool, suggest_pulling_from_slave: bool,
                      group_cfg: Any | None) -> int:
    """PullMessageProcessor's ``suggestWhichBrokerId``."""
    if not slave_read_enable:
        return MASTER_ID
    if suggest_pulling_from_slave:
        return int(getattr(group_cfg, "which_broker_when_consume_slowly", 1))
    return int(getattr(group_cfg, "broker_id", MASTER_ID))


def ha_runtime_fields(store: Any) -> dict[str, str]:
    """Replication in the runtime KVTable (GET_BROKER_RUNTIME_INFO, ``mqadmin brokerStatus``),
    beyond RocketMQ 4.9.7, which shows none: role, each slave's lag in bytes and seconds, a
    stalled flag; on a slave its master and connection."""
    fn = getattr(store, "ha_status", None)
    st = fn() if fn is not None else None
    if st is None:
        return {}
    slaves = st.get("slaves") or []
    out: dict[str, Any] = {"haRole": st["role"], "haConnections": len(slaves),
                           "haSlaveAckOffset": st["slave_acked_offset"]}
    if st.get("ha_port") is not None:
        out["haListenPort"] = st["ha_port"]
    if slaves:
        out["haSlaveFallBehindBytes"] = min(x["lag_bytes"] for x in slaves)
        out["haSlaveFallBehindSeconds"] = f"{min(x['lag_seconds'] for x in slaves):.3f}"
        out["haSlaveStalled"] = str(any(x["stalled"] for x in slaves)).lower()
        out["haSlaves"] = json.dumps([{k: x[k] for k in ("address", "acked_offset", "lag_bytes",
                                                          "lag_seconds", "stalled",
                                                          "behind_oldest_file")} for x in slaves],
                                     separators=(",", ":"))
    master = st.get("master")
    if master is not None:
        out["haMasterAddress"] = master["address"] or ""
        out["haMasterConnected"] = str(bool(master["connected"])).lower()
        if master.get("last_frame_seconds_ago") is not None:
            out["haLastFrameSecondsAgo"] = master["last_frame_seconds_ago"]
        if master.get("last_error"):
            out["haLastError"] = master["last_error"]
    return {k: str(v) for k, v in out.items()}


__all__ = ["check_role", "ha_runtime_fields", "slave_handlers", "suggest_broker_id"]
