"""``rocketstore send``: send messages to a running broker through its name server."""
from __future__ import annotations

import sys

import click

from ._common import emit_json, json_option


@click.command("send")
@click.option("--namesrv", default="127.0.0.1:9876", show_default=True,
              help="Name server address(es), host:port[,host:port].")
@click.option("--topic", required=True)
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Comma-separated message keys.")
@click.option("--queue", "queue_id", type=int, default=None, help="Write queue (default: any).")
@click.option("--sharding-key", default=None,
              help="Send all messages with this key to one queue, in order.")
@click.option("--delay-level", type=int, default=0, help="Delay level (1 = first level).")
@click.option("--property", "props", multiple=True, metavar="NAME=VALUE")
@click.option("--batch", is_flag=True, help="Send all bodies in one SEND_BATCH_MESSAGE.")
@click.option("--group", default="rocketstore-cli", show_default=True, help="Producer group.")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds per request.")
@json_option
@click.argument("bodies", nargs=-1, required=True)
def command(namesrv, topic, tags, keys, queue_id, sharding_key, delay_level, props, batch,
            group, timeout, as_json, bodies) -> None:
    """Send BODY... (use - to send each line of standard input)."""
    from ..client import Producer
    from ..format.message import Message

    properties = {}
    for p in props:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{p!r}: want NAME=VALUE", param_hint="--property")
        properties[k] = v
    key_list = [k for k in (keys or "").split(",") if k]
    from ..client import SessionCredentials
    from ..errors import RocketStoreError
    producer = Producer(group, namesrv, timeout_s=timeout,
                        credentials=SessionCredentials.from_env())
    acked = stdin_acked = 0
    source = "argument"
    try:
        if batch:
            data = [d for _, d in _bodies(bodies)]
            msgs = [Message(topic=topic, body=d, tags=tags, keys=key_list or None,
                            properties=properties or None) for d in data]
            r = producer.send_batch(topic, msgs, queue_id=queue_id, sharding_key=sharding_key)
            for i, (mid, oid) in enumerate(zip(r.msg_ids, r.offset_msg_id.split(","))):
                _emit({"status": r.status, "msg_id": mid, "offset_msg_id": oid,
                       "queue_id": r.message_queue.queue_id, "queue_offset": r.queue_offset + i},
                      as_json)
            acked = len(data)
        else:
            for source, d in _bodies(bodies):  # stdin lines are sent as they arrive
                r = producer.send(topic, d, tags=tags, keys=key_list or None,
                                  properties=properties or None, queue_id=queue_id,
                                  sharding_key=sharding_key, delay_level=delay_level)
                _emit({"status": r.status, "msg_id": r.msg_id, "offset_msg_id": r.offset_msg_id,
                       "queue_id": r.message_queue.queue_id, "queue_offset": r.queue_offset},
                      as_json)
                acked += 1
                stdin_acked += source == "stdin"
    except (ConnectionError, TimeoutError, OSError, RocketStoreError) as exc:
        where = (f"; resume with line {stdin_acked + 1} of standard input" if source == "stdin"
                 else f"; the first {acked} message(s) are stored" if acked else "")
        raise click.ClickException(f"send failed after {acked} acknowledged message(s): "
                                   f"{exc}{where}") from exc
    finally:
        producer.shutdown()


def _bodies(bodies):
    """(source, body) in order: each argument, and for ``-`` each line of standard input as
    soon as it is read (so ``tail -f log | rocketstore send -`` sends while it runs)."""
    for b in bodies:
        if b == "-":
            for line in iter(sys.stdin.readline, ""):
                yield "stdin", line.rstrip("\n").encode()
        else:
            yield "argument", b.encode()


def _emit(r: dict, as_json: bool) -> None:
    if as_json:
        emit_json(r)
    else:
        click.echo(f"{r['status']} {r['msg_id']} queue={r['queue_id']} offset={r['queue_offset']}")
    sys.stdout.flush()
