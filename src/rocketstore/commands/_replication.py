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
