"""The replicated controller group on etcd (``controllerType=etcd``): one leader among several
``rocketstore controller`` nodes, its decisions in etcd, so the group survives any one node.

RocketMQ replicates its controller with DLedger or JRaft inside the controller processes; we put
the consensus where an operator already runs it, in an etcd cluster (Debian's ``etcd-server``),
and keep the controller itself a small stateless-on-disk process. Keys, under ``etcdKeyPrefix``
(default ``/rocketstore/controller/<controllerDLegerGroup>``)::

    <prefix>/leader          {"id": selfId, "address": host:port}, attached to the leader's lease
    <prefix>/snapshot        {"format": 1, "seq": N, "state": ReplicasInfo.to_json()}
    <prefix>/log/<seq:020d>  {"seq": n, "events": [Event, ...]}     one decision each

Theory of operation. Each node campaigns: it grants itself a lease of ``etcdLeaseSeconds`` and
creates ``leader`` with it only if the key does not exist (one etcd transaction), then keeps the
lease alive every third of its TTL. The winner loads the snapshot and replays the log records
above it — the same events the single-node journal (``journal.py``) writes — and only then
answers as leader. Every decision is one transaction that writes ``log/<seq+1>`` **only if
``leader`` is still attached to this node's lease and that record does not exist yet**: a leader
that lost its lease (paused, cut off from etcd) cannot write, even if it has not noticed yet, so
two leaders never both decide. A failed write or a lease that cannot be renewed makes the node
step down at once; it answers CONTROLLER_NOT_LEADER (2007, RocketMQ's remark) to everything but
heartbeats, GET_CONTROLLER_METADATA (which names the leader, so brokers and mqadmin find it) and
the config requests, and campaigns again. Compaction writes the snapshot and removes the records
it covers in one guarded transaction.

etcd is reached through its JSON gateway with ``etcd3gw``; each call tries the endpoints of
``etcdEndpoints`` in turn, so one etcd member may die as well.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, TypeVar

from .state import Event, ReplicasInfo

log = logging.getLogger(__name__)
T = TypeVar("T")
NOT_LEADER_REMARK = "The controller is not in leader state"


class EtcdUnavailable(OSError):
    """No endpoint of ``etcdEndpoints`` answered, or etcd refused the request."""


class NotLeader(OSError):
    """A guarded write was refused: this node's lease no longer holds the leader key."""


def _b64(data: str | bytes) -> str:
    from etcd3gw.utils import _encode
    return _encode(data)


