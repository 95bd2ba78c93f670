"""``rocketstore topics|status|consumers``: what a running broker (or a store directory) holds.

    rocketstore topics    --namesrv 127.0.0.1:9876 [--all] [--json]
    rocketstore status    --broker 127.0.0.1:10911 [--json]
    rocketstore consumers --store data [--group G] [--json]
    rocketstore consumers --namesrv 127.0.0.1:9876 --group G --clients

Through ``--namesrv`` or ``--broker`` the numbers come from the broker's admin requests
(``rocketstore.client.AdminClient``: the same requests RocketMQ's ``mqadmin`` sends, so this works
against RocketMQ's own brokers too). With ``--store`` they are computed from the directory,
opened read-only beside a live broker (no lock taken, nothing written) — committed offsets are
those last persisted in ``config/consumerOffset.json`` and nobody is "online".

``topics``: per topic its queues, messages now stored, max offset and last store time (system
topics with ``--all``). ``status``: per broker its runtime numbers (CommitLog offsets, dispatch
lag, put/get totals and rates, disk use). ``consumers``: per group its online clients, topics,
total lag and consume rate; with ``--group`` every queue's broker offset, committed offset and
lag, and with ``--clients`` each live client's own view — the queues it holds, its next offsets,
cached messages and rates (GET_CONSUMER_RUNNING_INFO, ``mqadmin consumerStatus``). Every
command takes ``--json``.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

import click

from ..errors import BrokerError
from ._common import broker_message, emit_json, json_option

STATUS_KEYS = ("brokerVersionDesc", "runtime", "commitLogMinOffset", "commitLogMaxOffset",
               "dispatchBehindBytes", "remainHowManyDataToFlush", "earliestMessageTimeStamp",
               "msgPutTotalTodayNow", "msgGetTotalTodayNow", "putTps", "getTransferedTps",
               "commitLogDiskRatio", "commitLogDirCapacity", "timerReadBehind",
               "timerOffsetBehind", "timerCongestNum", "timerEnqueueTps", "timerDequeueTps")


def target_options(fn):
    fn = click.option("--store", "store_dir", default=None, type=click.Path(file_okay=False),
                      help="Store root directory (opened read-only).")(fn)
    fn = click.option("--broker", default=None, metavar="HOST:PORT",
                      help="A broker's address.")(fn)
    fn = click.option("--namesrv", default=None, metavar="HOST:PORT[;HOST:PORT]",
                      help="Name server address(es).")(fn)
    return fn


def check_target(namesrv: str | None, broker: str | None, store_dir: str | None) -> str:
    given = [n for n, v in (("--namesrv", namesrv), ("--broker", broker), ("--store", store_dir))
             if v]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --namesrv, --broker and --store")
    return given[0]


@contextmanager
def admin_client(namesrv: str | None, broker: str | None) -> Iterator[Any]:
    from ..client.acl import SessionCredentials
    from ..client.admin import AdminClient
    from ..errors import BrokerError
    client = AdminClient(namesrv=namesrv, broker=broker, credentials=SessionCredentials.from_env())
    try:
        yield client
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise click.ClickException(f"cannot reach {namesrv or broker}: {exc}") from exc
    except BrokerError as exc:
        raise click.ClickException(broker_message(exc)) from exc
    finally:
        client.close()


class OfflineState:
    """A store directory's own view: read-only store plus its ``config/*.json`` state."""

    def __init__(self, store: Any, store_dir: str) -> None:
        from ..broker.config import BrokerConfig
        from ..broker.state.consumers import ConsumerManager
        from ..broker.state.offsets import ConsumerOffsetManager
        from ..broker.state.topics import TopicConfigManager
        from ..broker.state.subgroups import SubscriptionGroupManager
        config_dir = os.path.join(store_dir, "config")
        self.store = store
        self.config = BrokerConfig()
        self.topics = TopicConfigManager(config_dir)
        for topic, qids in store.topics().items():  # queues on disk without a topics.json entry
            if self.topics.get(topic) is None:
                try:  # in memory only: nothing is written to the store directory
                    self.topics.create(topic, max(qids) + 1, persist=False)
                except ValueError:
                    continue
        self.offsets = ConsumerOffsetManager(config_dir)
        self.consumers = ConsumerManager()
        self.subgroups = SubscriptionGroupManager(config_dir, auto_create=False)


@contextmanager
def offline(store_dir: str) -> Iterator[OfflineState]:
    from ._common import open_store_read_only
    with open_store_read_only(store_dir) as store:
        yield OfflineState(store, store_dir)


