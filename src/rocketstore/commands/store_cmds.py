"""``rocketstore put``, ``get`` and ``inspect``: the store from the command line."""
from __future__ import annotations

import os

import click

from ..config import StoreConfig
from ._common import (detect_sizes, emit_json, json_option, message_dict, open_store_read_only,
                      store_option)


def open_store(store_dir: str, config: str | None = None, create: bool = False, **overrides):
    """Open a store directory for writing, reading sizes from ``broker.conf`` if given."""
    from ..store.message_store import MessageStore
    if not os.path.isdir(store_dir) and not create:
        raise click.ClickException(f"{store_dir}: no such store directory")
    cfg = (StoreConfig.from_properties(config, store_path_root_dir=store_dir, **overrides) if config
           else StoreConfig(store_path_root_dir=store_dir, **detect_sizes(store_dir), **overrides))
    return MessageStore(cfg)


def _open_for_put(cfg):
    from ..store.message_store import MessageStore
    return MessageStore(cfg)


config_option = click.option("--config", "config", type=click.Path(dir_okay=False, exists=True),
                             help="RocketMQ broker.conf with store settings.")


@click.command("put")
@store_option
@click.option("--topic", required=True)
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Comma-separated keys.")
@click.option("--queue", "queue_id", default=0, show_default=True, type=int)
@click.option("--property", "props", multiple=True, help="name=value, repeatable.")
@config_option
@click.option("--store-option", "-o", "options", multiple=True, metavar="NAME=VALUE",
              help="A StoreConfig field for a new store, e.g. -o mapped_file_size_commitlog="
                   "1048576 (an existing store keeps the sizes it was created with).")
@json_option
@click.argument("bodies", nargs=-1, required=True)
def put(store_dir, topic, tags, keys, queue_id, props, config, options, as_json, bodies):
    """Append one message per BODY."""
    from ..format.message import Message
    from ..store.store_dir import is_store_dir
    bad = [p for p in props if "=" not in p]
    if bad:
        raise click.BadParameter(f"{bad[0]!r}: want NAME=VALUE", param_hint="--property")
    properties = dict(p.split("=", 1) for p in props)
    key_list = [k for k in (keys or "").split(",") if k]
    if os.path.exists(store_dir) and not os.path.isdir(store_dir):
        raise click.ClickException(f"{store_dir}: not a directory")
    if os.path.isdir(store_dir) and os.listdir(store_dir) and not is_store_dir(store_dir):
        raise click.ClickException(
            f"{store_dir}: not a store directory and not empty ({len(os.listdir(store_dir))} "
            "entr(ies), no commitlog, consumequeue, index or checkpoint); put creates a store "
            "only in an empty or missing directory; nothing was written")
    from .serve import _store_config
    cfg, _ = _store_config(store_dir, config, options, None, None)
    if is_store_dir(store_dir) and not config:  # an existing store: the sizes it has
        given = {o.partition("=")[0].strip().replace("-", "_") for o in options}
        cfg = cfg.replace(**{k: v for k, v in detect_sizes(store_dir).items() if k not in given})
    out = []
    with _open_for_put(cfg) as store:
        for body in bodies:
            r = store.put_message(Message(topic, body.encode("utf-8"), tags=tags, keys=key_list,
                                          properties=properties, queue_id=queue_id))
            out.append({"status": r.status.name, "msg_id": r.msg_id, "wrote_offset": r.wrote_offset,
                        "wrote_bytes": r.wrote_bytes, "queue_offset": r.queue_offset,
                        "store_timestamp": r.store_timestamp, "error": r.error})
    if as_json:
        emit_json(out)
    else:
        for o in out:
            click.echo(f"{o['status']} msgId={o['msg_id']} queueOffset={o['queue_offset']} "
                       f"offset={o['wrote_offset']}" + (f" ({o['error']})" if o["error"] else ""))
    if any(o["status"] != "PUT_OK" for o in out):
        raise SystemExit(1)


@click.command("get")
@click.option("--store", "store_dir", default=None, type=click.Path(file_okay=False),
              help="Store root directory (or --namesrv / --broker for a running broker).")
@click.option("--namesrv", default=None, metavar="HOST:PORT", help="Read through a name server.")
@click.option("--broker", default=None, metavar="HOST:PORT", help="Read through one broker.")
@click.option("--topic", required=True)
@click.option("--queue", "queue_id", required=True, type=click.IntRange(min=0))
@click.option("--offset", required=True, type=click.IntRange(min=0),
              help="A queue offset: 0 is the queue's first message.")