class EtcdClient:
    """The calls the group needs, over every endpoint in turn."""

    def __init__(self, endpoints: list[str], timeout_s: float = 2.0) -> None:
        from etcd3gw.client import Etcd3Client

        if not endpoints:
            raise ValueError("etcdEndpoints: at least one host:port is needed")
        self.clients = []
        for ep in endpoints:
            proto, _, rest = ep.rpartition("://")
            host, _, port = rest.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"etcdEndpoints: {ep!r} is not host:port")
            self.clients.append(Etcd3Client(host=host, port=int(port), protocol=proto or "http",
                                            timeout=timeout_s))
        self._first = 0
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], T]) -> T:
        from etcd3gw.exceptions import Etcd3Exception
        from requests.exceptions import RequestException

        errors = []
        with self._lock:
            start = self._first
        for i in range(len(self.clients)):
            k = (start + i) % len(self.clients)
            try:
                out = fn(self.clients[k])
            except (Etcd3Exception, RequestException, OSError, ValueError, KeyError) as exc:
                errors.append(f"{self.clients[k].host}:{self.clients[k].port}: "
                              f"{type(exc).__name__}: {str(exc)[:200]}")
                continue
            with self._lock:
                self._first = k
            return out
        raise EtcdUnavailable("etcd: no endpoint answered (" + "; ".join(errors) + ")")

    def txn(self, compare: list[dict], success: list[dict],
            failure: list[dict] | None = None) -> dict:
        body: dict[str, Any] = {"compare": compare, "success": success}
        if failure:
            body["failure"] = failure
        return self.call(lambda c: c.transaction(body))

    def get(self, key: str) -> bytes | None:
        found = self.call(lambda c: c.get(key))
        return found[0] if found else None

    def get_prefix(self, prefix: str) -> list[tuple[str, bytes]]:
        rows = self.call(lambda c: c.get_prefix(prefix, sort_order="ascend", sort_target="key"))
        return [(meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"], value)
                for value, meta in rows]

    def grant(self, ttl_s: int) -> int:
        return self.call(lambda c: c.lease(ttl_s)).id

    def keepalive(self, lease_id: int) -> int:
        res = self.call(lambda c: c.post(c.get_url("/lease/keepalive"), json={"ID": lease_id}))
        return int(res.get("result", {}).get("TTL", -1))

    def revoke(self, lease_id: int) -> None:
        self.call(lambda c: c.post(c.get_url("/kv/lease/revoke"), json={"ID": lease_id}))


class EtcdGroup:
    """Leadership (``campaign``/``keepalive``/``leader``) and the replicated decision log, whose
    ``open``/``append``/``maybe_compact``/``snapshot``/``close`` have the single-node
    ``Journal``'s face, so the service commits through either the same way."""

    def __init__(self, client: EtcdClient, prefix: str, self_id: str, address: str,
                 lease_s: int = 3, compact_records: int = 1000) -> None:
        self.client = client
        self.prefix = prefix.rstrip("/")
        self.self_id = self_id
        self.address = address
        self.lease_s = max(1, lease_s)
        self.compact_records = compact_records
        self.lease_id: int | None = None
        self.seq = 0
        self.snapshot_seq = 0
        self.replayed = 0
        self.broken: str | None = None  # (the Journal's face; etcd refuses, it never half-writes)

    # -- keys ---------------------------------------------------------------------------------
    @property
    def leader_key(self) -> str:
        return f"{self.prefix}/leader"

    def _log_key(self, seq: int) -> str:
        return f"{self.prefix}/log/{seq:020d}"

    def _fence(self) -> list[dict]:
        """The guard of every write: ``leader`` is still held by this node's lease."""
        if self.lease_id is None:
            raise NotLeader(NOT_LEADER_REMARK)
        return [{"key": _b64(self.leader_key), "target": "LEASE", "result": "EQUAL",
                 "lease": self.lease_id}]

    # -- leadership ---------------------------------------------------------------------------
    def campaign(self) -> bool:
        """Try to become the leader (blocking etcd calls); True when this node now leads."""
        lease = self.client.grant(self.lease_s)
        me = json.dumps({"id": self.self_id, "address": self.address})
        res = self.client.txn(
            [{"key": _b64(self.leader_key), "target": "CREATE", "result": "EQUAL",
              "create_revision": 0}],
            [{"request_put": {"key": _b64(self.leader_key), "value": _b64(me), "lease": lease}}])
        if res.get("succeeded"):
            self.lease_id = lease
            return True
        try:
            self.client.revoke(lease)
        except EtcdUnavailable:
            pass  # it expires by itself
        return False

    def keepalive(self) -> bool:
        """Renew the lease; False when it is gone (this node is no longer the leader)."""
        if self.lease_id is None:
            return False
        return self.client.keepalive(self.lease_id) > 0

    def resign(self) -> None:
        lease, self.lease_id = self.lease_id, None
        if lease is not None:
            try:
                self.client.revoke(lease)
            except EtcdUnavailable:
                pass

    def leader(self) -> tuple[str, str] | None:
        """(id, address) of the current leader, or None while there is none."""
        raw = self.client.get(self.leader_key)
        if raw is None:
            return None
        try:
            d = json.loads(raw)
            return str(d["id"]), str(d["address"])
        except (ValueError, KeyError, TypeError):
            return None

    # -- the decision log (the Journal's face) ---------------------------------------------------
    def open(self) -> ReplicasInfo:
        state = ReplicasInfo()
        self.seq = self.snapshot_seq = self.replayed = 0
        raw = self.client.get(f"{self.prefix}/snapshot")
        if raw is not None:
            d = json.loads(raw)
            state = ReplicasInfo.from_json(d["state"])
            self.seq = self.snapshot_seq = int(d["seq"])
        for _key, value in self.client.get_prefix(f"{self.prefix}/log/"):
            rec = json.loads(value)
            if int(rec["seq"]) <= self.seq:
                continue  # covered by the snapshot (a compaction's records not removed yet)
            if int(rec["seq"]) != self.seq + 1:
                raise ValueError(f"etcd {self.prefix}/log: record {rec['seq']} follows {self.seq}")
            for ev in rec["events"]:
                state.apply(ev)
            self.seq = int(rec["seq"])
            self.replayed += 1
        return state

    def append(self, events: list[Event]) -> None:
        if not events:
            return
        key = self._log_key(self.seq + 1)
        payload = json.dumps({"seq": self.seq + 1, "events": events}, separators=(",", ":"))
        guard = self._fence() + [{"key": _b64(key), "target": "CREATE", "result": "EQUAL",
                                  "create_revision": 0}]
        res = self.client.txn(guard, [{"request_put": {"key": _b64(key), "value": _b64(payload)}}])
        if not res.get("succeeded"):
            self.lease_id = None
            raise NotLeader(f"{NOT_LEADER_REMARK} (its lease no longer holds {self.leader_key})")
        self.seq += 1

    def size(self) -> int:
        return self.seq - self.snapshot_seq

    def maybe_compact(self, state: ReplicasInfo) -> bool:
        if self.size() < self.compact_records:
            return False
        self.snapshot(state)
        return True

    def snapshot(self, state: ReplicasInfo) -> None:
        doc = json.dumps({"format": 1, "seq": self.seq, "state": state.to_json()})
        res = self.client.txn(self._fence(), [
            {"request_put": {"key": _b64(f"{self.prefix}/snapshot"), "value": _b64(doc)}},
            {"request_delete_range": {"key": _b64(self._log_key(0)),
                                      "range_end": _b64(self._log_key(self.seq + 1))}}])
        if not res.get("succeeded"):
            self.lease_id = None
            raise NotLeader(NOT_LEADER_REMARK)
        self.snapshot_seq = self.seq

    def close(self) -> None:
        self.resign()
