import java.util.*;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.*;

/** RocketMQ 4.9.7's own producer and pull consumer signing with AclClientRPCHook against a broker
 *  with aclEnable=true. Prints one line per step, then DONE. Args: namesrv. */
public class AclClient {
  public static void main(String[] args) {
    try {
      run(args[0]);
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }

  static AclClientRPCHook hook(String ak, String sk) {
    return new AclClientRPCHook(new SessionCredentials(ak, sk));
  }

  static String err(Throwable t) {
    while (t != null && !(t instanceof MQBrokerException)) {
      t = t.getCause();
    }
    if (t == null) {
      return "ERR other";
    }
    MQBrokerException e = (MQBrokerException) t;
    return "ERR " + e.getResponseCode() + " " + e.getErrorMessage();
  }

  static void send(String label, String ns, String ak, String sk, String topic, String body) {
    DefaultMQProducer p = new DefaultMQProducer("PG_acl_" + label, hook(ak, sk));
    p.setNamesrvAddr(ns);
    p.setRetryTimesWhenSendFailed(0);
    p.setSendMsgTimeout(20000);  // a loaded CI machine: the first send (route + JIT) may take > 3 s
    try {
      p.start();
      SendResult r = null;
      for (int i = 0; i < 20; i++) {  // the first send may race the topic's route
        try {
          r = p.send(new Message(topic, body.getBytes("UTF-8")));
          break;
        } catch (org.apache.rocketmq.client.exception.MQClientException e) {
          if (i == 19) throw e;
          Thread.sleep(500);
        }
      }
      System.out.println("SEND " + label + " " + r.getSendStatus());
    } catch (Throwable t) {
      System.out.println("SEND " + label + " " + err(t));
    } finally {
      p.shutdown();
    }
  }

  static void pull(String label, String ns, String ak, String sk, String group, String topic) {
    DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook(ak, sk));
    c.setNamesrvAddr(ns);
    try {
      c.start();
      List<String> bodies = new ArrayList<>();
      for (MessageQueue mq : new TreeSet<>(c.fetchSubscribeMessageQueues(topic))) {
        PullResult r = c.pull(mq, "*", 0, 32);
        if (r.getMsgFoundList() != null) {
          for (MessageExt m : r.getMsgFoundList()) {
            bodies.add(new String(m.getBody(), "UTF-8"));
          }
        }
      }
      Collections.sort(bodies);
      System.out.println("PULL " + label + " " + bodies);
    } catch (Throwable t) {
      System.out.println("PULL " + label + " " + err(t));
    } finally {
      c.shutdown();
    }
  }

  static void push(String label, String ns, String ak, String sk, String group, String topic,
                   int expect) throws Exception {
    DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(ak, sk),
        new org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely());
    c.setNamesrvAddr(ns);
    c.setConsumeFromWhere(org.apache.rocketmq.common.consumer.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
    List<String> bodies = Collections.synchronizedList(new ArrayList<>());
    c.subscribe(topic, "*");
    c.registerMessageListener((org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently)
        (msgs, ctx) -> {
          for (MessageExt m : msgs) {
            bodies.add(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
          }
          return org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
    c.start();
    long deadline = System.currentTimeMillis() + 60000;
    while (bodies.size() < expect && System.currentTimeMillis() < deadline) {
      Thread.sleep(200);
    }
    c.shutdown();
    List<String> sorted = new ArrayList<>(bodies);
    Collections.sort(sorted);
    System.out.println("PUSH " + label + " " + sorted);
  }

  static void run(String ns) throws Exception {
    send("allowed", ns, "RocketMQ", "12345678", "topicB", "hello");
    send("denied", ns, "RocketMQ", "12345678", "topicA", "no");
    send("defaultDenied", ns, "RocketMQ", "12345678", "topicZ", "no");
    send("badSignature", ns, "RocketMQ", "wrong-secret", "topicB", "no");
    send("unknownKey", ns, "nobody99", "12345678", "topicB", "no");
    send("admin", ns, "rocketmq2", "12345678", "topicB", "from-admin");
    pull("allowed", ns, "RocketMQ", "12345678", "groupB", "topicB");
    pull("groupDenied", ns, "RocketMQ", "12345678", "groupA", "topicB");
    push("allowed", ns, "RocketMQ", "12345678", "groupPush", "topicB", 2);
    System.out.println("DONE");
  }
}
