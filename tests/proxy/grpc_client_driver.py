"""Driver for PyPI ``rocketmq-python-client==5.1.2`` (the RocketMQ 5.x gRPC client).

Runs inside its own venv (see ``conftest.client_python``); prints one JSON line as its last
line of output. Commands::

    produce  EP TOPIC N KIND [GROUPS]   KIND = normal | fifo | delay:<seconds>
    delays   EP TOPIC S1,S2,...         one message per offset (seconds from now, may be < 0),
                                        delivery_timestamp = now + offset (whole seconds); an
                                        offset "!S" is expected to be refused: its error is kept
    receive  EP TOPIC GROUP WANT INVISIBLE_S ACK [ROUNDS] [TAG] [BATCH]   ACK = ack | noack
    bad      EP TOPIC                                         send errors as the client sees them
    txn      EP TOPIC WAIT_S     commit one, roll back one, leave one to the server's check
    script   JSON                 several of these in one process: [[cmd, arg, ...], ...]
    push     EP TOPIC GROUP WANT_OK FAIL_BODY SECONDS   a PushConsumer whose listener fails
                                                         FAIL_BODY on its first delivery
                                                         (always, for "always:<body>")
    colors   EP TOPIC N           send N messages with properties seq=i, color=red|green|blue
    sql      EP TOPIC GROUP EXPR WANT [HOLD]   a SimpleConsumer with a SQL92 filter: receive
                                  (and ack) until WANT messages came and one more receive
                                  found nothing, or an error; with HOLD=hold it prints that
                                  result, stays up until a line arrives on stdin, then shuts down
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

from rocketmq.grpc_protocol import FilterType

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)


def _cfg(ep: str) -> ClientConfiguration:
    # a broker with aclEnable=true: keys from the environment (tests/broker/test_acl.py's)
    creds = Credentials(os.environ.get("RMQ_ACCESS_KEY", ""), os.environ.get("RMQ_SECRET_KEY", ""))
    return ClientConfiguration(ep, creds, request_timeout=10)


def produce(ep: str, topic: str, n: str, kind: str, groups: str = "3") -> list:
    p = Producer(_cfg(ep), (topic,))
    p.startup()
    out = []
    try:
        for i in range(int(n)):
            m = Message()
            m.topic = topic
            m.body = f"{kind}-body-{i}".encode()
            m.tag = f"Tag{i % 2}"
            m.keys = f"key-{i}"
            m.add_property("seq", str(i))
            if kind == "fifo":
                m.message_group = f"group-{i % int(groups)}"
            elif kind.startswith("delay:"):  # this client takes epoch seconds
                deliver_s = math.ceil(time.time() + float(kind[6:]))
                m.delivery_timestamp = deliver_s
            r = p.send(m)
            out.append({"i": i, "message_id": r.message_id, "body": m.body.decode(),
                        "sent_ms": int(time.time() * 1000),
                        "deliver_ms": deliver_s * 1000 if kind.startswith("delay:") else None,
                        "group": m.message_group if kind == "fifo" else None})
    finally:
        p.shutdown()
    return out


def delays(ep: str, topic: str, offsets: str) -> list:
    p = Producer(_cfg(ep), (topic,))
    p.startup()
    out = []
    try:
        for i, off in enumerate(offsets.split(",")):
            m = Message()
            m.topic = topic
            m.body = f"g-{off}".encode()
            refuse = off.startswith("!")
            deliver_s = math.ceil(time.time() + float(off.lstrip("!")))  # epoch seconds
            m.delivery_timestamp = deliver_s
            if refuse:
                try:
                    p.send(m)
                    out.append({"i": i, "refused": None})
                except Exception as exc:  # the client's exception carries the proxy's code
                    out.append({"i": i, "refused": repr(exc)})
                continue
            r = p.send(m)
            out.append({"i": i, "message_id": r.message_id, "body": m.body.decode(),
                        "sent_ms": int(time.time() * 1000), "deliver_ms": deliver_s * 1000})
    finally:
        p.shutdown()
    return out


def receive(ep: str, topic: str, group: str, want: str, invisible_s: str, ack: str,
            rounds: str = "40", tag: str = "*", batch: str = "32") -> list:
    c = SimpleConsumer(_cfg(ep), group, {topic: FilterExpression(tag)}, await_duration=2)
    c.startup()
    # RocketMQ's Java proxy answers a receive with INTERNAL_ERROR until the client's settings
    # reached it over the telemetry stream, which this client opens in the background
    time.sleep(float(os.environ.get("RMQ_SETTLE_S", "0")))
    out = []
    try:
        for _ in range(int(rounds)):
            if len(out) >= int(want):
                break
            for m in c.receive(int(batch), int(invisible_s)):
                out.append({"message_id": m.message_id, "body": m.body.decode(), "tag": m.tag,
                            "keys": sorted(m.keys), "topic": m.topic,
                            "properties": dict(m.properties or {}),
                            "attempt": m.delivery_attempt, "group": m.message_group,
                            "received_ms": int(time.time() * 1000)})
                if ack == "ack":
                    c.ack(m)
    finally:
        c.shutdown()
    return out


def bad(ep: str, topic: str) -> dict:
    """What the client reports for an unknown topic and an oversized body."""
    res = {}
    p = Producer(_cfg(ep))
    p.startup()
    try:
        m = Message()
        m.topic = topic
        m.body = b"x"
        try:
            p.send(m)
            res["unknown_topic"] = "sent"
        except Exception as exc:  # the client's exception carries the proxy's code
            res["unknown_topic"] = repr(exc)
    finally:
        p.shutdown()
    return res


class _Checker(TransactionChecker):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def check(self, message):
        self.asked.append(message.message_id)
        return TransactionResolution.COMMIT


def txn(ep: str, topic: str, wait_s: str) -> dict:
    checker = _Checker()
    p = Producer(_cfg(ep), (topic,), checker=checker)
    p.startup()
    ids = {}
    try:
        for name in ("commit", "rollback", "orphan"):
            m = Message()
            m.topic = topic
            m.body = f"tx-{name}".encode()
            m.tag = "Tx"
            tx = p.begin_transaction()
            ids[name] = p.send(m, transaction=tx).message_id
            if name == "commit":
                tx.commit()
            elif name == "rollback":
                tx.rollback()
        deadline = time.monotonic() + float(wait_s)
        while not checker.asked and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the checker's EndTransaction goes out asynchronously
    finally:
        p.shutdown()
    return {"ids": ids, "asked": checker.asked}


class _Listener(MessageListener):
    def __init__(self, fail: str) -> None:
        self.always = fail.startswith("always:")
        self.fail = fail.split(":", 1)[1] if self.always else fail
        self.seen: list[dict] = []

    def consume(self, message):
        body = message.body.decode()
        failed = body == self.fail and (self.always or message.delivery_attempt == 1)
        self.seen.append({"body": body, "attempt": message.delivery_attempt,
                          "message_id": message.message_id, "failed": failed})
        return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS


def push(ep: str, topic: str, group: str, want_ok: str, fail: str, seconds: str) -> list:
    listener = _Listener(fail)
    c = PushConsumer(_cfg(ep), group, listener, {topic: FilterExpression("*")})
    c.startup()
    try:
        deadline = time.monotonic() + float(seconds)
        while time.monotonic() < deadline and \
                sum(not s["failed"] for s in listener.seen) < int(want_ok):
            time.sleep(0.1)
        time.sleep(0.5)  # let the last acks and forwards go out
    finally:
        c.shutdown()
    return listener.seen


COLORS = ("red", "green", "blue")


def colors(ep: str, topic: str, n: str) -> list:
    p = Producer(_cfg(ep), (topic,))
    p.startup()
    out = []
    try:
        for i in range(int(n)):
            m = Message()
            m.topic = topic
            m.body = f"colors-{i}".encode()
            m.tag = f"Tag{i % 2}"
            m.add_property("seq", str(i))
            m.add_property("color", COLORS[i % 3])
            r = p.send(m)
            out.append({"message_id": r.message_id, "body": m.body.decode(), "tag": m.tag,
                        "seq": i, "color": COLORS[i % 3]})
    finally:
        p.shutdown()
    return out


def sql(ep: str, topic: str, group: str, expr: str, want: str, hold: str = "") -> dict:
    c = SimpleConsumer(_cfg(ep), group, {topic: FilterExpression(expr, FilterType.SQL)},
                       await_duration=2)
    c.startup()
    got, error = [], None
    try:
        for _ in range(40):
            try:
                batch = c.receive(32, 30)
            except Exception as exc:  # the client's exception carries the proxy's code
                error = {"type": type(exc).__name__, "code": getattr(exc, "code", None),
                         "message": str(exc)}
                break
            for m in batch:
                got.append({"message_id": m.message_id, "body": m.body.decode(),
                            "properties": dict(m.properties or {}), "tag": m.tag})
                c.ack(m)
            if not batch and len(got) >= int(want):
                break
        result = {"got": got, "error": error}
        if hold == "hold":
            print(json.dumps(result), flush=True)
            sys.stdin.readline()
    finally:
        c.shutdown()
    return result


COMMANDS = {"produce": produce, "delays": delays, "receive": receive, "bad": bad, "txn": txn, "push": push,
            "colors": colors, "sql": sql}


def main() -> None:
    cmd, *args = sys.argv[1:]
    if cmd == "script":  # several commands in one process: [[cmd, arg...], ...] -> [result...]
        result = [COMMANDS[c](*a) for c, *a in json.loads(args[0])]
    else:
        result = COMMANDS[cmd](*args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
