import java.util.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's own producer and pull consumer, finding the broker only through the name
 *  server given. Prints SEND <status> per message, PULL <body> per message read, then DONE.
 *  Args: namesrv topic count. */
public class RouteClient {
  public static void main(String[] args) throws Exception {
    String ns = args[0], topic = args[1];
    int n = Integer.parseInt(args[2]);
    DefaultMQProducer p = new DefaultMQProducer("PG_route");
    p.setNamesrvAddr(ns);
    p.setRetryTimesWhenSendFailed(0);
    p.start();
    try {
      for (int i = 0; i < n; i++) {
        SendResult r = null;
        for (int attempt = 0; r == null; attempt++) {  // the first send may race the route
          try {
            r = p.send(new Message(topic, "TagA", "key-" + i, ("route-" + i).getBytes("UTF-8")));
          } catch (Exception e) {
            if (attempt == 10) {
              System.out.println("SENDERR " + e.getMessage().split("\n")[0]);
              System.exit(1);
            }
            Thread.sleep(500);
          }
        }
        System.out.println("SEND " + r.getSendStatus());
      }
    } finally {
      p.shutdown();
    }
    DefaultMQPullConsumer c = new DefaultMQPullConsumer("CG_route");
    c.setNamesrvAddr(ns);
    c.start();
    try {
      for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
        long offset = 0;
        while (true) {
          PullResult r = c.pull(mq, "*", offset, 32);
          if (r.getPullStatus() != PullStatus.FOUND) break;
          for (MessageExt m : r.getMsgFoundList()) {
            System.out.println("PULL " + new String(m.getBody(), "UTF-8"));
          }
          offset = r.getNextBeginOffset();
        }
      }
    } finally {
      c.shutdown();
    }
    System.out.println("DONE");
  }
}
