"""The controller's state machine: RocketMQ 5.3.3's ReplicasInfoManager, pure.

Per broker group (``brokerName``): its cluster, the broker ids it has handed out (each with the
address and the ``registerCheckCode`` it was applied with), the next id to hand out, the master,
the master epoch, the SyncStateSet and its epoch.

Theory of operation: every request is *decided* against the current state by a method that
changes nothing and returns a ``Result`` — the response code, remark, header fields, body, and
the *events* that make the decision true. The caller makes those events durable (``journal``)
and only then passes them to ``apply``, the one mutator; replaying the same events on an empty
state rebuilds the same state, which is how a restarted controller comes back. Liveness and
ranking come in as functions, so the state holds no clock and no sockets.

Event kinds (``Event["type"]``), as RocketMQ's EventType: ``apply_broker_id``,
``update_broker_address``, ``elect_master`` (``newMaster`` None: the master died and nobody could
be elected; the master epoch still rises), ``alter_sync_state_set``, ``clean_broker_data``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import elect as elect_policy
from .codes import FIRST_BROKER_CONTROLLER_ID
from .codes import ControllerResponse as R

Event = dict[str, Any]
Alive = Callable[[int], bool]  # broker id -> alive, for one group


@dataclass
class Result:
    code: int = R.SUCCESS
    remark: str | None = None
    header: dict[str, Any] = field(default_factory=dict)
    body: Any = None  # a JSON-able value (the processors encode it as RocketMQ's fastjson does)
    events: list[Event] = field(default_factory=list)

    def fail(self, code: int, remark: str) -> "Result":
        self.code, self.remark = int(code), remark
        return self


@dataclass
class Group:
    cluster: str
    broker_name: str
    next_id: int = FIRST_BROKER_CONTROLLER_ID
    brokers: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (addr, check code)
    master: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0

    def addr(self, broker_id: int | None) -> str | None:
        if broker_id is None or broker_id not in self.brokers:
            return None
        return self.brokers[broker_id][0]

    def member_group(self) -> dict[str, Any]:
        """RocketMQ's BrokerMemberGroup."""
        return {"brokerAddrs": {i: a for i, (a, _) in sorted(self.brokers.items())},
                "brokerName": self.broker_name, "cluster": self.cluster}

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.broker_name, "nextId": self.next_id,
                "brokers": {str(i): [a, c] for i, (a, c) in self.brokers.items()},
                "master": self.master, "masterEpoch": self.master_epoch,
                "syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Group":
        return cls(d["cluster"], d["brokerName"], int(d["nextId"]),
                   {int(i): (a, c) for i, (a, c) in d["brokers"].items()},
                   None if d["master"] is None else int(d["master"]), int(d["masterEpoch"]),
                   {int(x) for x in d["syncStateSet"]}, int(d["syncStateSetEpoch"]))


def _set_body(ids: Iterable[int], epoch: int) -> dict[str, Any]:
    """RocketMQ's SyncStateSet body."""
    return {"syncStateSet": sorted(ids), "syncStateSetEpoch": epoch}


