"""The controller's request processors: code -> ``handler(conn, cmd)`` over one
``ControllerService``, with RocketMQ 5.3.3's header field names (checked with ``javap`` against
rocketmq-remoting-5.3.3's ``protocol.header.controller`` classes) and answers.

=====  ==============================  ===============================================  =======================
code   request                         request header fields                            answer
=====  ==============================  ===============================================  =======================
904    BROKER_HEARTBEAT (oneway)       clusterName brokerAddr brokerName brokerId       "Heart beat success"
                                       epoch maxOffset confirmOffset
                                       heartbeatTimeoutMills electionPriority
1001   CONTROLLER_ALTER_SYNC_STATE_SET brokerName masterBrokerId masterEpoch            newSyncStateSetEpoch;
                                       invokeTime; body SyncStateSet                    body SyncStateSet
1002   CONTROLLER_ELECT_MASTER         clusterName brokerName brokerId designateElect   masterBrokerId
                                       invokeTime                                       masterAddress masterEpoch
                                                                                        syncStateSetEpoch; body
                                                                                        ElectMasterResponseBody
1003   CONTROLLER_REGISTER_BROKER      clusterName brokerName brokerId brokerAddress    clusterName brokerName
                                       invokeTime                                       masterBrokerId masterAddress
                                                                                        masterEpoch syncStateSetEpoch;
                                                                                        body SyncStateSet
1004   CONTROLLER_GET_REPLICA_INFO     brokerName                                       masterBrokerId masterAddress
                                                                                        masterEpoch; body SyncStateSet
1005   CONTROLLER_GET_METADATA_INFO    -                                                group controllerLeaderId
                                                                                        controllerLeaderAddress
                                                                                        isLeader peers
1006   CONTROLLER_GET_SYNC_STATE_DATA  body: JSON list of brokerNames                   body BrokerReplicasInfo
1009   UPDATE_CONTROLLER_CONFIG        body: properties text                            -
1010   GET_CONTROLLER_CONFIG           -                                                body: properties text
1011   CLEAN_BROKER_DATA               clusterName brokerName                           -
                                       brokerControllerIdsToClean isCleanLivingBroker
1012   CONTROLLER_GET_NEXT_BROKER_ID   clusterName brokerName                           clusterName brokerName
                                                                                        nextBrokerId
1013   CONTROLLER_APPLY_BROKER_ID      clusterName brokerName appliedBrokerId           clusterName brokerName
                                       registerCheckCode
=====  ==============================  ===============================================  =======================

A missing required field or a value that is not a number is refused with SYSTEM_ERROR and the
field's name (as RocketMQ's header decoding refuses it); the state machine's refusals carry
RocketMQ's controller codes (2000-2014).
"""
from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Awaitable, Callable

from ..config import parse_properties
from ..remoting.command import RemotingCommand
from ..remoting.fastjson import dumps, loads
from .codes import ControllerRequest as Q
from .codes import ControllerResponse as R
from .etcd import NOT_LEADER_REMARK
from .service import ControllerService, now_ms
from .state import Result

Handler = Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]]


def _answer(cmd: RemotingCommand, res: Result) -> RemotingCommand:
    body = b"" if res.body is None else dumps(res.body).encode()
    return cmd.response(res.code, res.header, remark=res.remark, body=body)


def _json_body(cmd: RemotingCommand, what: str) -> Any:
    if not cmd.body:
        raise ValueError(f"the {what} body is required")
    try:
        return loads(cmd.body)
    except ValueError as exc:
        raise ValueError(f"the {what} body is not JSON: {exc}") from None


