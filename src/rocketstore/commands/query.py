"""``rocketstore query``: find messages by key, by unique key or by message id.

    rocketstore query --store DIR --topic T --key K [--begin ISO] [--end ISO] [--max N] [--json]
    rocketstore query --store DIR --msg-id ID [--topic T] [--json]
    rocketstore query --namesrv ADDR | --broker ADDR ...   (the same, through a running broker)

``--key`` is exact (topic and KEYS piece or UNIQ_KEY must match; hash collisions never show),
newest first, at most ``--max`` (capped by ``max_msgs_num_batch``, 64 unless configured).
``--msg-id`` takes an offset message id (32/56 hex chars, what RocketMQ returns on send); if no
record has that id it is tried as a client unique id (UNIQ_KEY), in ``--topic`` or in every
topic of the store — the same fallback as ``mqadmin queryMsgById``.
"""
from __future__ import annotations

import click

from ._common import emit_json, json_option, parse_time_ms
from ._common import message_dict, open_store_read_only
from .store_cmds import config_option


def _by_msg_id(store, msg_id: str, topic: str | None):
    from ..format.message import parse_message_id
    try:
        _, offset = parse_message_id(msg_id)
    except ValueError:
        offset = None
    if offset is not None:
        m = store.look_message_by_offset(offset)
        if m is not None and m.msg_id.upper() == msg_id.upper():
            return [m], "msg_id"
    svc = store.index_service
    if svc is None:
        return [], "msg_id"
    read = store.look_message_by_offset
    topics = [topic] if topic else sorted(store.topics())
    found = []
    for t in topics:
        found.extend(svc.query_by_uniq_key(t, msg_id, read))
    found.sort(key=lambda m: -m.commitlog_offset)
    return found, "uniq_key"


def _iso(ms: int) -> str:
    from datetime import datetime
    return datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


@click.command("query")
@click.option("--store", "store_dir", default=None, type=click.Path(file_okay=False),
              help="Store root directory (or --namesrv / --broker for a running broker).")
@click.option("--namesrv", default=None, metavar="HOST:PORT", help="Query through a name server.")
@click.option("--broker", default=None, metavar="HOST:PORT", help="Query through one broker.")
@click.option("--topic", default=None, help="Topic (required with --key).")
@click.option("--key", default=None, help="Message key or unique key, matched exactly.")
@click.option("--msg-id", "msg_id", default=None, help="Offset message id (or a unique key).")
@click.option("--begin", default=None, help="Earliest store time, ISO-8601 or epoch ms.")
@click.option("--end", default=None, help="Latest store time, ISO-8601 or epoch ms.")
@click.option("--max", "max_num", default=32, show_default=True, type=int,
              help="At most N messages (capped by max_msgs_num_batch, 64 by default).")
@click.option("--body/--no-body", default=True, show_default=True, help="Include bodies.")
@config_option
@json_option
def command(store_dir, namesrv, broker, topic, key, msg_id, begin, end, max_num, body, config,
            as_json):
    """Query messages by key (exact, newest first) or by message id."""
    if (key is None) == (msg_id is None):
        raise click.UsageError("give exactly one of --key and --msg-id")
    if key is not None and not topic:
        raise click.UsageError("--key needs --topic")
    if max_num <= 0:
        raise click.UsageError("--max must be positive")
    begin_ms = parse_time_ms(begin) or 0
    end_ms = parse_time_ms(end)
    from .live import check_target, query_via_broker
    if check_target(namesrv, broker, store_dir) != "--store":
        msgs, how, meta = query_via_broker(namesrv, broker, topic, key, msg_id, max_num,
                                           begin_ms, end_ms)
        out = {"query": {"topic": topic, "key": key, "msg_id": msg_id, "begin": begin_ms,
                         "end": end_ms, "max": max_num, "matched_by": how},
               "count": len(msgs), **meta,
               "messages": [message_dict(m, with_body=body) for m in msgs]}
    else:
        out = _query_store(store_dir, config, topic, key, msg_id, max_num, begin_ms, end_ms, body)
        msgs = out["messages"]
    _print(out, topic, key, msg_id, body, as_json)
    if msg_id is not None and not msgs:
        raise SystemExit(1)


def _query_store(store_dir, config, topic, key, msg_id, max_num, begin_ms, end_ms, body) -> dict:
    with open_store_read_only(store_dir, config) as store:
        if key is not None:
            q = store.query_message(topic, key, max_num=max_num, begin=begin_ms, end=end_ms)
            msgs, how = q.messages, "key"
            meta = {"index_last_update_timestamp": q.index_last_update_timestamp,
                    "index_last_update_phyoffset": q.index_last_update_phyoffset}
        else:
            msgs, how = _by_msg_id(store, msg_id, topic)
            meta = {}
        out = {"query": {"topic": topic, "key": key, "msg_id": msg_id, "begin": begin_ms,
                         "end": end_ms, "max": max_num, "matched_by": how},
               "count": len(msgs), **meta,
               "messages": [message_dict(m, with_body=body) for m in msgs]}
    return out


def _print(out: dict, topic, key, msg_id, body, as_json) -> None:
    msgs = out["messages"]
    if as_json:
        emit_json(out)
    else:
        what = f"key {key!r} in {topic}" if key is not None else f"id {msg_id}"
        click.echo(f"{len(msgs)} message(s) for {what}")
        limit = out["query"].get("max") or 0
        if key is not None and limit and len(msgs) >= min(limit, 64):
            click.echo(f"note: {len(msgs)} shown, the most one query returns (--max {limit}, "
                       "capped by max_msgs_num_batch); more may match: narrow with --begin / "
                       "--end", err=True)
        for m in out["messages"]:
            line = (f"  {m['msg_id']} topic={m['topic']} queue={m['queue_id']}:{m['queue_offset']} "
                    f"offset={m['commitlog_offset']} stored={_iso(m['store_timestamp'])} "
                    f"keys={','.join(m['keys'])} uniq={m['uniq_key']}")
            if body:
                line += f" body={m.get('body', m.get('body_hex', ''))[:80]!r}"
            click.echo(line)
