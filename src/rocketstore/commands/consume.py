"""``rocketstore consume``: read messages from a running broker (pull, optionally follow)."""
from __future__ import annotations

import time

import click

from ._common import emit_json, json_option


def _row(m) -> dict:
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "msg_id": m.uniq_key or m.msg_id, "offset_msg_id": m.msg_id, "tags": m.tags,
            "keys": m.keys, "reconsume_times": m.reconsume_times,
            "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
            "properties": m.properties, "body": m.body}


@click.command("consume")
@click.option("--namesrv", default="127.0.0.1:9876", show_default=True)
@click.option("--topic", required=True)
@click.option("--group", default="rocketstore-cli", show_default=True, help="Consumer group.")
@click.option("--queue", "queue_id", type=click.IntRange(min=0), default=None,
              help="Only this queue.")
@click.option("--offset", type=click.IntRange(min=0), default=None,
              help="Start offset (default: the group's committed offset, else 0).")
@click.option("--subscription", default="*", show_default=True, help='Tags, e.g. "A || B".')
@click.option("--max", "max_count", type=click.IntRange(min=0), default=None,
              help="Stop after N messages.")
@click.option("--follow", is_flag=True, help="Keep long-polling for new messages (Ctrl-C ends).")
@click.option("--commit", is_flag=True, help="Commit the group's offsets as messages are read.")
@json_option
def command(namesrv, topic, group, queue_id, offset, subscription, max_count, follow, commit,
            as_json) -> None:
    """Print the messages of TOPIC (all queues, or one) from an offset."""
    from ..client import PullConsumer, SessionCredentials

    c = PullConsumer(group, namesrv, credentials=SessionCredentials.from_env())
    count = 0
    try:
        queues = [q.queue_id for q in c.queues(topic)]
        if queue_id is not None:
            if queue_id not in queues:
                raise click.ClickException(f"topic {topic} has no queue {queue_id}")
            queues = [queue_id]
        offsets = {}
        for q in queues:
            if offset is not None:
                offsets[q] = offset
            else:
                committed = c.committed_offset(topic, q)
                offsets[q] = committed if committed is not None and committed >= 0 else 0
        while True:
            progressed = False
            for q in queues:
                if max_count is not None and count >= max_count:
                    return
                r = c.pull(topic, q, offsets[q], 32, subscription=subscription,
                           suspend_ms=1000 if follow and len(queues) == 1 else 0)
                for m in r.messages:
                    if max_count is not None and count >= max_count:
                        break
                    count += 1
                    offsets[q] = m.queue_offset + 1
                    if as_json:
                        emit_json(_row(m))
                    else:
                        body = m.body.decode("utf-8", errors="replace")
                        click.echo(f"{m.topic}/{m.queue_id}@{m.queue_offset} "
                                   f"{m.uniq_key or m.msg_id} tags={m.tags or ''} {body}")
                if not r.messages and r.next_begin_offset != offsets[q]:
                    offsets[q] = r.next_begin_offset
                progressed |= bool(r.messages)
                if commit:
                    c.commit_offset(topic, q, offsets[q])
            if not progressed:
                if not follow:
                    return
                if len(queues) > 1:
                    time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except (ConnectionError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        c.shutdown()
