import java.util.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's DefaultMQProducer, THREADS threads on one instance (one connection, as the
 *  benchmark Producer), 1 KiB bodies, synchronous sends for WARMUP + SECONDS seconds; the send
 *  round trips of the last SECONDS are kept. Prints one line:
 *  {"msgs_per_s": N, "p50_ms": x, "p99_ms": y, "max_ms": z, "failed": f}.
 *  Args: namesrv topic threads seconds [warmup_seconds]. */
public class LatencyProducer {
  public static void main(String[] args) throws Exception {
    final String ns = args[0], topic = args[1];
    final int threads = Integer.parseInt(args[2]);
    final long seconds = Long.parseLong(args[3]);
    final long warm = args.length > 4 ? Long.parseLong(args[4]) : 3;
    final DefaultMQProducer p = new DefaultMQProducer("PG_latency");
    p.setNamesrvAddr(ns);
    p.setSendMsgTimeout(5000);
    p.start();
    final byte[] body = new byte[1024];
    Arrays.fill(body, (byte) 'x');
    final long t0 = System.nanoTime();
    final long from = t0 + warm * 1_000_000_000L, to = from + seconds * 1_000_000_000L;
    final long[][] lat = new long[threads][];
    final int[] count = new int[threads];
    final AtomicInteger failed = new AtomicInteger();
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      final int me = t;
      lat[me] = new long[1 << 20];
      ts[t] = new Thread(() -> {
        while (true) {
          long a = System.nanoTime();
          if (a >= to) return;
          try {
            p.send(new Message(topic, "TagA", body));
          } catch (Exception e) {
            failed.incrementAndGet();
            continue;
          }
          long b = System.nanoTime();
          if (a >= from && count[me] < lat[me].length) lat[me][count[me]++] = b - a;
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    p.shutdown();
    int n = 0;
    for (int c : count) n += c;
    long[] all = new long[n];
    int k = 0;
    for (int t = 0; t < threads; t++) {
      System.arraycopy(lat[t], 0, all, k, count[t]);
      k += count[t];
    }
    Arrays.sort(all);
    double p50 = n > 0 ? all[(int) (n * 0.50)] / 1e6 : -1;
    double p99 = n > 0 ? all[Math.min(n - 1, (int) (n * 0.99))] / 1e6 : -1;
    double max = n > 0 ? all[n - 1] / 1e6 : -1;
    System.out.printf(Locale.ROOT,
        "{\"msgs_per_s\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"failed\": %d}%n",
        n / seconds, p50, p99, max, failed.get());
  }
}
