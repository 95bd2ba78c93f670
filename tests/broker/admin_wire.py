"""Helpers for admin-protocol tests: one-shot requests, a held client connection, and the
shapes of RocketMQ 4.9.7's admin bodies as its Java classes serialise them.

The shapes below were written from the Java sources (``rocketmq-all-4.9.7``, fastjson writes
every bean getter; ``long``/``int`` → JSON integer, ``double`` → JSON number, enum → its name,
``Set``/``List`` → array, ``Map`` → object), not from rocketstore's code:

- ``common/admin/TopicOffset``: minOffset, maxOffset, lastUpdateTimestamp (long)
- ``common/message/MessageQueue``: topic, brokerName (String), queueId (int)
- ``common/admin/OffsetWrapper``: brokerOffset, consumerOffset, lastTimestamp (long)
- ``common/admin/ConsumeStats``: offsetTable (HashMap<MessageQueue, OffsetWrapper>), consumeTps
  (double)
- ``common/protocol/body/Connection``: clientId, clientAddr (String), language (LanguageCode),
  version (int)
- ``common/protocol/body/ConsumerConnection``: connectionSet, subscriptionTable (topic →
  SubscriptionData), consumeType, messageModel, consumeFromWhere (enums)
- ``common/protocol/heartbeat/SubscriptionData``: classFilterMode (boolean), topic, subString,
  tagsSet (Set<String>), codeSet (Set<Integer>), subVersion (long), expressionType (String)
- ``common/subscription/SubscriptionGroupConfig``: groupName, consumeEnable,
  consumeFromMinEnable, consumeBroadcastEnable (boolean), retryQueueNums, retryMaxTimes (int),
  brokerId, whichBrokerWhenConsumeSlowly (long), notifyConsumerIdsChangedEnable (boolean)
- ``common/DataVersion``: timestamp, counter (long)
- ``common/TopicConfig``: topicName, readQueueNums, writeQueueNums, perm, topicFilterType (enum),
  topicSysFlag (int), order (boolean)
- ``common/protocol/body/ClusterInfo``: brokerAddrTable (name → BrokerData{cluster, brokerName,
  brokerAddrs: Long → String}), clusterAddrTable (cluster → Set<brokerName>)
- ``common/protocol/body/ConsumeQueueData``: physicOffset (long), physicSize (int), tagsCode
  (long), eval (boolean), extendDataJson, bitMap, msg (String, null → left out)
- ``common/protocol/body/QueryConsumeQueueResponseBody``: subscriptionData, filterData (String),
  queueData (List), maxQueueIndex, minQueueIndex (long)
- ``KVTable``: table (HashMap<String, String>); ``GroupList``: groupList; ``TopicList``:
  topicList, brokerAddr; ``ResetOffsetBody``: offsetTable (Map<MessageQueue, Long>)
"""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from rocketstore.remoting import fastjson
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.connection import NEED_DATA, RemotingConnection

INT, STR, BOOL, NUM, LIST, OBJ = "int", "str", "bool", "num", "list", "obj"

TOPIC_OFFSET = {"minOffset": INT, "maxOffset": INT, "lastUpdateTimestamp": INT}
MESSAGE_QUEUE = {"topic": STR, "brokerName": STR, "queueId": INT}
OFFSET_WRAPPER = {"brokerOffset": INT, "consumerOffset": INT, "lastTimestamp": INT}
CONSUME_STATS = {"offsetTable": OBJ, "consumeTps": NUM}
CONNECTION = {"clientId": STR, "clientAddr": STR, "language": STR, "version": INT}
CONSUMER_CONNECTION = {"connectionSet": LIST, "subscriptionTable": OBJ, "consumeType": STR,
                       "messageModel": STR, "consumeFromWhere": STR}
PRODUCER_CONNECTION = {"connectionSet": LIST}
SUBSCRIPTION_DATA = {"classFilterMode": BOOL, "topic": STR, "subString": STR, "tagsSet": LIST,
                     "codeSet": LIST, "subVersion": INT, "expressionType": STR}
SUBSCRIPTION_GROUP_CONFIG = {"groupName": STR, "consumeEnable": BOOL,
                             "consumeFromMinEnable": BOOL, "consumeBroadcastEnable": BOOL,
                             "retryQueueNums": INT, "retryMaxTimes": INT, "brokerId": INT,
                             "whichBrokerWhenConsumeSlowly": INT,
                             "notifyConsumerIdsChangedEnable": BOOL}