async def heartbeat(svc: ControllerService, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    broker_id = cmd.get_int("brokerId")
    if broker_id is None:
        return cmd.response(R.CONTROLLER_INVALID_REQUEST, remark="Heart beat with empty brokerId")
    svc.heartbeats.beat(now_ms(), cmd.get_str("clusterName") or "", cmd.get_str("brokerName") or "",
                        broker_id, cmd.get_str("brokerAddr") or "", conn,
                        cmd.get_int("heartbeatTimeoutMills"), cmd.get_int("epoch"),
                        cmd.get_int("maxOffset"), cmd.get_int("confirmOffset"),
                        cmd.get_int("electionPriority"))
    return cmd.response(R.SUCCESS, remark="Heart beat success")


async def alter_sync_state_set(svc: ControllerService, conn: Any,
                               cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.require_str("brokerName")
    body = _json_body(cmd, "SyncStateSet")
    if not isinstance(body, dict) or not isinstance(body.get("syncStateSet"), list):
        raise ValueError("the SyncStateSet body needs a syncStateSet list")
    try:
        new_set = {int(x) for x in body["syncStateSet"]}
        epoch = int(body.get("syncStateSetEpoch", 0))
    except (TypeError, ValueError):
        raise ValueError("the SyncStateSet body holds a broker id that is not a number") from None
    res = svc.commit(svc.state.alter_sync_state_set(
        name, cmd.get_int("masterBrokerId"), cmd.get_int("masterEpoch"), new_set, epoch,
        svc.group_alive(name)))
    return _answer(cmd, res)


async def elect_master(svc: ControllerService, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.require_str("brokerName")
    res = svc.elect(name, cmd.get_int("brokerId", -1), cmd.get_bool("designateElect"))
    return _answer(cmd, res)


async def register_broker(svc: ControllerService, conn: Any,
                          cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.require_str("brokerName")
    res = svc.commit(svc.state.register_broker(
        cmd.get_str("clusterName") or "", name, cmd.require_int("brokerId"),
        cmd.require_str("brokerAddress"), svc.group_alive(name)))
    return _answer(cmd, res)


async def get_replica_info(svc: ControllerService, conn: Any,
                           cmd: RemotingCommand) -> RemotingCommand:
    return _answer(cmd, svc.state.get_replica_info(cmd.require_str("brokerName")))


async def get_metadata(svc: ControllerService, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    cfg = svc.config
    leader = await asyncio.to_thread(svc.leader) if svc.group is not None else svc.leader()
    peers = cfg.peers() or [(cfg.controllerDLegerSelfId, svc.address)]
    header: dict[str, Any] = {"group": cfg.controllerDLegerGroup, "isLeader": svc.leading,
                              "peers": "".join(f"{i}:{a};" for i, a in peers)}
    if leader is not None:  # no leader while a group elects: the fields stay out, as in RocketMQ
        header["controllerLeaderId"], header["controllerLeaderAddress"] = leader
    return cmd.response(R.SUCCESS, header)


async def get_sync_state_data(svc: ControllerService, conn: Any,
                              cmd: RemotingCommand) -> RemotingCommand:
    names = loads(cmd.body) if cmd.body else None
    if not isinstance(names, list) or not names:
        # RocketMQ answers createResponseCommand(null): no code set
        return cmd.response(R.SYSTEM_ERROR, remark="not set any response code")
    return _answer(cmd, svc.state.get_sync_state_data(
        [str(n) for n in names],
        lambda name, bid: svc.alive(svc.state.groups[name].cluster, name, bid)))


async def update_config(svc: ControllerService, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    if cmd.body:
        try:
            props = parse_properties(cmd.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return cmd.response(R.SYSTEM_ERROR, remark="string2Properties error")
        if set(props) & svc.config.black_list():
            return cmd.response(R.NO_PERMISSION, remark="Can not update config in black list.")
        svc.config.update(props)  # ValueError -> SYSTEM_ERROR naming the key
    return cmd.response(R.SUCCESS)


async def get_config(svc: ControllerService, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    text = "".join(f"{k}={v}\n" for k, v in sorted(svc.config.as_properties().items()))
    return cmd.response(R.SUCCESS, body=text.encode())


async def clean_broker_data(svc: ControllerService, conn: Any,
                            cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.require_str("brokerName")
    res = svc.commit(svc.state.clean_broker_data(
        name, cmd.get_str("brokerControllerIdsToClean"), cmd.get_bool("isCleanLivingBroker"),
        svc.group_alive(name)))
    return _answer(cmd, res)


async def get_next_broker_id(svc: ControllerService, conn: Any,
                             cmd: RemotingCommand) -> RemotingCommand:
    return _answer(cmd, svc.state.get_next_broker_id(cmd.get_str("clusterName") or "",
                                                     cmd.require_str("brokerName")))


async def apply_broker_id(svc: ControllerService, conn: Any,
                          cmd: RemotingCommand) -> RemotingCommand:
    res = svc.commit(svc.state.apply_broker_id(
        cmd.get_str("clusterName") or "", cmd.require_str("brokerName"),
        cmd.require_int("appliedBrokerId"), cmd.require_str("registerCheckCode")))
    return _answer(cmd, res)


TABLE: dict[int, Callable[..., Awaitable[RemotingCommand | None]]] = {
    Q.BROKER_HEARTBEAT: heartbeat,
    Q.CONTROLLER_ALTER_SYNC_STATE_SET: alter_sync_state_set,
    Q.CONTROLLER_ELECT_MASTER: elect_master,
    Q.CONTROLLER_REGISTER_BROKER: register_broker,
    Q.CONTROLLER_GET_REPLICA_INFO: get_replica_info,
    Q.CONTROLLER_GET_METADATA_INFO: get_metadata,
    Q.CONTROLLER_GET_SYNC_STATE_DATA: get_sync_state_data,
    Q.UPDATE_CONTROLLER_CONFIG: update_config,
    Q.GET_CONTROLLER_CONFIG: get_config,
    Q.CLEAN_BROKER_DATA: clean_broker_data,
    Q.CONTROLLER_GET_NEXT_BROKER_ID: get_next_broker_id,
    Q.CONTROLLER_APPLY_BROKER_ID: apply_broker_id,
}


# what a controller of a replicated group answers when it does not lead (RocketMQ's followers
# answer these too: heartbeats keep every node's view of liveness warm for a later lead)
ANY_NODE = {Q.BROKER_HEARTBEAT, Q.CONTROLLER_GET_METADATA_INFO, Q.UPDATE_CONTROLLER_CONFIG,
            Q.GET_CONTROLLER_CONFIG}


def _leader_only(svc: ControllerService, fn: Callable[..., Awaitable[RemotingCommand | None]]
                 ) -> Handler:
    async def handler(conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        if not svc.leading:
            return cmd.response(R.CONTROLLER_NOT_LEADER, remark=NOT_LEADER_REMARK)
        return await fn(svc, conn, cmd)
    return handler


def handlers(svc: ControllerService) -> dict[int, Handler]:
    """The controller's ``code -> handler(conn, cmd)`` over one service."""
    return {int(code): partial(fn, svc) if code in ANY_NODE else _leader_only(svc, fn)
            for code, fn in TABLE.items()}
