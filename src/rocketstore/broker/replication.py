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

``SlaveSynchronize`` runs on a slave 3 s after start and then every 10 s while its master's
remoting address is known (from the name server's register answer, else derived from
``haMasterAddress``): GET_ALL_TOPIC_CONFIG (21) from the master's fast port (listenPort - 2,
falling back to the main port), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45) and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201). Topic and subscription tables are replaced when the
master's data version changed, consumer offsets are merged (the master's entries win), delay
offsets are taken as they are. A failed call is logged and the next one still runs.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any, Callable

from ..remoting.codes import RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.jsonbody import load_json_text
from .eventloop import cancel_and_wait

if TYPE_CHECKING:
    from .controller import Broker

log = logging.getLogger(__name__)

MASTER_ID = 0
SLAVE_SEND_REMARK = ("service not available now. It may be caused by one of the following reasons: "
                     "the broker's disk is full [...], messages are put to the slave, message store "
                     "has been shut down, etc.")
SLAVE_MODIFY_REMARK = ("Can't modify topic or subscription group from slave broker, please execute it "
                       "from master broker.")
SYNC_FIRST_S = 3.0
SYNC_PERIOD_S = 10.0
SYNC_TIMEOUT_S = 3.0

_MODIFY_CODES = (RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
                 RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP)
_SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)


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
    for c in _SEND_CODES:
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


def fast_addr(addr: str) -> str:
    """RocketMQ's VIP channel address: the same host, port - 2."""
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


class SlaveSynchronize:
    """The slave's periodic copy of its master's configuration (see the module doc)."""

    def __init__(self, broker: "Broker", master_addr: Callable[[], str | None]) -> None:
        self.broker = broker
        self.master_addr = master_addr
        self._task: asyncio.Task | None = None
        self._topic_version: Any = None
        self._group_version: Any = None
        self.last_sync_ms = 0
        self.last_error: str | None = None
        self.runs = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="slave-synchronize")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        await asyncio.sleep(SYNC_FIRST_S)
        while True:
            try:
                await self.sync_all()
            except Exception:  # noqa: BLE001 - logged; the next period tries again
                log.exception("SlaveSynchronize failed")
            await asyncio.sleep(SYNC_PERIOD_S)

    async def sync_all(self) -> bool:
        """One round of the four copies; True when all four succeeded."""
        addr = self.master_addr()
        if not addr or addr == self.broker.config.broker_addr:
            return False
        ok = 0
        for step in (self._topics, self._offsets, self._delay_offsets, self._groups):
            try:
                await step(addr)
                ok += 1
            except (OSError, asyncio.TimeoutError, ConnectionError, ValueError, RuntimeError) as exc:
                self.last_error = f"{step.__name__.strip('_')}: {exc}"
                log.warning("SlaveSynchronize %s from %s failed: %s", step.__name__.strip("_"), addr, exc)
        self.runs += 1
        if ok == 4:
            import time
            self.last_sync_ms = int(time.time() * 1000)
            self.last_error = None
        return ok == 4

    async def _call(self, addr: str, code: int) -> dict:
        from .registration import _Channel  # one short-lived connection per call

        ch = _Channel(addr)
        try:
            resp = await ch.invoke(RemotingCommand.request(code, {}, language="JAVA"), SYNC_TIMEOUT_S)
        finally:
            ch.close()
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"code {code} answered {resp.code}: {resp.remark}")
        data = load_json_text((resp.body or b"{}").decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"code {code}: the answer is not a JSON object")
        return data

    async def _topics(self, addr: str) -> None:
        try:
            data = await self._call(fast_addr(addr), RequestCode.GET_ALL_TOPIC_CONFIG)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            data = await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        version = _version(data)
        if version != self._topic_version:
            table = data.get("topicConfigTable") or {}
            await self.broker.run(self.broker.topics.replace_all, table)
            self._topic_version = version

    async def _offsets(self, addr: str) -> None:
        data = await self._call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        table = {k: {int(q): int(o) for q, o in (v or {}).items()}
                 for k, v in (data.get("offsetTable") or {}).items()}
        self.broker.offsets.merge(table)
        await self.broker.run(self.broker.offsets.persist)

    async def _delay_offsets(self, addr: str) -> None:
        data = await self._call(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        await self.broker.run(self.broker.delay_offsets.replace_all, table)

    async def _groups(self, addr: str) -> None:
        data = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        version = _version(data)
        if version != self._group_version:
            await self.broker.run(self.broker.subgroups.replace_all, data)
            self._group_version = version

    def status(self) -> dict:
        return {"master": self.master_addr(), "runs": self.runs, "last_sync_ms": self.last_sync_ms,
                "last_error": self.last_error}


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


def _version(data: dict) -> str:
    return json.dumps(data.get("dataVersion"), sort_keys=True)


__all__ = ["SlaveSynchronize", "check_role", "ha_runtime_fields", "slave_handlers",
           "suggest_broker_id"]