DATA_VERSION = {"timestamp": INT, "counter": INT}
SUBSCRIPTION_GROUP_WRAPPER = {"subscriptionGroupTable": OBJ, "dataVersion": OBJ}
TOPIC_CONFIG_WRAPPER = {"topicConfigTable": OBJ, "dataVersion": OBJ}
TOPIC_CONFIG = {"topicName": STR, "readQueueNums": INT, "writeQueueNums": INT, "perm": INT,
                "topicFilterType": STR, "topicSysFlag": INT, "order": BOOL}
CLUSTER_INFO = {"brokerAddrTable": OBJ, "clusterAddrTable": OBJ}
BROKER_DATA = {"cluster": STR, "brokerName": STR, "brokerAddrs": OBJ}
CONSUME_QUEUE_DATA = {"physicOffset": INT, "physicSize": INT, "tagsCode": INT, "eval": BOOL}
CONSUME_QUEUE_DATA_OPTIONAL = {"extendDataJson": STR, "bitMap": STR, "msg": STR}
QUERY_CONSUME_QUEUE_BODY = {"queueData": LIST, "maxQueueIndex": INT, "minQueueIndex": INT}
QUERY_CONSUME_QUEUE_OPTIONAL = {"subscriptionData": OBJ, "filterData": STR}
KV_TABLE = {"table": OBJ}
GROUP_LIST = {"groupList": LIST}
TOPIC_LIST = {"topicList": LIST}
TOPIC_LIST_OPTIONAL = {"brokerAddr": STR}
RESET_OFFSET_BODY = {"offsetTable": OBJ}

# Runtime-info keys mqadmin reads and parses (ClusterListSubCommand, BrokerStatusSubCommand)
# plus the ones AdminBrokerProcessor.prepareRuntimeInfo always sets.
RUNTIME_NUMERIC_KEYS = ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                        "msgPutTotalTodayNow", "msgGetTotalYesterdayMorning",
                        "msgGetTotalTodayMorning", "msgGetTotalTodayNow",
                        "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                        "sendThreadPoolQueueHeadWaitTimeMills",
                        "pullThreadPoolQueueHeadWaitTimeMills", "pageCacheLockTimeMills",
                        "earliestMessageTimeStamp", "dispatchBehindBytes", "brokerVersion",
                        "commitLogMinOffset", "commitLogMaxOffset", "bootTimestamp")
RUNTIME_TPS_KEYS = ("putTps", "getTransferedTps", "getFoundTps", "getMissTps", "getTotalTps")
RUNTIME_OTHER_KEYS = ("brokerVersionDesc", "commitLogDiskRatio", "consumeQueueDiskRatio",
                      "commitLogDirCapacity", "runtime", "remainHowManyDataToFlush",
                      "startAcceptSendRequestTimeStamp", "sendThreadPoolQueueCapacity",
                      "pullThreadPoolQueueCapacity", "queryThreadPoolQueueSize",
                      "queryThreadPoolQueueCapacity", "EndTransactionQueueSize",
                      "EndTransactionThreadPoolQueueCapacity")


def _is(value: Any, kind: str) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == LIST:
        return isinstance(value, list)
    return isinstance(value, dict)


def check_shape(obj: Any, shape: dict[str, str], optional: dict[str, str] | None = None,
                where: str = "body") -> None:
    """Every required field present with its JSON type; nothing beyond required + optional."""
    assert isinstance(obj, dict), f"{where}: not an object: {obj!r}"
    optional = optional or {}
    for name, kind in shape.items():
        assert name in obj, f"{where}: missing {name} in {sorted(obj)}"
        assert _is(obj[name], kind), f"{where}.{name}: {obj[name]!r} is not {kind}"
    for name, value in obj.items():
        assert name in shape or name in optional, f"{where}: unexpected field {name}"
        if name in optional:
            assert _is(value, optional[name]), f"{where}.{name}: {value!r} is not {optional[name]}"