def _ts(ms: Any) -> str:
    try:
        ms = int(ms)
    except (TypeError, ValueError):
        return "-"
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds")


def _table(rows: list[list[Any]], header: list[str]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


# -- topics ------------------------------------------------------------------------------------
def topics_online(client: Any, include_system: bool) -> list[dict]:
    from ..broker.admin.views import is_system_topic
    rows: dict[str, dict] = {}
    for b in client.brokers():
        configs = client.topic_configs(b["addr"])
        for name, tc in sorted(configs.items()):
            if not include_system and (is_system_topic(name) or name in (b["name"], b["cluster"])):
                continue
            stats = client.topic_stats(name, b["addr"])
            row = rows.setdefault(name, {"topic": name, "readQueueNums": 0, "writeQueueNums": 0,
                                         "perm": tc.get("perm"), "order": tc.get("order", False),
                                         "messages": 0, "maxOffset": 0,
                                         "lastUpdateTimestamp": 0, "brokers": []})
            row["readQueueNums"] += int(tc.get("readQueueNums", 0))
            row["writeQueueNums"] += int(tc.get("writeQueueNums", 0))
            row["messages"] += sum(q["maxOffset"] - q["minOffset"] for q in stats)
            row["maxOffset"] += sum(q["maxOffset"] for q in stats)
            row["lastUpdateTimestamp"] = max([row["lastUpdateTimestamp"]] +
                                             [q["lastUpdateTimestamp"] for q in stats])
            row["brokers"].append(b["name"])
    return [rows[k] for k in sorted(rows)]


@click.command("topics")
@target_options
@click.option("--all", "include_system", is_flag=True, help="Include system topics.")
@json_option
def topics(namesrv, broker, store_dir, include_system, as_json):
    """Topics with their queues, stored messages and last store time."""
    check_target(namesrv, broker, store_dir)
    if store_dir:
        from ..broker.admin.views import topic_summary
        with offline(store_dir) as st:
            rows = topic_summary(st.store, st.topics, st.config.broker_name,
                                 include_system=include_system)
    else:
        with admin_client(namesrv, broker) as client:
            rows = topics_online(client, include_system)
    if as_json:
        emit_json({"topics": rows})
        return
    _table([[r["topic"], f"{r['readQueueNums']}/{r['writeQueueNums']}", r["messages"],
             r["maxOffset"], _ts(r["lastUpdateTimestamp"])] for r in rows],
           ["TOPIC", "QUEUES(R/W)", "MESSAGES", "MAX OFFSET", "LAST STORED"])


# -- status ------------------------------------------------------------------------------------
@click.command("status")
@target_options
@click.option("--controller", default=None, metavar="HOST:PORT[;HOST:PORT]",
              help="Controller mode: also each group's master, epochs and SyncStateSet from "
                   "this controller (RocketMQ's or ours; the group leader answers).")
@click.option("--controller-metrics", default=None, metavar="URL",
              help="Our controller's /metrics (rocketstore controller --metrics-port): also "
                   "each group's last failover (when, why, how long).")
@json_option
def status(namesrv, broker, store_dir, controller, controller_metrics, as_json):
    """Broker runtime numbers: CommitLog offsets, dispatch lag, totals, rates, disk use; with
    --controller, each broker group's replicas as the controller sees them."""
    check_target(namesrv, broker, store_dir)
    if controller_metrics and not controller:
        raise click.UsageError("--controller-metrics goes with --controller")
    if controller and not namesrv:
        raise click.UsageError("--controller needs --namesrv (it names the broker groups)")
    if store_dir:
        from ..broker.admin.views import runtime_info
        with offline(store_dir) as st:
            info = runtime_info(st.store, st.store.cfg, st.config, None)
            brokers = [{"name": None, "cluster": None, "addr": None, "store": store_dir,
                        "topics": len(st.topics.topics()), "runtime": info}]
    else:
        from ._replication import broker_targets, replication
        with admin_client(namesrv, broker) as client:
            brokers = []
            for b in broker_targets(client):  # slaves too (brokerId > 0)
                try:
                    rt = client.runtime_info(b["addr"])
                except (ConnectionError, TimeoutError, OSError) as exc:
                    if not b.get("id"):
                        raise  # a master: the command fails as before
                    # a stopped slave is a row, not a failed command
                    brokers.append({**b, "runtime": {}, "replication": None, "error": str(exc)})
                    continue
                brokers.append({**b, "runtime": rt, "replication": replication(rt)})
    groups = None
    if controller:
        from ._replication import controller_groups
        with admin_client(namesrv, None) as client:
            names = client.broker_names()
        groups = controller_groups(controller, names, controller_metrics)
    if as_json:
        emit_json({"brokers": brokers} if groups is None else
                  {"brokers": brokers, "controller": groups})
        return
    if groups is not None:
        from ._replication import controller_lines
        for line in controller_lines(controller, groups):
            click.echo(line)
    for b in brokers:
        title = b.get("store") or f"{b['cluster']}/{b['name']} {b['addr']}"
        if b.get("id"):
            title += f" (brokerId {b['id']})"
        click.echo(title)
        if b.get("error"):
            click.echo(f"  unreachable: {b['error']}")
        rt = b["runtime"]
        for k in STATUS_KEYS:
            if k in rt:
                v = rt[k]
                if k == "earliestMessageTimeStamp":
                    v = f"{v} ({_ts(v)})"
                click.echo(f"  {k:<26} {v}")
        from ._replication import replication_lines
        for line in replication_lines(b.get("replication")):
            click.echo(line)


# -- consumers ---------------------------------------------------------------------------------
def consumers_online(client: Any, group: str | None) -> list[dict]:
    brokers = client.brokers()
    names = [group] if group else sorted({g for b in brokers
                                          for g in client.group_names(b["addr"])})
    out = []
    for g in names:
        if g.startswith(("%RETRY%", "%DLQ%")) or (not group and g in SYSTEM_GROUPS):
            continue
        cs = client.consume_stats(g)
        online, conn = 0, None
        for b in brokers:
            conn = client.consumer_connection(g, b["addr"]) or conn
        if conn:
            online = len(conn.get("connectionSet") or [])
        out.append({"group": g, "online": online,
                    "consumeType": (conn or {}).get("consumeType"),
                    "messageModel": (conn or {}).get("messageModel"),
                    "topics": sorted({q["topic"] for q in cs["queues"]}),
                    "totalLag": cs["totalLag"], "consumeTps": cs["consumeTps"],
                    "queues": cs["queues"]})
    return out


SYSTEM_GROUPS = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP",
                           "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION",
                           "CID_ONSAPI_OWNER", "SCHEDULE_CONSUMER", "rocketstore_cli"})


