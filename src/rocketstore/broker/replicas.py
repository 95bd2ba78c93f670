"""The broker side of controller mode (RocketMQ 5's ``broker/controller/ReplicasManager``):
a persistent broker id, registration, heartbeats, and the role the controller gives.

Theory of operation. ``ReplicasManager`` talks to the controller leader (found with
GET_CONTROLLER_METADATA 1005 among ``controllerAddr``, again every
``syncControllerMetadataPeriod``) over one connection, the header fields being those our own
controller's processors read (``controller/processors.py``):

1. the broker id: the ``brokerIdentity`` file (``cluster#brokerName#id``, RocketMQ's
   ``BrokerMetadata``) when there is one; else a temporary ``brokerIdentity-temp``
   (``...#id#registerCheckCode``) for the id CONTROLLER_GET_NEXT_BROKER_ID (1012) offered, the
   id applied with CONTROLLER_APPLY_BROKER_ID (1013), then the final file, the temporary one
   removed — a broker that dies in between applies the same id with the same check code again;
2. CONTROLLER_REGISTER_BROKER (1003), a heartbeat, and CONTROLLER_ELECT_MASTER (1002) when the
   group has no master;
3. BROKER_HEARTBEAT (904, oneway) every ``brokerHeartbeatInterval`` with the last epoch, max
   and confirm offsets and ``brokerElectionPriority``; GET_REPLICA_INFO (1004) every
   ``syncBrokerMetadataPeriod``; NOTIFY_BROKER_ROLE_CHANGED (1008) pushed by the controller is
   taken at once (``notify_handler``). A higher master epoch means a new role (``Role``);
4. on a master, every ``checkSyncStateSetPeriod`` the HA's ``maybe_shrink`` and, when a slave
   caught up, its ``on_expand`` proposal go to CONTROLLER_ALTER_SYNC_STATE_SET (1001).

How a role is served is ``commands/serve_controller.py``'s business: a slave named master is
promoted in place (``Broker.promote``); other changes restart the broker in the process with
the new role (store closed and reopened, so the put path, slave refusals, name server
registration with brokerId 0 or the own id, timer, transaction checks and pop revive are
exactly those of a master or a slave).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..remoting.controller_codes import ControllerRequest as Q
from ..remoting.controller_codes import ControllerResponse as R
from ..remoting.command import RemotingCommand
from ..remoting.fastjson import dumps, loads
from .namesrv.registration import _Channel

log = logging.getLogger(__name__)


def _b(v: Any, default: bool = False) -> bool:
    return default if v is None else str(v).strip().lower() == "true"


@dataclass
class ControllerModeConfig:
    """RocketMQ 5's broker.conf keys of controller mode, their defaults."""
    controller_addrs: list[str]
    sync_broker_metadata_period: int = 5000
    check_sync_state_set_period: int = 5000
    sync_controller_metadata_period: int = 10_000
    ha_max_time_slave_not_catchup: int = 15_000
    store_path_epoch_file: str | None = None
    store_path_broker_identity: str | None = None
    all_ack_in_sync_state_set: bool = False
    sync_from_last_file: bool = False
    async_learner: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    broker_election_priority: int = 2**31 - 1
    broker_heartbeat_interval: int = 1000
    controller_heartbeat_timeout_mills: int = 10_000

    KEYS = ("enableControllerMode", "controllerAddr", "syncBrokerMetadataPeriod",
            "checkSyncStateSetPeriod", "syncControllerMetadataPeriod", "haMaxTimeSlaveNotCatchup",
            "storePathEpochFile", "storePathBrokerIdentity", "allAckInSyncStateSet",
            "syncFromLastFile", "asyncLearner", "inSyncReplicas", "minInSyncReplicas",
            "brokerElectionPriority", "brokerHeartbeatInterval",
            "controllerHeartBeatTimeoutMills", "fetchControllerAddrByDnsLookup")

    @classmethod
    def from_conf(cls, extra: dict[str, str]) -> "ControllerModeConfig":
        addrs = [a.strip() for a in str(extra.get("controllerAddr", "")).split(";") if a.strip()]
        if not addrs:
            raise ValueError("enableControllerMode=true needs controllerAddr (HOST:PORT;...)")
        for a in addrs:
            host, sep, port = a.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"controllerAddr {a!r}: want HOST:PORT")

        def num(key: str, default: int, low: int = 1) -> int:
            raw = extra.get(key)
            if raw is None or str(raw).strip() == "":
                return default
            try:
                v = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{key}={raw!r}: not a number") from None
            if v < low:
                raise ValueError(f"{key}={v}: must be at least {low}")
            return v
        return cls(addrs,
                   num("syncBrokerMetadataPeriod", 5000), num("checkSyncStateSetPeriod", 5000),
                   num("syncControllerMetadataPeriod", 10_000),
                   num("haMaxTimeSlaveNotCatchup", 15_000),
                   extra.get("storePathEpochFile") or None,
                   extra.get("storePathBrokerIdentity") or None,
                   _b(extra.get("allAckInSyncStateSet")), _b(extra.get("syncFromLastFile")),
                   _b(extra.get("asyncLearner")), num("inSyncReplicas", 1),
                   num("minInSyncReplicas", 1), num("brokerElectionPriority", 2**31 - 1, 0),
                   num("brokerHeartbeatInterval", 1000),
                   num("controllerHeartBeatTimeoutMills", 10_000))

    def epoch_path(self, store_root: str) -> str:
        return self.store_path_epoch_file or os.path.join(store_root, "epochFileCheckpoint")

    def identity_path(self, store_root: str) -> str:
        return self.store_path_broker_identity or os.path.join(store_root, "brokerIdentity")