def call(addr: str, code: int, fields: dict | None = None, body: bytes = b"",
         timeout: float = 60.0, credentials: tuple[str, str] | None = None) -> RemotingCommand:
    """Send one request on a new connection (signed with (access key, secret key) as RocketMQ's
    ``AclClientRPCHook`` signs, when given), return the response."""
    from rocketstore.remoting.signing import sign_request
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        codec = RemotingConnection()
        cmd = RemotingCommand.request(code, fields or {}, body, language="JAVA")
        if credentials is not None:
            sign_request(cmd, *credentials)
        s.sendall(codec.send(cmd))
        while True:
            r = codec.next_command()
            if r is not NEED_DATA:
                assert isinstance(r, RemotingCommand), r
                return r
            data = s.recv(1 << 20)
            if not data:
                raise ConnectionError(f"{addr} closed the connection")
            codec.receive_data(data)


def wait_dispatched(broker: str, topic: str, expected: dict[int, int],
                    timeout: float = 60.0) -> None:
    """Until every queue's max offset (GET_MAX_OFFSET) is as expected: puts are acknowledged
    before the reput has written their ConsumeQueue units, in RocketMQ as here."""
    deadline = time.monotonic() + timeout
    for qid, n in expected.items():
        while int(call(broker, 30, {"topic": topic, "queueId": qid}).ext_fields["offset"]) < n:
            assert time.monotonic() < deadline, f"{topic}:{qid} never reached {n}"
            time.sleep(0.05)


def body(resp: RemotingCommand) -> Any:
    assert resp.body, f"no body (code {resp.code}, remark {resp.remark!r})"
    return fastjson.loads(resp.body)


class HeldClient:
    """A client connection that stays open: it heartbeats every ``keepalive_s`` (as a real
    client does, so neither our broker nor RocketMQ's drops it however long a test runs) and
    collects the requests the broker sends it (a reader thread owns the socket)."""

    def __init__(self, addr: str, client_id: str, producer_groups=(), consumer_groups=(),
                 keepalive_s: float = 10.0) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.settimeout(None)
        self.codec = RemotingConnection()
        self.client_id = client_id
        self.heartbeat_body = json.dumps({
            "clientID": client_id,
            "producerDataSet": [{"groupName": g} for g in producer_groups],
            "consumerDataSet": list(consumer_groups)}).encode()
        self.received: list[RemotingCommand] = []
        self.closed = False
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._keepalive_opaques: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()
        self._stop = threading.Event()
        threading.Thread(target=self._keepalive, args=(keepalive_s,), daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(1 << 20)
                if not data:
                    break
                self.codec.receive_data(data)
                with self._cond:
                    while isinstance(c := self.codec.next_command(), RemotingCommand):
                        if not (c.is_response and c.opaque in self._keepalive_opaques):
                            self.received.append(c)
                    self._cond.notify_all()
        except OSError:
            pass
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def _keepalive(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                cmd = self._send(34, {}, self.heartbeat_body)
                self._keepalive_opaques.add(cmd.opaque)
            except OSError:
                return

    def _send(self, code: int, fields: dict, body: bytes) -> RemotingCommand:
        cmd = RemotingCommand.request(code, fields, body, language="JAVA")
        cmd.version = 401  # V4_9_4, a client new enough for every broker feature
        with self._send_lock:
            self.sock.sendall(self.codec.send(cmd))
        return cmd

    def request(self, code: int, fields: dict | None = None, body: bytes = b"") -> RemotingCommand:
        cmd = self._send(code, fields or {}, body)
        return self.wait(lambda c: c.is_response and c.opaque == cmd.opaque)

    def respond(self, cmd: RemotingCommand) -> None:
        """Answer a request the broker sent this client."""
        with self._send_lock:
            self.sock.sendall(self.codec.send(cmd))

    def heartbeat(self) -> RemotingCommand:
        return self.request(34, {}, self.heartbeat_body)

    def wait(self, pred, timeout: float = 60.0) -> RemotingCommand:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for c in self.received:
                    if pred(c):
                        self.received.remove(c)
                        return c
                if self.closed:
                    raise ConnectionError("closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("nothing matching arrived")
                self._cond.wait(left)

    def close(self) -> None:
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def java_string_hash(s: str) -> int:
    """``String.hashCode`` (what a Java client puts in ``codeSet``), for ASCII tags."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def consumer_data(group: str, topic: str, expr: str = "*") -> dict:
    """A consumer group's heartbeat entry as RocketMQ's Java client builds it."""
    tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
    return {"groupName": group, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": expr, "tagsSet": tags,
                                     "codeSet": [java_string_hash(t) for t in tags],
                                     "subVersion": 1, "classFilterMode": False,
                                     "expressionType": "TAG"}]}