@click.option("--max", "max_msgs", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--subscription", default=None, help='Tag expression, e.g. "TagA || TagB".')
@click.option("--sql", default=None, help="""SQL92 selector over message properties, e.g. "a > 5" (--store only).""")
@config_option
@json_option
def get(store_dir, namesrv, broker, topic, queue_id, offset, max_msgs, subscription, sql, config,
        as_json):
    """Read messages of one queue from OFFSET (from a store, or through a running broker)."""
    from .live import check_target, get_via_broker
    message_filter = None
    if sql is not None:
        from ..broker.state.filters import ConsumerFilterData, ExpressionMessageFilter
        from ..filter import SelectorSyntaxError, compile_sql92
        from ..filter.bloom import BloomFilter
        try:
            compiled = compile_sql92(sql)
        except SelectorSyntaxError as exc:
            raise click.BadParameter(str(exc), param_hint="--sql") from None
        message_filter = ExpressionMessageFilter(
            ConsumerFilterData("cli", topic, sql, "SQL92", compiled, born_time=0), BloomFilter())
    if check_target(namesrv, broker, store_dir) != "--store":
        if message_filter is not None:
            raise click.UsageError("--sql reads a store directly: use --store")
        res = get_via_broker(namesrv, broker, topic, queue_id, offset, max_msgs, subscription)
    else:
        with open_store_read_only(store_dir, config) as store:
            if queue_id not in store.topics().get(topic, ()):
                raise click.ClickException(f"topic {topic!r} queue {queue_id}: no such topic "
                                           f"or queue in {store_dir}")
            g = store.get_message("cli", topic, queue_id, offset, max_msgs, subscription,
                                  message_filter=message_filter)
        res = {"status": g.status.name, "next_begin_offset": g.next_begin_offset,
               "min_offset": g.min_offset, "max_offset": g.max_offset,
               "messages": [message_dict(m) for m in g.messages]}
    n = len(res["messages"])
    more = n < max_msgs and res["status"] == "FOUND" and \
        (res["next_begin_offset"] or 0) < (res["max_offset"] or 0)
    res["more"] = bool(more)
    if as_json:
        emit_json(res)
    else:
        click.echo(f"{res['status']} next={res['next_begin_offset']} min={res['min_offset']} "
                   f"max={res['max_offset']}")
        for m in res["messages"]:
            body = m.get("body", m.get("body_hex", ""))
            click.echo(f"  [{m['queue_offset']}] {m['msg_id']} tags={m['tags']} "
                       f"keys={','.join(m['keys'])} body={body[:80]!r}")
    if more:  # one read returns at most 32 (RocketMQ's transfer limits), whatever --max says
        click.echo(f"note: {n} of the {max_msgs} asked for returned (the most one read "
                   f"returns); continue with --offset {res['next_begin_offset']}", err=True)
    if res["status"] in ("NO_MATCHED_LOGIC_QUEUE", "TOPIC_NOT_EXIST"):
        raise click.ClickException(f"topic {topic!r} queue {queue_id}: no such topic or queue")


@click.command("inspect")
@store_option
@config_option
@json_option
def inspect(store_dir, config, as_json):
    """Files, offsets, topics, queues and index fill of a store."""
    with open_store_read_only(store_dir, config) as store:
        cl = store.commitlog
        info = {
            "root": os.path.abspath(store_dir),
            "read_only": True,
            "last_exit_ok": store.last_exit_ok,
            "recovery": vars(store.recovery_report),
            "dispatch": store.dispatch_health().to_dict(),
            "commitlog": {"segment_size": cl.file_size, "min_offset": cl.min_offset(),
                          "max_offset": cl.max_offset(),
                          "segments": [{"name": mf.name, "wrote": mf.wrote_position}
                                       for mf in cl.queue.files]},
            "checkpoint": {"physic": store.checkpoint.physic_msg_timestamp,
                           "logics": store.checkpoint.logics_msg_timestamp,
                           "index": store.checkpoint.index_msg_timestamp},
            "topics": {t: [{"queue_id": q, "min_offset": store.get_min_offset_in_queue(t, q),
                            "max_offset": store.get_max_offset_in_queue(t, q)} for q in qs]
                       for t, qs in store.topics().items()},
            "index": store.index_service.describe() if store.index_service else [],
            "consumequeue_ext": store.cq_ext.describe() if getattr(store, "cq_ext", None) else [],
        }
        from ..store import quarantine
        info["quarantine"] = quarantine.summary(store_dir)
    if as_json:
        emit_json(info)
        return
    c = info["commitlog"]
    click.echo(f"store {info['root']}  (last exit {'clean' if info['last_exit_ok'] else 'UNCLEAN'})")
    click.echo(f"commitlog: {len(c['segments'])} segment(s) of {c['segment_size']} bytes, "
               f"offsets {c['min_offset']}..{c['max_offset']}")
    d = info["dispatch"]
    click.echo(f"dispatch: {'ok' if d['ok'] else 'FAILING: ' + str(d['error'])}, "
               f"{d['behind_bytes']} byte(s) behind")
    rec, q = info["recovery"], info["quarantine"]
    if rec.get("truncated_at") is not None:
        click.echo(f"DAMAGE: CommitLog record at {rec['truncated_at']} is damaged "
                   f"({rec['reason']}); {rec['dropped_bytes']} byte(s) after it are unreadable "
                   "in place — the next open for writing sets them aside in quarantine/, then "
                   "`rocketstore salvage` re-appends the intact records")
    if q["events"]:
        click.echo(f"QUARANTINE: {q['events']} event(s), {q['bytes']} byte(s) in {q['path']}"
                   + (f"; {q['unsalvaged']} not salvaged yet (rocketstore salvage --store "
                      f"{store_dir})" if q["unsalvaged"] else "; all salvaged"))
    for note in info["recovery"].get("notes", []):
        click.echo(f"recovery note: {note}")
    for t, qs in info["topics"].items():
        click.echo(f"topic {t}: " + ", ".join(f"q{q['queue_id']}[{q['min_offset']}..{q['max_offset']})" for q in qs))
    from ..store.index_service import summarize_index_file
    for f in info["index"]:
        click.echo("index " + summarize_index_file(f))
    for e in info["consumequeue_ext"]:
        click.echo(f"consumequeue_ext {e['topic']}/{e['queue_id']}: {e['files']} file(s), "
                   f"{e['bytes']} byte(s) of units, SQL92 bitmap {e['bitmap_bits'] or 'none'}"
                   + (" bits" if e["bitmap_bits"] else ""))


commands = [put, get, inspect]
