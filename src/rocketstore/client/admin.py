"""``AdminClient``: RocketMQ's admin requests from Python (what ``mqadmin`` asks a cluster).

    from rocketstore.client import AdminClient
    with AdminClient(namesrv="127.0.0.1:9876") as admin:      # or broker="127.0.0.1:10911"
        admin.brokers()                      # [{"name", "cluster", "addr"}]
        admin.topic_stats("Orders")          # per queue: min/max offset, last update
        admin.consume_stats("group")         # per queue: broker/consumer offset, lag
        admin.runtime_info(addr)             # the broker's runtime KVTable

Works against ``rocketstore serve`` and against RocketMQ's own name server and brokers: the
requests are RocketMQ 4.9's (codes 21, 28, 33, 43, 106, 201-208, 11, 12) and the answers are
parsed with the fastjson dialect they use (``remoting.fastjson``), so ``MessageQueue`` map keys
come back as plain rows. With only ``broker=`` given, that one broker is the whole cluster.
Name-server operations (write perms, KV config: codes 100-102, 205, 219, 327) go to every name
server given; ``consumer_running_info`` (307) is answered by the consumer client itself.
Blocking methods run on the shared client event loop; ``AsyncAdminClient`` is the same for
asyncio programs.
"""
from __future__ import annotations

from typing import Any

from ..errors import BrokerError
from ..format.message import MessageExt, parse_message_id
from ..remoting import fastjson
from ..remoting.codes import PULL_FLAG_SUBSCRIPTION, RequestCode, ResponseCode
from ..remoting.command import RemotingCommand
from ..remoting.jsonbody import load_json_text
from ._sync import LoopThread
from .consumer import decode_messages
from .transport import ConnectionPool, parse_addrs


def _mq_rows(table: dict, value_name: str | None = None) -> list[dict]:
    rows = []
    for key, val in table.items():
        row = {"topic": key["topic"], "brokerName": key["brokerName"],
               "queueId": int(key["queueId"])}
        if isinstance(val, dict):
            row.update(val)
        else:
            row[value_name or "value"] = val
        rows.append(row)
    rows.sort(key=lambda r: (r["topic"], r["brokerName"], r["queueId"]))
    return rows


