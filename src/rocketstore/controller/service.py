"""The controller's lifecycle: state, journal, heartbeats, the scans and the notifications.

Theory of operation: everything runs on one asyncio loop, and a decision — decide, journal
(fsync), apply — has no ``await`` inside, so decisions are serialised as RocketMQ's single event
scheduler serialises them. Two timers run: every ``scanNotActiveBrokerInterval`` expired
heartbeats are dropped, and every ``scanInactiveMasterInterval`` (first after one interval, so
brokers have re-heartbeated after a restart) each group whose master is dead while a member lives
is re-elected. A broker's heartbeat connection closing or its heartbeat expiring, when it is its
group's master, triggers an election at once (``electMasterMaxRetryCount`` tries). A successful
election — by the controller, a broker or mqadmin — is told to the group's live members with
NOTIFY_BROKER_ROLE_CHANGED (oneway) when ``notifyBrokerRoleChanged``.

With ``controllerType=etcd`` the journal is the group's log in etcd (``etcd.py``) and one more
task runs: the campaign. Only the leader decides and runs the scans; it loads the state when it
wins, and steps down (answering CONTROLLER_NOT_LEADER) the moment its lease cannot be renewed or
a guarded write is refused.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from ..client.transport import ConnectionPool
from ..remoting.command import RemotingCommand
from ..remoting.fastjson import dumps
from .codes import ControllerRequest as Q
from .codes import ControllerResponse as R
from .config import ControllerConfig
from .heartbeat import DEFAULT_TIMEOUT_MS, BrokerLive, Heartbeats
from .etcd import NOT_LEADER_REMARK, EtcdClient, EtcdGroup, EtcdUnavailable, NotLeader
from .journal import Journal
from .state import ReplicasInfo, Result

log = logging.getLogger(__name__)


@dataclass
class Failover:
    """The last change of a group's master, for operators (status, /metrics)."""
    broker_name: str
    at: float  # wall-clock time of the election
    why: str  # what set it off: the master's heartbeat expired, its connection closed, ...
    took_s: float | None  # from noticing the master gone to the election (None: none noticed)
    from_id: int | None
    to_id: int | None
    epoch: int


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class ControllerService:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.journal: Journal | EtcdGroup = Journal(config.controllerStorePath)
        self.group: EtcdGroup | None = None  # controllerType=etcd
        self.leading = True  # a single controller always leads
        self.leader_since: float | None = None
        self.state = ReplicasInfo()
        self.heartbeats = Heartbeats()
        self.pool: ConnectionPool | None = None
        self.address = f"{config.listenHost}:{config.listenPort}"
        self._tasks: set[asyncio.Task] = set()
        self.elections = 0  # successful elections (status)
        self.failovers: dict[str, Failover] = {}  # broker name -> its last master change
        self._suspects: dict[str, tuple[float, str]] = {}  # broker name -> (noticed, why)
        self.notifications = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def open(self) -> None:
        cfg = self.config
        cfg.check_group()
        if not cfg.replicated:
            self.state = self.journal.open()
            return
        endpoints = [e.strip() for e in cfg.etcdEndpoints.split(",") if e.strip()]
        prefix = cfg.etcdKeyPrefix or f"/rocketstore/controller/{cfg.controllerDLegerGroup}"
        self.group = EtcdGroup(EtcdClient(endpoints), prefix, cfg.controllerDLegerSelfId,
                               self.address, cfg.etcdLeaseSeconds)
        self.journal = self.group
        self.leading = False

    def start(self, address: str) -> None:
        self.address = address
        self.pool = ConnectionPool()
        if self.group is not None:
            self.group.address = address
            self._spawn(self._campaign())
        else:
            self._grace_masters()
        self._spawn(self._scan_heartbeats())
        self._spawn(self._scan_inactive_masters())

    def _grace_masters(self) -> None:
        # Liveness is not durable: after a restart (or a new leader's election) every master
        # gets one heartbeat timeout (RocketMQ brokers' default controllerHeartBeatTimeoutMills)
        # to heartbeat again before it counts as dead, so a controller does not depose a living
        # master because a slave's heartbeat happened to arrive first. A master that really
        # died meanwhile is replaced when this grace expires.
        now = now_ms()
        for name, g in self.state.groups.items():
            if g.master is not None and not self.heartbeats.alive(now, g.cluster, name, g.master):
                self.heartbeats.beat(now, g.cluster, name, g.master, g.addr(g.master) or "",
                                     None, DEFAULT_TIMEOUT_MS)

    # -- the replicated group ---------------------------------------------------------------------
    async def _campaign(self) -> None:
        group = self.group
        assert group is not None
        period = max(0.2, group.lease_s / 3)
        while True:
            try:
                if not self.leading:
                    if await asyncio.to_thread(group.campaign):
                        try:
                            state = await asyncio.to_thread(group.open)
                        except (EtcdUnavailable, ValueError, KeyError) as exc:
                            log.error("controller: won the lead but cannot load the state: %s", exc)
                            await asyncio.to_thread(group.resign)
                        else:
                            self.state = state
                            self._grace_masters()
                            self.leading = True
                            self.leader_since = time.time()
                            log.warning("controller %s (%s) leads the group (%d records replayed, "
                                        "seq %d)", group.self_id, self.address, group.replayed,
                                        group.seq)
                elif not await asyncio.to_thread(group.keepalive):
                    await self.step_down("its lease expired")
            except EtcdUnavailable as exc:
                if self.leading:
                    await self.step_down(str(exc))
                else:
                    log.warning("controller: cannot campaign: %s", exc)
            await asyncio.sleep(period)

    async def step_down(self, why: str) -> None:
        if self.group is None or not self.leading:
            return
        self.leading = False
        self.leader_since = None
        log.warning("controller %s steps down: %s", self.group.self_id, why)
        await asyncio.to_thread(self.group.resign)

    def leader(self) -> tuple[str, str] | None:
        """(id, address) of the group's leader (this node when it leads), None when unknown."""
        if self.group is None or self.leading:
            return (self.config.controllerDLegerSelfId, self.address)
        try:
            return self.group.leader()
        except EtcdUnavailable:
            return None

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.pool is not None:
            self.pool.close()
        self.journal.close()

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # -- decisions --------------------------------------------------------------------------------
    def commit(self, res: Result) -> Result:
        """Make a decision's events durable, then apply them (the only way state changes)."""
        if not self.leading:
            return Result().fail(R.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
        if res.events:
            try:
                self.journal.append(res.events)
            except NotLeader as exc:
                self.leading = False
                self.leader_since = None
                log.warning("controller steps down: %s", exc)
                return Result().fail(R.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK)
            for ev in res.events:
                self.state.apply(ev)
            self.journal.maybe_compact(self.state)
        return res

    def alive(self, cluster: str, broker_name: str, broker_id: int | None) -> bool:
        return self.heartbeats.alive(now_ms(), cluster, broker_name, broker_id)

    def group_alive(self, broker_name: str):
        g = self.state.groups.get(broker_name)
        cluster = g.cluster if g is not None else ""
        now = now_ms()
        return lambda bid: self.heartbeats.alive(now, cluster, broker_name, bid)

    def group_rank(self, broker_name: str):
        g = self.state.groups.get(broker_name)
        cluster = g.cluster if g is not None else ""
        now = now_ms()

        def rank(bid: int):
            if not self.heartbeats.alive(now, cluster, broker_name, bid):
                return None
            info = self.heartbeats.get(cluster, broker_name, bid)
            assert info is not None
            return (info.epoch, info.max_offset, info.priority)
        return rank

    def elect(self, broker_name: str, broker_id: int | None, designate: bool) -> Result:
        g = self.state.groups.get(broker_name)
        old = g.master if g is not None else None
        res = self.commit(self.state.elect_master(
            broker_name, broker_id, designate, self.group_rank(broker_name),
            self.config.enableElectUncleanMaster))
        if res.code == R.SUCCESS:
            self.elections += 1
            self._record_failover(broker_name, old, res, designate)
            log.warning("controller: %s elected broker %s (%s) master, epoch %s",
                        broker_name, res.header.get("masterBrokerId"),
                        res.header.get("masterAddress"), res.header.get("masterEpoch"))
            if self.config.notifyBrokerRoleChanged:
                self.notify_role_changed(res)
        return res

    def _record_failover(self, broker_name: str, old: int | None, res: Result,
                         designate: bool) -> None:
        new = res.header.get("masterBrokerId")
        suspect = self._suspects.pop(broker_name, None)
        if old is None and suspect is None and not designate and broker_name not in self.failovers:
            return  # a group's first master is no failover
        why = suspect[1] if suspect else ("electMaster (designated)" if designate else "electMaster")
        took = time.monotonic() - suspect[0] if suspect else None
        self.failovers[broker_name] = Failover(
            broker_name, time.time(), why, took, old, None if new is None else int(new),
            int(res.header.get("masterEpoch") or 0))

    # -- brokers coming and going -----------------------------------------------------------------
    def connection_closed(self, conn: Any) -> None:
        for info in self.heartbeats.closed(conn):
            self._broker_inactive(info, "its heartbeat connection closed")

    def _broker_inactive(self, info: BrokerLive, why: str) -> None:
        g = self.state.groups.get(info.broker_name)
        log.warning("controller: broker %s/%s id %s (%s) is inactive: %s", info.cluster,
                    info.broker_name, info.broker_id, info.addr, why)
        if g is not None and g.master == info.broker_id and self.leading:
            self._suspects.setdefault(info.broker_name,
                                      (time.monotonic(), f"master {info.broker_id}: {why}"))
            self._spawn(self._trigger_elect(info.broker_name))

    async def _trigger_elect(self, broker_name: str) -> None:
        for _ in range(max(1, self.config.electMasterMaxRetryCount)):
            try:
                res = self.elect(broker_name, None, False)
            except OSError as exc:  # the journal could not make the decision durable
                log.error("controller: electing in %s failed: %s", broker_name, exc)
                await asyncio.sleep(0.5)
                continue
            if res.code in (R.SUCCESS, R.CONTROLLER_MASTER_STILL_EXIST):
                return
            if res.code in (R.CONTROLLER_MASTER_NOT_AVAILABLE, R.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED):
                log.warning("controller: %s has no master: %s", broker_name, res.remark)
                return
            await asyncio.sleep(0.5)

    async def _scan_heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.config.scanNotActiveBrokerInterval / 1000)
            if not self.leading:
                continue
            for info in self.heartbeats.expired(now_ms()):
                if info.conn is not None and hasattr(info.conn, "abort"):
                    info.conn.abort()
                self._broker_inactive(info, "its heartbeats expired")

    async def _scan_inactive_masters(self) -> None:
        while True:
            await asyncio.sleep(self.config.scanInactiveMasterInterval / 1000)
            if not self.leading:
                continue
            for name in self.state.need_reelect(self.alive):
                self._suspects.setdefault(name, (time.monotonic(), "the master is not alive "
                                                 "(found by the inactive-master scan)"))
                await self._trigger_elect(name)

    # -- telling brokers --------------------------------------------------------------------------
    def notify_role_changed(self, res: Result) -> None:
        body = res.body or {}
        group = body.get("brokerMemberGroup")
        master_id = res.header.get("masterBrokerId")
        if not group or master_id is None:
            return
        fields = {"masterAddress": res.header.get("masterAddress"),
                  "masterEpoch": res.header.get("masterEpoch"),
                  "syncStateSetEpoch": res.header.get("syncStateSetEpoch"),
                  "masterBrokerId": master_id}
        payload = dumps({"syncStateSet": body.get("syncStateSet", []),
                         "syncStateSetEpoch": res.header.get("syncStateSetEpoch")}).encode()
        for bid, addr in group["brokerAddrs"].items():
            if addr and self.alive(group["cluster"], group["brokerName"], int(bid)):
                cmd = RemotingCommand.request(Q.NOTIFY_BROKER_ROLE_CHANGED, fields, payload,
                                              oneway=True, language="JAVA")
                self._spawn(self._oneway(addr, cmd))

    async def _oneway(self, addr: str, cmd: RemotingCommand) -> None:
        assert self.pool is not None
        try:
            await self.pool.oneway(addr, cmd)
            self.notifications += 1
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            log.warning("controller: cannot notify %s of its role: %s", addr, exc)
