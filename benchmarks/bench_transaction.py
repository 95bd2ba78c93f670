"""What does a transactional message cost next to a plain one?

    .venv/bin/python benchmarks/bench_transaction.py --messages 2000

Two measurements, each against a baseline in the same run:
1. store level (no network): ``put_message`` of N messages vs N transactions through
   ``TransactionalMessageService`` (half put + END_TRANSACTION commit: decision lookup through
   the index, committed copy, op record);
2. end to end against ``rocketstore serve``: N sequential ``Producer.send`` vs N sequential
   ``TransactionProducer.send_message_in_transaction`` (commit), one client thread.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402
from rocketstore.broker.state.offsets import ConsumerOffsetManager  # noqa: E402
from rocketstore.broker.state.topics import TopicConfigManager  # noqa: E402
from rocketstore.broker.services.transaction import (EndTransactionRequest, TransactionConfig,  # noqa: E402
                                                     TransactionalMessageService)
from rocketstore.format.message import (TRANSACTION_COMMIT_TYPE,  # noqa: E402
                                        TRANSACTION_PREPARED_TYPE, create_uniq_key)


def store_level(n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cfg = StoreConfig(store_path_root_dir=os.path.join(d, "s"),
                          mapped_file_size_commitlog=256 << 20)
        with MessageStore(cfg) as store:
            body = b"x" * 512
            t0 = time.perf_counter()
            for i in range(n):
                store.put_message(Message(topic="Plain", body=body, queue_id=i % 4))
            plain = time.perf_counter() - t0
            conf = os.path.join(d, "s", "config")
            svc = TransactionalMessageService(store, TopicConfigManager(conf),
                                              ConsumerOffsetManager(conf), store.put_message,
                                              TransactionConfig())
            t0 = time.perf_counter()
            for i in range(n):
                m = Message(topic="Txn", body=body, queue_id=i % 4,
                            sys_flag=TRANSACTION_PREPARED_TYPE,
                            properties={"TRAN_MSG": "true", "PGROUP": "PG",
                                        "UNIQ_KEY": create_uniq_key()})
                r = store.put_message(svc.half_message(m))
                res = svc.end_transaction(EndTransactionRequest(
                    "PG", r.queue_offset, r.wrote_offset, TRANSACTION_COMMIT_TYPE))
                assert res == (0, None), res
            txn = time.perf_counter() - t0
            store.wait_dispatched(30)
    return {"plain_msg_s": n / plain, "txn_s": n / txn, "ratio": plain / txn}


def end_to_end(n: int) -> dict:
    from rocketstore.client import LocalTransactionState, Producer, TransactionProducer
    from tests.broker.conftest import start_server

    with tempfile.TemporaryDirectory() as d:
        srv = start_server(os.path.join(d, "store"))
        try:
            body = b"x" * 512
            with Producer("PG_plain", srv.namesrv) as p:
                p.send("Plain", body)  # route lookup outside the timing
                t0 = time.perf_counter()
                for _ in range(n):
                    p.send("Plain", body)
                plain = time.perf_counter() - t0
            commit = LocalTransactionState.COMMIT_MESSAGE
            with TransactionProducer("PG_txn", srv.namesrv,
                                     check_listener=lambda m: commit) as p:
                p.send_message_in_transaction("Txn", body, lambda m, a: commit)
                t0 = time.perf_counter()
                for _ in range(n):
                    p.send_message_in_transaction("Txn", body, lambda m, a: commit)
                txn = time.perf_counter() - t0
        finally:
            srv.stop()
    return {"plain_msg_s": n / plain, "txn_s": n / txn, "ratio": plain / txn}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=2000)
    a = ap.parse_args()
    out = {"load_avg": os.getloadavg()[0], "store": store_level(a.messages),
           "end_to_end": end_to_end(a.messages)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
