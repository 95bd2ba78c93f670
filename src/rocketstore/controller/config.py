"""``controller.conf``: RocketMQ 5's ``ControllerConfig`` keys, same names and meaning.

=============================  ===========  ====================================================
key                            default      meaning
=============================  ===========  ====================================================
listenPort                     19876        the port brokers and mqadmin call
listenHost                     127.0.0.1    (ours) the address bound and advertised as leader
controllerStorePath            ~/controller where decisions are made durable (journal+snapshot)
enableElectUncleanMaster       false        elect outside the SyncStateSet when none of it lives
                                            (may lose acknowledged messages)
notifyBrokerRoleChanged        true         tell a group's live members of a new master at once
                                            (NOTIFY_BROKER_ROLE_CHANGED), not only on their poll
scanNotActiveBrokerInterval    5000 ms      how often heartbeats are checked for expiry
scanInactiveMasterInterval     5000 ms      how often groups with a dead master and a live
                                            member are re-elected
electMasterMaxRetryCount       3            tries of a controller-triggered election
controllerDLegerGroup          (none)       the group name GET_CONTROLLER_METADATA answers
controllerDLegerSelfId         n0           the id GET_CONTROLLER_METADATA answers as leader
configBlackList                configBlackList;configStorePath;controllerStorePath
                                            keys UPDATE_CONTROLLER_CONFIG may not change
controllerType                 DLedger      ``etcd`` (ours): a replicated group whose leader and
                                            decisions live in etcd (``controller/etcd.py``);
                                            any other value: one controller, its own leader
etcdEndpoints                  (none)       (ours) the etcd members, ``host:port,host:port``
etcdKeyPrefix                  /rocketstore/controller/<controllerDLegerGroup>
                                            (ours) where the group keeps its keys
etcdLeaseSeconds               3            (ours) the leader's lease: a dead leader is replaced
                                            this long after its last renewal
=============================  ===========  ====================================================

Other RocketMQ keys (controllerDLegerPeers, metrics…) are accepted and echoed by
GET_CONTROLLER_CONFIG. Without ``controllerType=etcd`` a rocketstore controller is its own
leader, so ``controllerDLegerPeers`` naming more than one peer is refused there (three such
controllers would each decide alone); RocketMQ's DLedger and JRaft are not run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from ..config import parse_properties

_BOOL = {"enableElectUncleanMaster", "notifyBrokerRoleChanged"}
_INT = {"listenPort", "scanNotActiveBrokerInterval", "scanInactiveMasterInterval",
        "electMasterMaxRetryCount", "etcdLeaseSeconds"}


@dataclass
class ControllerConfig:
    listenPort: int = 19876
    listenHost: str = "127.0.0.1"
    controllerStorePath: str = field(default_factory=lambda: os.path.join(
        os.path.expanduser("~"), "controller"))
    enableElectUncleanMaster: bool = False
    notifyBrokerRoleChanged: bool = True
    scanNotActiveBrokerInterval: int = 5000
    scanInactiveMasterInterval: int = 5000
    electMasterMaxRetryCount: int = 3
    controllerDLegerGroup: str = "rocketstore"
    controllerDLegerSelfId: str = "n0"
    configBlackList: str = "configBlackList;configStorePath;controllerStorePath"
    controllerType: str = "DLedger"
    etcdEndpoints: str = ""
    etcdKeyPrefix: str = ""
    etcdLeaseSeconds: int = 3
    extra: dict[str, str] = field(default_factory=dict)  # keys we keep but do not act on

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "ControllerConfig":
        cfg = cls()
        cfg.update(props)
        return cfg

    @classmethod
    def load(cls, path: str) -> "ControllerConfig":
        with open(path, encoding="utf-8") as fh:
            return cls.from_properties(parse_properties(fh.read()))

    def update(self, props: dict[str, str]) -> None:
        """Set the keys given; raises ValueError naming a key whose value cannot be read."""
        known = {f.name for f in fields(self)} - {"extra"}
        for key, value in props.items():
            if key not in known:
                self.extra[key] = value
                continue
            if key in _BOOL:
                low = value.strip().lower()
                if low not in ("true", "false"):
                    raise ValueError(f"{key}: {value!r} is not true or false")
                setattr(self, key, low == "true")
            elif key in _INT:
                try:
                    n = int(value.strip())
                except ValueError:
                    raise ValueError(f"{key}: {value!r} is not an integer") from None
                if n < 0 or (key != "listenPort" and n == 0 and
                             (key.startswith("scan") or key == "etcdLeaseSeconds")):
                    raise ValueError(f"{key}: {value!r} must be positive")
                setattr(self, key, n)
            else:
                setattr(self, key, value.strip())

    @property
    def replicated(self) -> bool:
        return self.controllerType.strip().lower() == "etcd"

    def peers(self) -> list[tuple[str, str]]:
        """(id, host:port) of each ``controllerDLegerPeers`` entry (``n0-127.0.0.1:9878;...``)."""
        out = []
        for peer in self.extra.get("controllerDLegerPeers", "").split(";"):
            ident, _, addr = peer.strip().partition("-")
            if ident and addr:
                out.append((ident, addr))
        return out

    def check_group(self) -> None:
        """ValueError when the keys describe a group this controller cannot be part of."""
        if self.replicated:
            if not [e for e in self.etcdEndpoints.split(",") if e.strip()]:
                raise ValueError("controllerType=etcd needs etcdEndpoints (host:port,host:port)")
        elif len(self.peers()) > 1:
            raise ValueError(
                "controllerDLegerPeers names several controllers, but rocketstore does not run "
                "DLedger: set controllerType=etcd and etcdEndpoints for a replicated group")

    def black_list(self) -> set[str]:
        return {k.strip() for k in self.configBlackList.split(";") if k.strip()}

    def as_properties(self) -> dict[str, str]:
        out = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            out[f.name] = str(v).lower() if isinstance(v, bool) else str(v)
        out.update(self.extra)
        return out