def consumers_offline(st: OfflineState, group: str | None) -> list[dict]:
    from ..broker.admin import views
    names = [group] if group else views.all_group_names(st.offsets, st.consumers, st.subgroups)
    out = []
    for g in names:
        if g.startswith(("%RETRY%", "%DLQ%")) or (not group and g in SYSTEM_GROUPS):
            continue
        cs = views.consume_stats(st.store, st.topics, st.offsets, st.consumers,
                                 st.config.broker_name, g)
        d = cs.to_dict()
        queues = [{"topic": q["topic"], "brokerName": q["broker_name"], "queueId": q["queue_id"],
                   "brokerOffset": q["broker_offset"], "consumerOffset": q["consumer_offset"],
                   "lastTimestamp": q["last_timestamp"], "lag": q["lag"]} for q in d["queues"]]
        out.append({"group": g, "online": 0, "consumeType": None, "messageModel": None,
                    "topics": sorted({q["topic"] for q in queues}), "totalLag": d["totalLag"],
                    "consumeTps": 0.0, "queues": queues})
    return out


def consumer_clients(client: Any, group: str) -> list[dict]:
    """Each live client of ``group`` in its own words (GET_CONSUMER_RUNNING_INFO, what
    ``mqadmin consumerStatus`` shows): queues it holds, offsets, cached messages, rates."""
    seen: dict[str, dict] = {}
    for b in client.brokers():
        conn = client.consumer_connection(group, b["addr"]) or {}
        for c in conn.get("connectionSet") or []:
            seen.setdefault(c["clientId"], c)
    out = []
    for cid, c in sorted(seen.items()):
        row = {"clientId": cid, "clientAddr": c.get("clientAddr"), "language": c.get("language"),
               "version": c.get("version")}
        try:
            row.update(client.consumer_running_info(group, cid))
        except (BrokerError, ConnectionError, TimeoutError) as exc:
            row["error"] = str(exc)
        out.append(row)
    return out