class AsyncAdminClient:
    def __init__(self, namesrv: str | None = None, broker: str | None = None, *,
                 timeout_s: float = 10.0, credentials: Any = None) -> None:
        if not namesrv and not broker:
            raise ValueError("give a name server or a broker address")
        self.namesrv_addrs = parse_addrs(namesrv) if namesrv else []
        if broker:
            parse_addrs(broker, "broker")
        self.broker = broker
        self.timeout_s = timeout_s
        self.pool = ConnectionPool(rpc_hook=None if credentials is None else credentials.sign)

    async def call(self, addr: str, code: int, fields: dict | None = None, body: bytes = b"",
                   ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields or {}, body, language="JAVA")
        return await self.pool.invoke_ok(addr, cmd, self.timeout_s, ok)

    async def _namesrv_call(self, code: int, fields: dict | None = None) -> RemotingCommand:
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                return await self.call(addr, code, fields)
            except (ConnectionError, TimeoutError) as exc:
                last = exc
        raise ConnectionError(f"no name server answered: {last}")

    # -- cluster --------------------------------------------------------------------------------
    async def brokers(self) -> list[dict]:
        """Every master broker: name, cluster and address (GET_BROKER_CLUSTER_INFO)."""
        if not self.namesrv_addrs:
            conf = await self.broker_config(self.broker)  # type: ignore[arg-type]
            return [{"name": conf.get("brokerName", ""),
                     "cluster": conf.get("brokerClusterName", ""), "addr": self.broker}]
        info = fastjson.loads((await self._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        cluster_of = {b: c for c, names in (info.get("clusterAddrTable") or {}).items()
                      for b in names}
        out = []
        for name, bd in sorted((info.get("brokerAddrTable") or {}).items()):
            addrs = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            if 0 in addrs:
                out.append({"name": name, "cluster": bd.get("cluster") or cluster_of.get(name, ""),
                            "addr": addrs[0]})
        return out

    async def broker_names(self) -> list[str]:
        """Every broker group the name server knows, with or without a master."""
        info = fastjson.loads((await self._namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        return sorted((info.get("brokerAddrTable") or {}).keys())

    async def broker_addrs(self) -> list[str]:
        if self.broker:
            return [self.broker]
        return [b["addr"] for b in await self.brokers()]

    async def runtime_info(self, addr: str) -> dict[str, str]:
        resp = await self.call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(fastjson.loads(resp.body).get("table") or {})

    async def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings under RocketMQ's names."""
        resp = await self.call(addr, RequestCode.GET_BROKER_CONFIG)
        out = {}
        for line in resp.body.decode("utf-8", "replace").splitlines():
            k, sep, v = line.partition("=")
            if sep and k.strip():
                out[k.strip()] = v.strip()
        return out

    # -- topics ---------------------------------------------------------------------------------
    async def create_topic(self, topic: str, read_queue_nums: int = 8,
                           write_queue_nums: int = 8, perm: int = 6,
                           order: bool = False) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on every master broker (mqadmin updateTopic); the brokers'
        addresses."""
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
                  "writeQueueNums": write_queue_nums, "perm": perm,
                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                  "order": "true" if order else "false"}
        addrs = await self.broker_addrs()
        for addr in addrs:
            await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        return addrs

    async def topic_configs(self, addr: str) -> dict[str, dict]:
        resp = await self.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        return dict(fastjson.loads(resp.body).get("topicConfigTable") or {})

    async def topic_stats(self, topic: str, addr: str | None = None) -> list[dict]:
        """Per queue: topic, brokerName, queueId, minOffset, maxOffset, lastUpdateTimestamp."""
        rows = []
        for a in [addr] if addr else await self.broker_addrs():
            try:
                resp = await self.call(a, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
            except BrokerError as exc:
                if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    continue
                raise
            rows += _mq_rows(fastjson.loads(resp.body).get("offsetTable") or {})
        return rows

    # -- groups ---------------------------------------------------------------------------------
    async def group_names(self, addr: str) -> list[str]:
        """Groups a broker knows: configured subscription groups and groups with offsets."""
        names = set()
        resp = await self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        names.update((fastjson.loads(resp.body).get("subscriptionGroupTable") or {}).keys())
        resp = await self.call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        for key in (fastjson.loads(resp.body).get("offsetTable") or {}):
            names.add(str(key).rpartition("@")[2])
        return sorted(n for n in names if n)

    async def consume_stats(self, group: str, topic: str | None = None,
                            addr: str | None = None) -> dict:
        """{"consumeTps": float, "queues": [...]} with brokerOffset, consumerOffset, lag."""
        tps, rows = 0.0, []
        fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        for a in [addr] if addr else await self.broker_addrs():
            b = fastjson.loads((await self.call(a, RequestCode.GET_CONSUME_STATS, fields)).body)
            tps += float(b.get("consumeTps") or 0.0)
            rows += _mq_rows(b.get("offsetTable") or {})
        for r in rows:
            r["lag"] = max(0, int(r.get("brokerOffset", 0)) - int(r.get("consumerOffset", 0)))
        return {"group": group, "consumeTps": tps, "queues": rows,
                "totalLag": sum(r["lag"] for r in rows)}

    async def consumer_connection(self, group: str, addr: str) -> dict | None:
        resp = await self.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                               {"consumerGroup": group},
                               ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
        return fastjson.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    # -- messages -------------------------------------------------------------------------------
    async def route_broker(self, topic: str) -> str:
        if self.broker:
            return self.broker
        resp = await self._namesrv_call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        route = fastjson.loads(resp.body)
        for bd in route.get("brokerDatas") or []:
            addrs = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            if 0 in addrs:
                return addrs[0]
        raise ConnectionError(f"topic {topic} has no master broker")

    async def pull(self, topic: str, queue_id: int, offset: int, max_nums: int = 32,
                   group: str = "rocketstore_cli",
                   subscription: str = "*") -> tuple[int, dict, list[MessageExt]]:
        """One PULL_MESSAGE without committing anything: (code, header fields, messages)."""
        addr = await self.route_broker(topic)
        resp = await self.call(addr, RequestCode.PULL_MESSAGE,
                               {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                                "queueOffset": offset, "maxMsgNums": max_nums,
                                "sysFlag": PULL_FLAG_SUBSCRIPTION,
                                "commitOffset": 0, "suspendTimeoutMillis": 0,
                                "subscription": subscription, "subVersion": 0,
                                "expressionType": "TAG"},
                               ok=(ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                   ResponseCode.PULL_RETRY_IMMEDIATELY,
                                   ResponseCode.PULL_OFFSET_MOVED))
        msgs = decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []
        return resp.code, dict(resp.ext_fields), msgs

    async def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                            end: int | None = None, unique_key: bool = False) -> list[MessageExt]:
        """QUERY_MESSAGE on every broker: messages of ``topic`` whose key (or unique key) is
        ``key``, newest first."""
        fields = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin,
                  "endTimestamp": end if end is not None else (1 << 63) - 1}
        if unique_key:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        out: list[MessageExt] = []
        for a in await self.broker_addrs():
            resp = await self.call(a, RequestCode.QUERY_MESSAGE, fields,
                                   ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            if resp.code == ResponseCode.SUCCESS:
                out += decode_messages(resp.body)
        keep = [m for m in out if m.topic == topic and (key in (m.keys or []) or m.uniq_key == key)]
        keep.sort(key=lambda m: -m.store_timestamp)
        return keep[:max_num]

    async def view_message(self, msg_id: str) -> MessageExt | None:
        """VIEW_MESSAGE_BY_ID: the message an offset message id names (its store host, or the
        one broker this client was given)."""
        host, offset = parse_message_id(msg_id)
        port = host.rpartition(":")[2]
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{msg_id} is not an offset message id")
        addr = self.broker or host
        resp = await self.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset},
                               ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return None
        msgs = decode_messages(resp.body)
        return msgs[0] if msgs else None

    # -- name-server operations (sent to every name server, as mqadmin does) --------------------
    async def _every_namesrv(self, code: int, fields: dict) -> dict[str, RemotingCommand]:
        if not self.namesrv_addrs:
            raise ValueError("this request goes to the name servers: give namesrv=")
        return {a: await self.call(a, code, fields) for a in self.namesrv_addrs}

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Stop routing writes to ``broker_name`` (WIPE_WRITE_PERM_OF_BROKER): name server →
        how many of the broker's topics it changed."""
        answers = await self._every_namesrv(RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                                            {"brokerName": broker_name})
        return {a: r.get_int("wipeTopicCount", 0) or 0 for a, r in answers.items()}

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Route writes to ``broker_name`` again (ADD_WRITE_PERM_OF_BROKER)."""
        answers = await self._every_namesrv(RequestCode.ADD_WRITE_PERM_OF_BROKER,
                                            {"brokerName": broker_name})
        return {a: r.get_int("addTopicCount", 0) or 0 for a, r in answers.items()}

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG (``updateKvConfig``; namespace ORDER_TOPIC_CONFIG: ``updateOrderConf``)."""
        await self._every_namesrv(RequestCode.PUT_KV_CONFIG,
                                  {"namespace": namespace, "key": key, "value": value})

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        await self._every_namesrv(RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        """GET_KV_CONFIG from the first name server that answers; None when not set."""
        for addr in self.namesrv_addrs:
            resp = await self.call(addr, RequestCode.GET_KV_CONFIG,
                                   {"namespace": namespace, "key": key},
                                   ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            return resp.get_str("value") if resp.code == ResponseCode.SUCCESS else None
        raise ValueError("this request goes to the name servers: give namesrv=")

    async def kv_list(self, namespace: str) -> dict[str, str]:
        """GET_KVLIST_BY_NAMESPACE: every key of a namespace ({} when there is none)."""
        for addr in self.namesrv_addrs:
            resp = await self.call(addr, RequestCode.GET_KVLIST_BY_NAMESPACE,
                                   {"namespace": namespace},
                                   ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            if resp.code != ResponseCode.SUCCESS:
                return {}
            return dict(fastjson.loads(resp.body).get("table") or {})
        raise ValueError("this request goes to the name servers: give namesrv=")

    # -- a consumer's own view ------------------------------------------------------------------
    async def consumer_running_info(self, group: str, client_id: str,
                                    jstack: bool = False) -> dict:
        """GET_CONSUMER_RUNNING_INFO (``consumerStatus``): the broker asks the live client.
        ``properties``, ``subscriptions``, ``queues`` (one row per queue: topic, brokerName,
        queueId, commitOffset, cachedMsgCount, ...), ``status`` per topic, ``jstack``."""
        addr = await self.route_broker("%RETRY%" + group)
        resp = await self.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                               {"consumerGroup": group, "clientId": client_id,
                                "jstackEnable": jstack})
        info = fastjson.loads(resp.body)
        return {"properties": dict(info.get("properties") or {}),
                "subscriptions": list(info.get("subscriptionSet") or []),
                "queues": _mq_rows(info.get("mqTable") or {}),
                "status": dict(info.get("statusTable") or {}), "jstack": info.get("jstack")}

    # -- plain ACL (what mqadmin's updateAclConfig / deleteAccessConfig / ... send) ------------
    async def update_acl_config(self, addr: str, access_key: str, secret_key: str, *,
                                white_remote_address: str | None = None, admin: bool = False,
                                default_topic_perm: str | None = None,
                                default_group_perm: str | None = None,
                                topic_perms: list[str] | None = None,
                                group_perms: list[str] | None = None) -> None:
        """Create or update an account (UPDATE_AND_CREATE_ACL_CONFIG); perms as "name=PUB|SUB"."""
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
            "accessKey": access_key, "secretKey": secret_key,
            "whiteRemoteAddress": white_remote_address, "admin": admin,
            "defaultTopicPerm": default_topic_perm, "defaultGroupPerm": default_group_perm,
            "topicPerms": None if topic_perms is None else ",".join(topic_perms),
            "groupPerms": None if group_perms is None else ",".join(group_perms)})

    async def delete_acl_config(self, addr: str, access_key: str) -> None:
        await self.call(addr, RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key})

    async def update_global_white_addrs(self, addr: str, addrs: list[str],
                                        acl_file: str | None = None) -> None:
        await self.call(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                        {"globalWhiteAddrs": ",".join(addrs), "aclFileFullPath": acl_file})

    async def acl_version(self, addr: str) -> dict:
        """The broker's ACL file versions (GET_BROKER_CLUSTER_ACL_INFO): ``version`` of the
        default file and ``allAclFileVersion`` (file -> {counter, timestamp}) parsed."""
        f = (await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)).ext_fields
        out: dict = dict(f)
        for key in ("version", "allAclFileVersion"):
            if f.get(key):
                out[key] = load_json_text(f[key])
        return out

    async def acl_config(self, addr: str) -> dict:
        """``globalWhiteAddrs`` and ``plainAccessConfigs`` (GET_BROKER_CLUSTER_ACL_CONFIG)."""
        resp = await self.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        return load_json_text(resp.body.decode("utf-8")) if resp.body else {}

    async def close(self) -> None:
        self.pool.close()


class AdminClient:
    """Blocking facade of ``AsyncAdminClient``."""

    def __init__(self, namesrv: str | None = None, broker: str | None = None, **kw: Any) -> None:
        self._lt = LoopThread.shared()

        async def make() -> AsyncAdminClient:
            return AsyncAdminClient(namesrv, broker, **kw)
        self._impl = self._lt.run(make())

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._impl, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._lt.run(fn(*args, **kwargs))
        return call

    def close(self) -> None:
        self._lt.run(self._impl.close())

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["AdminClient", "AsyncAdminClient"]
