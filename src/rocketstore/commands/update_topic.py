"""``rocketstore updatetopic``: create or update a topic on a running broker (mqadmin's
``updateTopic``).

    rocketstore updatetopic --namesrv 127.0.0.1:9876 --topic Orders [-r 8] [-w 8] [--order]

RocketMQ 5.x clients never create topics (a gRPC send or receive on an unknown topic gets
TOPIC_NOT_FOUND), so a topic they use is made first — with this, with RocketMQ's own mqadmin,
or by a 4.x producer while ``autoCreateTopicEnable`` is on. Through ``--namesrv`` every master
broker of the cluster gets the topic; through ``--broker`` just that one.
"""
from __future__ import annotations

import click

from ._common import emit_json, json_option


@click.command("updatetopic")
@click.option("--namesrv", default=None, metavar="HOST:PORT[;HOST:PORT]",
              help="Name server address(es): every master broker gets the topic.")
@click.option("--broker", default=None, metavar="HOST:PORT", help="One broker's address.")
@click.option("--topic", "-t", required=True, help="Topic name.")
@click.option("--read-queues", "-r", default=8, show_default=True, type=click.IntRange(1, 1024))
@click.option("--write-queues", "-w", default=8, show_default=True, type=click.IntRange(1, 1024))
@click.option("--order", is_flag=True, help="An ordered topic.")
@json_option
def command(namesrv, broker, topic, read_queues, write_queues, order, as_json) -> None:
    """Create or update a topic on a running broker (mqadmin updateTopic)."""
    from ..broker.state.topics import validate_topic
    from .live import admin_client

    if bool(namesrv) == bool(broker):
        raise click.UsageError("give exactly one of --namesrv and --broker")
    try:
        validate_topic(topic)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--topic") from exc
    with admin_client(namesrv, broker) as admin:
        addrs = admin.create_topic(topic, read_queues, write_queues, order=order)
    result = {"topic": topic, "readQueueNums": read_queues, "writeQueueNums": write_queues,
              "order": order, "brokers": addrs}
    if as_json:
        emit_json(result)
    else:
        click.echo(f"topic {topic}: {write_queues} write / {read_queues} read queues on "
                   f"{', '.join(addrs)}")