@dataclass
class Role:
    master_id: int
    master_addr: str
    master_epoch: int
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0


class ControllerError(Exception):
    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"controller answered {code}: {remark}")
        self.code = code


class IdentityMismatch(Exception):
    """The store's broker identity names another cluster or broker group: not started."""


# -- the broker identity files (RocketMQ's BrokerMetadata / TempBrokerMetadata) -------------------
def read_identity(path: str) -> list[str] | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        parts = fh.read().strip().split("#")
    return parts if len(parts) >= 3 and all(parts[:3]) else None


def write_identity(path: str, parts: list[str]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("#".join(parts))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class ReplicasManager:
    def __init__(self, cfg: ControllerModeConfig, cluster: str, broker_name: str,
                 broker_addr: str, store_root: str) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.store_root = store_root
        self.broker_id: int | None = None
        self.leader: str | None = None
        self._ch: _Channel | None = None
        self._hb: dict[str, _Channel] = {}  # heartbeat channels, one per controllerAddr entry
        self.role: Role | None = None
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = 0
        self.role_changed = asyncio.Event()
        self.ha: Any = None  # the running store's AutoSwitchHAService (serve sets it)
        self.last_failover: dict | None = None
        self._tasks: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.timeout_s = 3.0

    # -- talking to the controller --------------------------------------------------------------
    async def _channel(self) -> _Channel:
        if self.leader is None:
            await self.find_leader()
        assert self.leader is not None
        if self._ch is None or self._ch.addr != self.leader:
            if self._ch is not None:
                self._ch.close()
            self._ch = _Channel(self.leader)
        return self._ch

    async def call(self, code: int, fields: dict, body: bytes = b"",
                   ok: tuple[int, ...] = (R.SUCCESS,)) -> RemotingCommand:
        ch = await self._channel()
        cmd = RemotingCommand.request(code, {k: v for k, v in fields.items() if v is not None},
                                      body, language="JAVA")
        try:
            resp = await ch.invoke(cmd, self.timeout_s)
        except (OSError, ConnectionError, asyncio.TimeoutError):
            ch.close()
            self.leader = None
            raise
        if resp.code not in ok:
            raise ControllerError(resp.code, resp.remark)
        return resp

    async def find_leader(self) -> str:
        last: Exception | None = None
        for addr in self.cfg.controller_addrs:
            ch = _Channel(addr)
            try:
                resp = await ch.invoke(RemotingCommand.request(Q.CONTROLLER_GET_METADATA_INFO, {},
                                                               language="JAVA"), self.timeout_s)
                leader = resp.get_str("controllerLeaderAddress")
                if resp.code == R.SUCCESS and leader:
                    self.leader = leader
                    return leader
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                last = exc
            finally:
                ch.close()
        raise ConnectionError(f"no controller leader at {';'.join(self.cfg.controller_addrs)}"
                              + (f": {last}" if last else ""))

    # -- start ----------------------------------------------------------------------------------
    async def start(self) -> Role:
        """Register (retrying while no controller answers) and return the first role."""
        self._loop = asyncio.get_running_loop()
        delay = 0.5
        while True:
            try:
                await self._register_id()
                await self._register()
                await self.heartbeat()
                if self.role is None:
                    await self.elect()
                if self.role is not None:
                    break
            except (OSError, ConnectionError, asyncio.TimeoutError, ControllerError) as exc:
                log.warning("controller mode: registering with %s failed: %s",
                            ";".join(self.cfg.controller_addrs), exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 3.0)
        self._tasks = [self._loop.create_task(self._heartbeats(), name="controller-heartbeat"),
                       self._loop.create_task(self._sync_metadata(), name="controller-sync"),
                       self._loop.create_task(self._check_sync_state_set(), name="sss-check")]
        self.role_changed.clear()
        return self.role

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self._ch is not None:
            self._ch.close()
        for ch in self._hb.values():
            ch.close()
        self._hb.clear()

    async def _register_id(self) -> None:
        if self.broker_id is not None:
            return
        path = self.cfg.identity_path(self.store_root)
        got = read_identity(path)
        if got is not None:
            self._check_identity(got, path)
            self.broker_id = int(got[2])
            return
        temp = path + "-temp"
        tgot = read_identity(temp)
        if tgot is not None and len(tgot) >= 4:
            self._check_identity(tgot, temp)
            bid, code = int(tgot[2]), "#".join(tgot[3:])
        else:
            resp = await self.call(Q.CONTROLLER_GET_NEXT_BROKER_ID,
                                   {"clusterName": self.cluster, "brokerName": self.broker_name})
            bid = int(resp.require_int("nextBrokerId"))
            code = f"{self.broker_addr};{int(time.time() * 1000)}"
            write_identity(temp, [self.cluster, self.broker_name, str(bid), code])
        try:
            await self.call(Q.CONTROLLER_APPLY_BROKER_ID,
                            {"clusterName": self.cluster, "brokerName": self.broker_name,
                             "appliedBrokerId": bid, "registerCheckCode": code})
        except ControllerError:
            os.remove(temp)  # the id went to another replica: ask for the next one
            raise
        write_identity(path, [self.cluster, self.broker_name, str(bid)])
        os.remove(temp)
        self.broker_id = bid
        log.warning("controller mode: broker id %d applied (%s)", bid, path)

    def _check_identity(self, parts: list[str], path: str) -> None:
        if parts[0] != self.cluster or parts[1] != self.broker_name:
            raise IdentityMismatch(f"{path} belongs to {parts[0]}/{parts[1]}, not "
                                   f"{self.cluster}/{self.broker_name}: wrong store directory?")

    def _role_from(self, resp: RemotingCommand, body: Any) -> Role | None:
        mid = resp.get_int("masterBrokerId")
        addr = resp.get_str("masterAddress")
        epoch = resp.get_int("masterEpoch")
        if mid is None or not addr or epoch is None:
            return None
        sss = set()
        sss_epoch = resp.get_int("syncStateSetEpoch") or 0
        if isinstance(body, dict):
            sss = {int(x) for x in body.get("syncStateSet") or []}
            sss_epoch = int(body.get("syncStateSetEpoch") or sss_epoch)
        return Role(mid, addr, epoch, sss, sss_epoch)

    async def _register(self) -> None:
        resp = await self.call(Q.CONTROLLER_REGISTER_BROKER,
                               {"clusterName": self.cluster, "brokerName": self.broker_name,
                                "brokerId": self.broker_id, "brokerAddress": self.broker_addr,
                                "invokeTime": int(time.time() * 1000)})
        role = self._role_from(resp, loads(resp.body) if resp.body else None)
        if role is not None:
            self.offer(role, "register")

    async def elect(self) -> None:
        resp = await self.call(Q.CONTROLLER_ELECT_MASTER,
                               {"clusterName": self.cluster, "brokerName": self.broker_name,
                                "brokerId": self.broker_id, "designateElect": False,
                                "invokeTime": int(time.time() * 1000)},
                               ok=(R.SUCCESS, R.CONTROLLER_MASTER_STILL_EXIST))
        body = loads(resp.body) if resp.body else None
        role = self._role_from(resp, body)
        if role is not None:
            self.offer(role, "elect")

    # -- roles ----------------------------------------------------------------------------------
    def offer(self, role: Role, source: str) -> None:
        """A role from the controller: taken when its master epoch is newer."""
        cur = self.role
        if cur is None or role.master_epoch > cur.master_epoch:
            log.warning("controller mode (%s): broker %s is master, epoch %d (we are %s)",
                        source, role.master_id, role.master_epoch, self.broker_id)
            if cur is not None:
                self.last_failover = {"time_ms": int(time.time() * 1000), "source": source,
                                      "from": cur.master_id, "to": role.master_id,
                                      "epoch": role.master_epoch}
            self.role = role
            self.sync_state_set, self.sync_state_set_epoch = (set(role.sync_state_set),
                                                              role.sync_state_set_epoch)
            self.role_changed.set()
        elif cur is not None and role.master_epoch == cur.master_epoch and self.is_master \
                and role.sync_state_set_epoch > self.sync_state_set_epoch:
            self._take_sync_state_set(role.sync_state_set, role.sync_state_set_epoch)

    @property
    def is_master(self) -> bool:
        return self.role is not None and self.role.master_id == self.broker_id

    def _take_sync_state_set(self, members: set[int], epoch: int) -> None:
        if epoch > self.sync_state_set_epoch:
            self.sync_state_set, self.sync_state_set_epoch = set(members), epoch
            if self.ha is not None:
                self.ha.set_sync_state_set(self.sync_state_set)
            log.warning("controller mode: SyncStateSet %s (epoch %d)", sorted(members), epoch)

    async def notify_handler(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        """NOTIFY_BROKER_ROLE_CHANGED (1008) from the controller."""
        body = None
        if cmd.body:
            try:
                body = loads(cmd.body)
            except ValueError:
                body = None
        role = self._role_from(cmd, body)
        if role is not None:
            self.offer(role, "notify")
        return None if cmd.is_oneway else cmd.response(R.SUCCESS)

    # -- loops ----------------------------------------------------------------------------------
    def heartbeat_fields(self) -> dict:
        ha = self.ha
        epoch, top, confirm = -1, 0, 0
        if ha is not None:
            epoch, top, confirm = ha.epochs.last_epoch(), ha.commitlog.max_offset(), ha.confirm_offset
        return {"clusterName": self.cluster, "brokerAddr": self.broker_addr,
                "brokerName": self.broker_name, "brokerId": self.broker_id, "epoch": epoch,
                "maxOffset": top, "confirmOffset": confirm,
                "heartbeatTimeoutMills": self.cfg.controller_heartbeat_timeout_mills,
                "electionPriority": self.cfg.broker_election_priority}

    async def heartbeat(self) -> None:
        """One oneway BROKER_HEARTBEAT to every address of ``controllerAddr``, as RocketMQ 5's
        ReplicasManager sends them (not only to the leader: every controller of a group keeps
        liveness, so a new leader knows at once who lives). ConnectionError when none took it."""
        fields = self.heartbeat_fields()

        async def one(addr: str) -> Exception | None:
            ch = self._hb.get(addr)
            if ch is None:
                ch = self._hb[addr] = _Channel(addr)
            try:
                if not ch.alive:  # a dead or cut-off controller delays no other one
                    await ch.open(self.timeout_s)
                assert ch.writer is not None
                ch.writer.write(ch.codec.send(RemotingCommand.request(
                    Q.BROKER_HEARTBEAT, fields, oneway=True, language="JAVA")))
                return None
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                ch.close()
                return exc
        errors = await asyncio.gather(*(one(a) for a in self.cfg.controller_addrs))
        if all(e is not None for e in errors):
            last = errors[-1]
            raise ConnectionError(f"no controller took the heartbeat: {last}")

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.broker_heartbeat_interval / 1000.0)
            try:
                await self.heartbeat()
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                log.warning("controller mode: heartbeat failed: %s", exc)
                self.leader = None

    async def _sync_metadata(self) -> None:
        last_leader_check = time.monotonic()
        while True:
            await asyncio.sleep(self.cfg.sync_broker_metadata_period / 1000.0)
            try:
                if time.monotonic() - last_leader_check > \
                        self.cfg.sync_controller_metadata_period / 1000.0:
                    await self.find_leader()
                    last_leader_check = time.monotonic()
                resp = await self.call(Q.CONTROLLER_GET_REPLICA_INFO,
                                       {"brokerName": self.broker_name})
                body = loads(resp.body) if resp.body else None
                role = self._role_from(resp, body)
                if role is not None:
                    self.offer(role, "poll")
                else:
                    await self.elect()  # no master in the controller: ask to be elected
            except ControllerError as exc:
                if exc.code == R.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    try:
                        await self._register()
                    except Exception as exc2:  # noqa: BLE001
                        log.warning("controller mode: re-register failed: %s", exc2)
                else:
                    log.warning("controller mode: %s", exc)
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                log.warning("controller mode: replica info failed: %s", exc)

    async def _check_sync_state_set(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.check_sync_state_set_period / 1000.0)
            if not self.is_master or self.ha is None or not self.ha.settings.is_master:
                continue
            new = self.ha.maybe_shrink()
            if new != self.sync_state_set:
                await self.alter_sync_state_set(new)

    def shrink_from_ha(self) -> None:
        """A SyncStateSet member's HA connection closed (from the HA's threads): check the set
        now rather than at the next checkSyncStateSetPeriod."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._shrink_now()))

    async def _shrink_now(self) -> None:
        if self.is_master and self.ha is not None and self.ha.settings.is_master:
            new = self.ha.maybe_shrink()
            if new != self.sync_state_set:
                await self.alter_sync_state_set(new)

    def expand_from_ha(self, new: set[int]) -> None:
        """The HA's proposal (from its threads) to add a caught-up slave."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(lambda: loop.create_task(self._expand(new)))

    async def _expand(self, new: set[int]) -> None:
        ok = await self.alter_sync_state_set(new)
        if not ok and self.ha is not None:
            for sid in new - self.sync_state_set:
                self.ha.expand_failed(sid)

    async def alter_sync_state_set(self, new: set[int]) -> bool:
        if not self.is_master or self.role is None:
            return False
        try:
            resp = await self.call(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                                   {"brokerName": self.broker_name,
                                    "masterBrokerId": self.broker_id,
                                    "masterEpoch": self.role.master_epoch,
                                    "invokeTime": int(time.time() * 1000)},
                                   dumps({"syncStateSet": sorted(new),
                                          "syncStateSetEpoch": self.sync_state_set_epoch}).encode())
        except (ControllerError, OSError, ConnectionError, asyncio.TimeoutError) as exc:
            log.warning("controller mode: SyncStateSet %s -> %s refused: %s",
                        sorted(self.sync_state_set), sorted(new), exc)
            return False
        body = loads(resp.body) if resp.body else {}
        epoch = int(resp.get_int("newSyncStateSetEpoch") or body.get("syncStateSetEpoch") or 0)
        self._take_sync_state_set({int(x) for x in body.get("syncStateSet", new)}, epoch)
        return True


def ha_address(remoting_addr: str) -> str:
    """A broker's HA socket: listenPort + 1 (RocketMQ's default and ours)."""
    host, _, port = remoting_addr.rpartition(":")
    return f"{host}:{int(port) + 1}"


def epoch_cache_body(rm: ReplicasManager, ha: Any) -> bytes:
    """GET_BROKER_EPOCH_CACHE (1007)'s answer: RocketMQ's EpochEntryCache."""
    entries = ha.epochs.entries() if ha is not None else []
    top = ha.commitlog.max_offset() if ha is not None else 0
    return dumps({"brokerId": rm.broker_id, "brokerName": rm.broker_name,
                  "clusterName": rm.cluster, "maxOffset": top,
                  "epochList": [{"epoch": e.epoch, "startOffset": e.start_offset,
                                 "endOffset": e.end_offset}
                                for e in entries]}).encode()


Wrap = Callable[[dict], dict]