class ReplicasInfo:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    # -- decisions (read only) --------------------------------------------------------------------
    def alter_sync_state_set(self, broker_name: str, master_id: int | None, master_epoch: int | None,
                             new_set: set[int], new_set_epoch: int, alive: Alive) -> Result:
        res = Result()
        g = self.groups.get(broker_name)
        if g is None:
            return res.fail(R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
        if new_set == g.sync_state_set:
            return res.fail(R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                            "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if g.master != master_id:
            return res.fail(R.CONTROLLER_INVALID_MASTER,
                            f"Rejecting alter syncStateSet request because the current leader is:{{{g.master}}}, not {{{master_id}}}")
        if master_epoch != g.master_epoch:
            return res.fail(R.CONTROLLER_FENCED_MASTER_EPOCH,
                            f"Rejecting alter syncStateSet request because the current master epoch is:{{{g.master_epoch}}}, not {{{master_epoch}}}")
        if new_set_epoch != g.sync_state_set_epoch:
            return res.fail(R.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                            f"Rejecting alter syncStateSet request because the current syncStateSet epoch is:{{{g.sync_state_set_epoch}}}, not {{{new_set_epoch}}}")
        for replica in sorted(new_set):
            if replica not in g.brokers:
                return res.fail(R.CONTROLLER_INVALID_REPLICAS,
                                f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist")
            if not alive(replica):
                return res.fail(R.CONTROLLER_BROKER_NOT_ALIVE,
                                f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive")
        if g.master not in new_set:
            return res.fail(R.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                            f"Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin leader {{{g.master}}}")
        epoch = g.sync_state_set_epoch + 1
        res.header = {"newSyncStateSetEpoch": epoch}
        res.body = _set_body(new_set, epoch)
        res.events.append({"type": "alter_sync_state_set", "brokerName": broker_name,
                           "syncStateSet": sorted(new_set)})
        return res

    def elect_master(self, broker_name: str, broker_id: int | None, designate: bool,
                     rank: elect_policy.Rank, unclean: bool) -> Result:
        """``broker_id`` None (or -1): the controller's own trigger (its master died)."""
        res = Result()
        if broker_id == -1:
            broker_id = None
        g = self.groups.get(broker_name)
        if g is None:
            return res.fail(R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered")
        old = g.master
        # the group's first master is whoever asks — if it is a member (RocketMQ would also
        # crown an id it never handed out)
        new = broker_id if g.master_epoch == 0 and broker_id in g.brokers else None
        if new is None:
            new = elect_policy.elect(g.sync_state_set, set(g.brokers) if unclean else None, rank,
                                     old, broker_id if designate else None)
        if new is not None and new == old:
            res.header = {"masterEpoch": g.master_epoch, "syncStateSetEpoch": g.sync_state_set_epoch,
                          "masterBrokerId": old, "masterAddress": g.addr(old)}
            res.body = {"syncStateSet": sorted(g.sync_state_set)}
            return res.fail(R.CONTROLLER_MASTER_STILL_EXIST,
                            f"The old master {old} is still alive, not need to elect new master for broker {broker_name}")
        if new is not None:
            res.header = {"masterBrokerId": new, "masterAddress": g.addr(new),
                          "masterEpoch": g.master_epoch + 1,
                          "syncStateSetEpoch": g.sync_state_set_epoch + 1}
            res.body = {"brokerMemberGroup": g.member_group(), "syncStateSet": [new]}
            res.events.append({"type": "elect_master", "brokerName": broker_name, "newMaster": new})
            return res
        if broker_id is None:
            res.events.append({"type": "elect_master", "brokerName": broker_name, "newMaster": None})
            return res.fail(R.CONTROLLER_MASTER_NOT_AVAILABLE,
                            "Old master has down and failed to elect a new broker master")
        return res.fail(R.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, cluster: str, broker_name: str) -> Result:
        g = self.groups.get(broker_name)
        nxt = FIRST_BROKER_CONTROLLER_ID if g is None else g.next_id
        return Result(header={"clusterName": cluster, "brokerName": broker_name, "nextBrokerId": nxt})

    def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int,
                        check_code: str) -> Result:
        res = Result(header={"clusterName": cluster, "brokerName": broker_name})
        addr = check_code.split(";")[0]
        event = {"type": "apply_broker_id", "clusterName": cluster, "brokerName": broker_name,
                 "brokerAddress": addr, "brokerId": broker_id, "registerCheckCode": check_code}
        g = self.groups.get(broker_name)
        if g is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                res.events.append(event)
                return res
            return res.fail(R.CONTROLLER_BROKER_ID_INVALID,
                            f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to apply brokerId: {broker_id}")
        if broker_id not in g.brokers or g.brokers[broker_id][1] == check_code:
            res.events.append(event)
            return res
        return res.fail(R.CONTROLLER_BROKER_ID_INVALID,
                        f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}")

    def register_broker(self, cluster: str, broker_name: str, broker_id: int, addr: str,
                        alive: Alive) -> Result:
        res = Result(header={"clusterName": cluster, "brokerName": broker_name})
        g = self.groups.get(broker_name)
        if g is None:
            return res.fail(R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                            f"Broker-set: {broker_name} hasn't been registered in controller")
        if broker_id not in g.brokers:
            return res.fail(R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                            f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}")
        if g.master is not None and alive(g.master):
            res.header.update(masterBrokerId=g.master, masterAddress=g.addr(g.master),
                              masterEpoch=g.master_epoch, syncStateSetEpoch=g.sync_state_set_epoch)
        res.body = _set_body(g.sync_state_set, g.sync_state_set_epoch)
        if addr != g.addr(broker_id):
            res.events.append({"type": "update_broker_address", "clusterName": cluster,
                               "brokerName": broker_name, "brokerAddress": addr,
                               "brokerId": broker_id})
        return res

    def get_replica_info(self, broker_name: str) -> Result:
        res = Result()
        g = self.groups.get(broker_name)
        if g is None:
            return res.fail(R.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        res.header = {"masterBrokerId": g.master, "masterAddress": g.addr(g.master),
                      "masterEpoch": g.master_epoch}
        res.body = _set_body(g.sync_state_set, g.sync_state_set_epoch)
        return res

    def get_sync_state_data(self, broker_names: Iterable[str],
                            alive: Callable[[str, int], bool]) -> Result:
        """RocketMQ's BrokerReplicasInfo for the groups named (unknown names are left out)."""
        table: dict[str, Any] = {}
        for name in broker_names:
            g = self.groups.get(name)
            if g is None:
                continue
            ins, outs = [], []
            for bid, (addr, _) in sorted(g.brokers.items()):
                ident = {"alive": alive(name, bid), "brokerAddress": addr, "brokerId": bid,
                         "brokerName": name}
                (ins if bid in g.sync_state_set else outs).append(ident)
            table[name] = {"inSyncReplicas": ins, "masterAddress": g.addr(g.master),
                           "masterBrokerId": g.master, "masterEpoch": g.master_epoch,
                           "notInSyncReplicas": outs,
                           "syncStateSetEpoch": g.sync_state_set_epoch}
        return Result(body={"replicasInfoTable": table})

    def clean_broker_data(self, broker_name: str, ids_to_clean: str | None,
                          clean_living: bool, alive: Alive) -> Result:
        res = Result()
        ids: list[int] | None = None
        text = (ids_to_clean or "").strip()
        if text:
            try:
                ids = sorted({int(x) for x in text.split(";") if x.strip()})
            except ValueError:
                return res.fail(R.CONTROLLER_INVALID_REQUEST,
                                f"brokerControllerIdsToClean {ids_to_clean!r} is not a ';' list of ids")
        g = self.groups.get(broker_name)
        if not clean_living:
            if not text and g is not None and g.master is not None:
                return res.fail(R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                f"Broker {broker_name} is still alive, clean up failure")
            for bid in ids or []:
                if alive(bid):
                    return res.fail(R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                    f"Broker [{broker_name},  {bid}] is still alive, clean up failure")
        if g is None:
            return res.fail(R.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                            f"Broker {broker_name} is not existed,clean broker data failure.")
        res.events.append({"type": "clean_broker_data", "brokerName": broker_name,
                           "brokerIds": ids})
        return res

    def need_reelect(self, alive: Callable[[str, str, int], bool]) -> list[str]:
        """Groups whose master is dead while at least one member lives (RocketMQ's
        scanNeedReelectBrokerSets)."""
        out = []
        for name, g in self.groups.items():
            if g.master is not None and not alive(g.cluster, name, g.master):
                if any(alive(g.cluster, name, b) for b in g.brokers):
                    out.append(name)
        return out

    # -- the one mutator --------------------------------------------------------------------------
    def apply(self, ev: Event) -> None:
        kind = ev["type"]
        name = ev["brokerName"]
        g = self.groups.get(name)
        if kind == "apply_broker_id":
            if g is None:
                g = self.groups[name] = Group(ev["clusterName"], name)
            bid = int(ev["brokerId"])
            if bid not in g.brokers:
                g.brokers[bid] = (ev["brokerAddress"], ev["registerCheckCode"])
                g.next_id += 1
        elif g is None:
            return
        elif kind == "update_broker_address":
            bid = int(ev["brokerId"])
            if bid in g.brokers:
                g.brokers[bid] = (ev["brokerAddress"], g.brokers[bid][1])
        elif kind == "elect_master":
            new = ev["newMaster"]
            g.master_epoch += 1
            if new is None:
                g.master = None  # the SyncStateSet stays as it was
            else:
                g.master = int(new)
                g.sync_state_set = {int(new)}
                g.sync_state_set_epoch += 1
        elif kind == "alter_sync_state_set":
            g.sync_state_set = {int(x) for x in ev["syncStateSet"]}
            g.sync_state_set_epoch += 1
        elif kind == "clean_broker_data":
            ids = ev.get("brokerIds")
            if not ids:
                del self.groups[name]
                return
            for bid in ids:
                g.brokers.pop(int(bid), None)
                g.sync_state_set.discard(int(bid))
            if not g.brokers or not g.sync_state_set:
                del self.groups[name]
        else:
            raise ValueError(f"unknown controller event {kind!r}")

    # -- snapshot ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"groups": [g.to_json() for _, g in sorted(self.groups.items())]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ReplicasInfo":
        s = cls()
        for gd in d.get("groups", []):
            g = Group.from_json(gd)
            s.groups[g.broker_name] = g
        return s
