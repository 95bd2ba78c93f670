import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's TransactionMQProducer: ROWS transactional messages (a half message, the local
 *  transaction answering COMMIT_MESSAGE, the END_TRANSACTION the client sends one-way), SIZE-byte
 *  bodies, THREADS threads calling sendMessageInTransaction on one producer. Prints one line:
 *  {"rows": n, "seconds": s, "rows_per_s": r, "failed": f}. Args: namesrv topic rows size threads. */
public class TxnProducerBench {
  public static void main(String[] args) throws Exception {
    final String ns = args[0], topic = args[1];
    final int rows = Integer.parseInt(args[2]), size = Integer.parseInt(args[3]);
    final int threads = Integer.parseInt(args[4]);
    final TransactionMQProducer p = new TransactionMQProducer("PG_txn_bench");
    p.setNamesrvAddr(ns);
    p.setSendMsgTimeout(10000);
    p.setTransactionListener(new TransactionListener() {
      public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
        return LocalTransactionState.COMMIT_MESSAGE;
      }
      public LocalTransactionState checkLocalTransaction(MessageExt m) {
        return LocalTransactionState.COMMIT_MESSAGE;
      }
    });
    p.start();
    final byte[] body = new byte[size];
    Arrays.fill(body, (byte) 'x');
    for (int i = 0; i < 200; i++) {  // warm-up: routes, connections, JIT
      p.sendMessageInTransaction(new Message(topic + "Warm", body), null);
    }
    final AtomicInteger next = new AtomicInteger(), failed = new AtomicInteger();
    Thread[] ts = new Thread[threads];
    final long t0 = System.nanoTime();
    for (int t = 0; t < threads; t++) {
      ts[t] = new Thread(() -> {
        int i;
        while ((i = next.getAndIncrement()) < rows) {
          try {
            SendResult r = p.sendMessageInTransaction(new Message(topic, body), null);
            if (r.getSendStatus() != SendStatus.SEND_OK) failed.incrementAndGet();
          } catch (Exception e) {
            failed.incrementAndGet();
          }
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    double s = (System.nanoTime() - t0) / 1e9;
    System.out.println(String.format(Locale.ROOT,
        "{\"rows\": %d, \"seconds\": %.3f, \"rows_per_s\": %.0f, \"failed\": %d}",
        rows, s, rows / s, failed.get()));
    p.shutdown();
  }
}
