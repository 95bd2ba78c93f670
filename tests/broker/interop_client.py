"""Driver run inside the interop venv (PyPI ``rocketmq==0.4.4``, Apache's C++ client).

    python interop_client.py produce NAMESRV TOPIC N      -> JSON list of send results
    python interop_client.py pull NAMESRV TOPIC GROUP     -> JSON list of pulled messages
    python interop_client.py push NAMESRV TOPIC GROUP N   -> JSON list of consumed messages
    python interop_client.py acl-produce NAMESRV TOPIC AK SK -> {"status"} or {"error"}
    python interop_client.py acl-push NAMESRV TOPIC GROUP N AK SK -> consumed messages

Prints one JSON document on stdout; the parent test applies a hard timeout.
"""
import json
import sys
import threading
import time

from rocketmq.client import Message, PullConsumer, PushConsumer, Producer


def _s(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _msg(m):
    return {"id": _s(m.id), "topic": _s(m.topic), "tags": _s(m.tags), "keys": _s(m.keys),
            "body": _s(m.body), "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "reconsume_times": m.reconsume_times}


def produce(namesrv, topic, n):
    p = Producer("PG_interop", timeout=15000)  # ms; CI machines can be slow
    p.set_namesrv_addr(namesrv)
    p.start()
    out = []
    try:
        for i in range(n):
            m = Message(topic)
            m.set_keys(f"key-{i}")
            m.set_tags(f"Tag{i % 3}")
            m.set_body(f"body-{i}")
            r = p.send_sync(m)
            out.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset,
                        "i": i})
    finally:
        p.shutdown()
    print(json.dumps(out))


def acl_produce(namesrv, topic, ak, sk):
    """One send with session credentials (the broker has ACL on); the error text if refused."""
    p = Producer("PG_interop_acl", timeout=15000)
    p.set_namesrv_addr(namesrv)
    p.set_session_credentials(ak, sk, "")
    p.start()
    try:
        m = Message(topic)
        m.set_body("acl-body")
        r = p.send_sync(m)
        out = {"status": int(r.status), "msg_id": r.msg_id}
    except Exception as exc:  # the client raises ProducerSendSyncFailed with the broker's text
        out = {"error": str(exc)}
    finally:
        p.shutdown()
    print(json.dumps(out))


def pull(namesrv, topic, group):
    c = PullConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.start()
    try:
        out = [_msg(m) for m in c.pull(topic)]
    finally:
        c.shutdown()
    print(json.dumps(out))


def push(namesrv, topic, group, n, orderly=False, credentials=None):
    got, lock, done = [], threading.Lock(), threading.Event()

    def cb(m):
        with lock:
            got.append(_msg(m))
            if len(got) >= n:
                done.set()

    c = PushConsumer(group, orderly=True) if orderly else PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    if credentials:
        c.set_session_credentials(credentials[0], credentials[1], "")
    c.subscribe(topic, cb)
    c.start()
    done.wait(60)
    # a plain consumer commits its offsets every ~5 s: let it do so at least twice
    time.sleep(1 if orderly else 11)
    c.shutdown()
    print(json.dumps(got))


def _send_when_routed(p, m, patience=30.0):
    """send_sync, again while the client has no route yet (its name-server lookup can time out
    on a loaded machine); any other failure is raised at once."""
    deadline = time.time() + patience
    while True:
        try:
            return p.send_sync(m)
        except Exception as exc:  # the client's own exception types carry only the text
            if "route" not in str(exc).lower() or time.time() > deadline:
                raise
            time.sleep(0.5)


def hold(namesrv, topic, group, n):
    """A producer and a push consumer that stay online until stdin closes; one JSON line per
    event on stdout: {"event": "msg", ...} per consumed message, {"event": "ready"} once the
    first ``n`` sent messages were consumed."""
    lock, out_lock = threading.Lock(), threading.Lock()
    count = [0]

    def emit(obj):
        with out_lock:
            print(json.dumps(obj), flush=True)

    def cb(m):
        emit({"event": "msg", **_msg(m)})
        with lock:
            count[0] += 1

    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, cb)
    c.start()
    p = Producer("PG_hold", timeout=15000)
    p.set_namesrv_addr(namesrv)
    p.start()
    try:
        for i in range(n):
            m = Message(topic)
            m.set_tags("TagA")
            m.set_body(f"hold-{i}")
            _send_when_routed(p, m)
        deadline = time.time() + 60
        while time.time() < deadline:
            with lock:
                if count[0] >= n:
                    break
            time.sleep(0.05)
        emit({"event": "ready"})
        sys.stdin.read()  # until the test closes our stdin
    finally:
        p.shutdown()
        c.shutdown()


def push_retry(namesrv, topic, group, n):
    """Fail the first delivery of every even message; finish once all succeeded."""
    deliveries, ok, lock, done = [], set(), threading.Lock(), threading.Event()

    def cb(m):
        d = _msg(m)
        i = int(d["body"].split("-")[1])
        with lock:
            deliveries.append(d)
        if i % 2 == 0 and m.reconsume_times == 0:
            raise RuntimeError("fail the first delivery")
        with lock:
            ok.add(i)
            if len(ok) >= n:
                done.set()

    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.subscribe(topic, cb)
    c.start()
    done.wait(90)
    time.sleep(6)
    c.shutdown()
    print(json.dumps(deliveries))


def produce_orderly(namesrv, topic, n):
    p = Producer("PG_interop_order", timeout=15000)
    p.set_namesrv_addr(namesrv)
    p.start()
    out = []
    try:
        for i in range(n):
            key = i % 5  # five "orders", each sent to one queue by the hashing selector
            m = Message(topic)
            m.set_keys(f"order-{key}")
            m.set_body(f"{key}:{i // 5}")
            r = p.send_orderly(m, key)
            out.append({"status": int(r.status), "msg_id": r.msg_id, "i": i})
    finally:
        p.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "acl-produce":
        acl_produce(*sys.argv[2:6])
    elif mode == "acl-push":
        push(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
             credentials=(sys.argv[6], sys.argv[7]))
    elif mode == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "pull":
        pull(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "push":
        push(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "produce-orderly":
        produce_orderly(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "push-orderly":
        push(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), orderly=True)
    elif mode == "hold":
        hold(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "push-retry":
        push_retry(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown mode {mode}")
