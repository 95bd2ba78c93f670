"""``rocketstore status``: every broker of a cluster (or one broker) with its role and, for
master/slave pairs, each slave's replication lag in bytes and seconds; a slave that stopped
catching up is flagged STALLED.

    rocketstore status --namesrv 127.0.0.1:9876 [--json]
    rocketstore status --broker 127.0.0.1:10911

It reads GET_BROKER_CLUSTER_INFO from the name server and GET_BROKER_RUNTIME_INFO from each
broker (the ``ha*`` keys rocketstore adds; a RocketMQ broker has none and shows "-").
"""
from __future__ import annotations

import json

import click

from ._common import emit_json, json_option


def _rows(admin, namesrv: str | None, broker: str | None) -> list[dict]:
    from ..remoting import fastjson
    from ..remoting.codes import RequestCode

    if broker:
        targets = [("", "", -1, broker)]
    else:
        info = fastjson.loads(admin._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        cluster_of = {b: c for c, names in (info.get("clusterAddrTable") or {}).items() for b in names}
        targets = []
        for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
            for bid, addr in sorted(((int(k), v) for k, v in (bd.get("brokerAddrs") or {}).items())):
                targets.append((bd.get("cluster") or cluster_of.get(name, ""), name, bid, addr))
    rows = []
    for cluster, name, bid, addr in targets:
        row = {"cluster": cluster, "broker": name, "id": bid, "addr": addr}
        try:
            rt = admin.runtime_info(addr)
        except Exception as exc:  # noqa: BLE001 - one unreachable broker is a row, not a failure
            row["error"] = str(exc)
            rows.append(row)
            continue
        row["role"] = rt.get("haRole", "-")
        row["commitlog_max_offset"] = int(rt.get("commitLogMaxOffset", "0") or 0)
        row["slaves"] = json.loads(rt["haSlaves"]) if rt.get("haSlaves") else []
        if "haMasterAddress" in rt:
            row["master"] = {"address": rt.get("haMasterAddress"),
                             "connected": rt.get("haMasterConnected") == "true",
                             "last_frame_seconds_ago": rt.get("haLastFrameSecondsAgo"),
                             "last_error": rt.get("haLastError")}
        rows.append(row)
    return rows


@click.command("status")
@click.option("--namesrv", default=None, metavar="HOST:PORT[;HOST:PORT]",
              help="Name server address(es): every broker of every cluster.")
@click.option("--broker", default=None, metavar="HOST:PORT", help="One broker's address.")
@json_option
def command(namesrv, broker, as_json) -> None:
    """Brokers, roles and replication lag (bytes, seconds; STALLED slaves flagged)."""
    from .live import admin_client

    if bool(namesrv) == bool(broker):
        raise click.UsageError("give exactly one of --namesrv and --broker")
    with admin_client(namesrv, broker) as admin:
        rows = _rows(admin, namesrv, broker)
    if as_json:
        emit_json({"brokers": rows})
        return
    click.echo(f"{'#Cluster':<16}{'#Broker':<20}{'#BID':<6}{'#Addr':<24}{'#Role':<14}{'#MaxOffset':>14}")
    for r in rows:
        if "error" in r:
            click.echo(f"{r['cluster']:<16}{r['broker']:<20}{r['id']:<6}{r['addr']:<24}unreachable: {r['error']}")
            continue
        click.echo(f"{r['cluster']:<16}{r['broker']:<20}{r['id']:<6}{r['addr']:<24}{r['role']:<14}"
                   f"{r['commitlog_max_offset']:>14}")
        for s in r["slaves"]:
            flag = "  STALLED" + (" (behind the master's oldest file)" if s.get("behind_oldest_file") else "") \
                if s["stalled"] else ""
            click.echo(f"    slave {s['address']}: acked {s['acked_offset']}, lag {s['lag_bytes']} bytes, "
                       f"{s['lag_seconds']:.3f} s{flag}")
        m = r.get("master")
        if m is not None:
            state = "connected" if m["connected"] else f"NOT connected ({m.get('last_error') or '-'})"
            click.echo(f"    master {m['address'] or '-'}: {state}")
