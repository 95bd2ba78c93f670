import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's own producer under load, for kill-point tests: THREADS threads share one
 *  DefaultMQProducer (one connection, as RocketMQ's benchmark Producer) and send unique bodies
 *  for SECONDS; each acknowledged send prints "ACK <body> <status>" at once, a failed one
 *  "FAIL <body>". Prints DONE at the end. Args: namesrv topic threads seconds. */
public class AckedProducer {
  public static void main(String[] args) throws Exception {
    final String ns = args[0], topic = args[1];
    final int threads = Integer.parseInt(args[2]);
    final long end = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000L;
    final DefaultMQProducer p = new DefaultMQProducer("PG_acked");
    p.setNamesrvAddr(ns);
    p.setSendMsgTimeout(3000);
    p.start();
    final AtomicLong seq = new AtomicLong();
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      ts[t] = new Thread(() -> {
        while (System.currentTimeMillis() < end) {
          String body = "j-" + seq.getAndIncrement();
          try {
            SendResult r = p.send(new Message(topic, "TagA", body, body.getBytes("UTF-8")));
            synchronized (System.out) {
              System.out.println("ACK " + body + " " + r.getSendStatus());
              System.out.flush();
            }
          } catch (Exception e) {
            synchronized (System.out) {
              System.out.println("FAIL " + body);
              System.out.flush();
            }
            try { Thread.sleep(100); } catch (InterruptedException ie) { return; }
          }
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    p.shutdown();
    System.out.println("DONE");
  }
}
