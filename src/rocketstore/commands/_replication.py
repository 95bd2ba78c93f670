"""What ``rocketstore status`` adds for master/slave pairs: every broker address of the
cluster (slaves too, from GET_BROKER_CLUSTER_INFO) and, from the ``ha*`` keys of each broker's
runtime info, its role, each slave's lag in bytes and seconds, and STALLED for a slave that
stopped catching up (a RocketMQ broker reports none of these; it shows its role as "-")."""
from __future__ import annotations

import json
from typing import Any


def broker_targets(client: Any) -> list[dict]:
    """name, cluster, addr, id of every broker (masters first within a broker name)."""
    if not getattr(client._impl, "namesrv_addrs", None):
        return [{**b, "id": None} for b in client.brokers()]
    from ..remoting import fastjson
    from ..remoting.codes import RequestCode
    info = fastjson.loads(client._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    cluster_of = {b: c for c, names in (info.get("clusterAddrTable") or {}).items() for b in names}
    out = []
    for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
        for bid, addr in sorted((int(k), v) for k, v in (bd.get("brokerAddrs") or {}).items()):
            out.append({"name": name, "cluster": bd.get("cluster") or cluster_of.get(name, ""),
                        "addr": addr, "id": bid})
    return out


def replication(rt: dict[str, str]) -> dict | None:
    """The ``ha*`` runtime keys as one dict; None for a broker without them."""
    if "haRole" not in rt:
        return None
    out: dict[str, Any] = {"role": rt["haRole"],
                           "slaves": json.loads(rt["haSlaves"]) if rt.get("haSlaves") else []}
    if "haMasterAddress" in rt:
        out["master"] = {"address": rt.get("haMasterAddress") or None,
                         "connected": rt.get("haMasterConnected") == "true",
                         "last_frame_seconds_ago": rt.get("haLastFrameSecondsAgo"),
                         "last_error": rt.get("haLastError")}
    return out


def replication_lines(rep: dict | None) -> list[str]:
    if rep is None:
        return []
    lines = [f"  {'role':<26} {rep['role']}"]
    for s in rep["slaves"]:
        flag = ""
        if s["stalled"]:
            flag = "  STALLED" + (" (behind the master's oldest file)" if s.get("behind_oldest_file") else "")
        lines.append(f"  slave {s['address']}: acked {s['acked_offset']}, lag {s['lag_bytes']} bytes, "
                     f"{s['lag_seconds']:.3f} s{flag}")
    m = rep.get("master")
    if m is not None:
        state = "connected" if m["connected"] else f"NOT connected ({m.get('last_error') or '-'})"
        lines.append(f"  master {m['address'] or '-'}: {state}")
    return lines


# -- controller mode ----------------------------------------------------------------------------
def controller_groups(controller: str, names: list[str], metrics_url: str | None = None) -> dict:
    """Each named broker group as the controller sees it (CONTROLLER_GET_SYNC_STATE_DATA, asked
    of each address in turn until one answers: a follower refuses with "not in leader state"):
    master id, address and epoch, the SyncStateSet and its epoch, each replica alive or not;
    with our controller's ``/metrics``, also each group's last failover."""
    import click

    from ..client.admin import AdminClient
    from ..client.transport import parse_addrs
    from ..errors import BrokerError
    from ..remoting import fastjson
    from ..remoting.controller_codes import ControllerRequest
    try:
        addrs = parse_addrs(controller, "controller")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    refusals = []
    for addr in addrs:
        try:
            with AdminClient(broker=addr) as c:
                resp = c.call(addr, ControllerRequest.CONTROLLER_GET_SYNC_STATE_DATA, {},
                              json.dumps(names).encode())
        except (ConnectionError, TimeoutError, OSError, BrokerError) as exc:
            refusals.append(f"{addr}: {exc}")
            continue
        table = (fastjson.loads(resp.body) if resp.body else {}).get("replicasInfoTable") or {}
        out = {"address": addr, "groups": dict(sorted(table.items()))}
        if metrics_url:
            for name, f in last_failovers(metrics_url).items():
                if name in out["groups"]:
                    out["groups"][name]["lastFailover"] = f
        return out
    raise click.ClickException("no controller answered: " + "; ".join(refusals))


def last_failovers(url: str) -> dict[str, dict]:
    """broker name -> the last failover our controller's ``/metrics`` reports (from, to, epoch,
    reason, when, how long), read with prometheus_client's text parser."""
    import urllib.request

    import click
    from prometheus_client.parser import text_string_to_metric_families
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode("utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot read {url}: {exc}") from exc
    out: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.labels.get("broker_name")
            if name is None:
                continue
            f = out.setdefault(name, {})
            if s.name == "rocketstore_controller_last_failover_info":
                f.update({"fromId": int(s.labels["from_id"]) if s.labels["from_id"] else None,
                          "toId": int(s.labels["to_id"]) if s.labels["to_id"] else None,
                          "epoch": int(s.labels["epoch"]), "reason": s.labels["reason"]})
            elif s.name == "rocketstore_controller_last_failover_timestamp_seconds":
                f["at"] = s.value
            elif s.name == "rocketstore_controller_last_failover_seconds":
                f["tookSeconds"] = s.value
    return {k: v for k, v in out.items() if v}


def controller_lines(controller: str, groups: dict) -> list[str]:
    from datetime import datetime
    lines = [f"controller {groups['address']}"]
    if not groups["groups"]:
        lines.append("  no broker group of the name server is known to it")

    def rep(r: dict) -> str:
        return f"{r['brokerId']} {r['brokerAddress']}" + ("" if r.get("alive") else " (down)")
    for name, g in groups["groups"].items():
        master = g.get("masterBrokerId")
        lines.append(f"  group {name}: master "
                     + (f"{master} {g.get('masterAddress')}" if master not in (None, -1)
                        else "none") + f", epoch {g.get('masterEpoch')}")
        lines.append(f"    SyncStateSet (epoch {g.get('syncStateSetEpoch')}): "
                     + ", ".join(rep(r) for r in g.get("inSyncReplicas") or []))
        if g.get("notInSyncReplicas"):
            lines.append("    not in sync: " + ", ".join(rep(r) for r in g["notInSyncReplicas"]))
        f = g.get("lastFailover")
        if f and f.get("at"):
            took = f" in {f['tookSeconds']:.3f} s" if "tookSeconds" in f else ""
            lines.append(f"    last failover: {datetime.fromtimestamp(f['at']):%Y-%m-%d %H:%M:%S}"
                         f", {f.get('fromId')} -> {f.get('toId')} (epoch {f.get('epoch')}, "
                         f"{f.get('reason')}){took}")
    return lines