def _print_clients(clients: list[dict]) -> None:
    for c in clients:
        click.echo(f"client {c['clientId']} ({c.get('language')}, {c.get('clientAddr')})")
        if "error" in c:
            click.echo(f"  no answer: {c['error']}")
            continue
        _table([[q["topic"], q["brokerName"], q["queueId"], q.get("commitOffset"),
                 q.get("cachedMsgCount"), _ts(q.get("lastPullTimestamp")),
                 _ts(q.get("lastConsumeTimestamp"))] for q in c["queues"]],
               ["TOPIC", "BROKER", "QUEUE", "NEXT OFFSET", "CACHED", "LAST PULL",
                "LAST CONSUME"])
        for topic, st in sorted(c["status"].items()):
            click.echo(f"  {topic}: pull {st.get('pullTPS', 0):.1f}/s "
                       f"({st.get('pullRT', 0):.1f} ms), consume OK "
                       f"{st.get('consumeOKTPS', 0):.1f}/s ({st.get('consumeRT', 0):.1f} ms), "
                       f"failed {st.get('consumeFailedTPS', 0):.1f}/s, "
                       f"{st.get('consumeFailedMsgs', 0)} failed in the last hour")


@click.command("consumers")
@target_options
@click.option("--group", default=None, help="One group, with every queue's offsets.")
@click.option("--clients", is_flag=True,
              help="With --group through --namesrv: each live client's own view "
                   "(mqadmin consumerStatus).")
@json_option
def consumers(namesrv, broker, store_dir, group, clients, as_json):
    """Consumer groups: online clients, topics, lag; per queue with --group."""
    check_target(namesrv, broker, store_dir)
    if clients and (not group or not namesrv):
        raise click.UsageError("--clients needs --group and --namesrv")
    if store_dir:
        with offline(store_dir) as st:
            rows = consumers_offline(st, group)
    else:
        with admin_client(namesrv, broker) as client:
            rows = consumers_online(client, group)
            if clients:
                for r in rows:
                    r["clients"] = consumer_clients(client, r["group"])
    if as_json:
        emit_json({"groups": rows})
        return
    if group:
        for r in rows:
            click.echo(f"{r['group']}: {r['online']} online, lag {r['totalLag']}, "
                       f"{r['consumeTps']:.1f} msg/s")
            _table([[q["topic"], q["brokerName"], q["queueId"], q["brokerOffset"],
                     q["consumerOffset"], q["lag"], _ts(q["lastTimestamp"])]
                    for q in r["queues"]],
                   ["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "CONSUMER OFFSET", "LAG",
                    "LAST CONSUMED"])
            _print_clients(r.get("clients") or [])
        return
    _table([[r["group"], r["online"], r["messageModel"] or "-", ",".join(r["topics"]) or "-",
             r["totalLag"], f"{r['consumeTps']:.1f}"] for r in rows],
           ["GROUP", "ONLINE", "MODEL", "TOPICS", "LAG", "TPS"])


commands = [topics, status, consumers]


# -- get / query through a broker --------------------------------------------------------------
PULL_STATUS = {0: "FOUND", 17: "TOPIC_NOT_EXIST", 19: "NO_NEW_MSG", 20: "RETRY_IMMEDIATELY",
               21: "OFFSET_MOVED"}


def get_via_broker(namesrv: str | None, broker: str | None, topic: str, queue_id: int,
                   offset: int, max_msgs: int, subscription: str | None) -> dict:
    """``rocketstore get`` through a running broker: one PULL_MESSAGE, nothing committed."""
    from ._common import message_dict
    with admin_client(namesrv, broker) as client:
        code, fields, msgs = client.pull(topic, queue_id, offset, max_msgs,
                                         subscription=subscription or "*")
    num = lambda k: int(fields.get(k) or 0)  # noqa: E731
    return {"status": PULL_STATUS.get(code, str(code)), "next_begin_offset": num("nextBeginOffset"),
            "min_offset": num("minOffset"), "max_offset": num("maxOffset"),
            "messages": [message_dict(m) for m in msgs]}


def query_via_broker(namesrv: str | None, broker: str | None, topic: str | None,
                     key: str | None, msg_id: str | None, max_num: int, begin_ms: int,
                     end_ms: int | None) -> tuple[list, str, dict]:
    """``rocketstore query`` through a running broker: QUERY_MESSAGE by key, or
    VIEW_MESSAGE_BY_ID by offset message id with mqadmin's fallback to the unique key."""
    with admin_client(namesrv, broker) as client:
        if key is not None:
            return client.query_message(topic, key, max_num, begin_ms, end_ms), "key", {}
        try:
            m = client.view_message(msg_id)
        except (ValueError, ConnectionError, OSError):
            m = None  # not an offset id (or its host is gone): try it as a unique key
        if m is not None and m.msg_id.upper() == msg_id.upper():
            return [m], "msg_id", {}
        if not topic:
            raise click.UsageError(f"{msg_id} is not an offset message id here; give --topic to "
                                   "look it up as a unique key")
        return client.query_message(topic, msg_id, max_num, begin_ms, end_ms,
                                    unique_key=True), "uniq_key", {}
