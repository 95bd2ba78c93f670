"""A transaction producer in its own process, for tests that kill it mid-transaction.

    python txn_driver.py NAMESRV GROUP TOPIC hang N

sends N transactional messages at once; each local transaction prints ``LOCAL <txid>`` (the
half message is stored by then) and never returns, so the process can be killed while every
one of them is undecided.
"""
import sys
import threading

from rocketstore.client import LocalTransactionState, TransactionProducer


def main() -> None:
    namesrv, group, topic, mode, n = sys.argv[1:6]
    assert mode == "hang"
    lock = threading.Lock()
    forever = threading.Event()

    def local(msg, arg):
        with lock:
            print("LOCAL", msg.properties["UNIQ_KEY"], flush=True)
        forever.wait()
        return LocalTransactionState.UNKNOW

    p = TransactionProducer(group, namesrv, check_listener=lambda m: LocalTransactionState.UNKNOW)
    p.start()
    threads = [threading.Thread(target=p.send_message_in_transaction,
                                args=(topic, f"{mode}-{i}".encode(), local), daemon=True)
               for i in range(int(n))]
    for t in threads:
        t.start()
    forever.wait()


if __name__ == "__main__":
    main()
